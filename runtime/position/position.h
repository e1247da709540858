// Where each rank is in its plan, published as it runs, so a stuck or
// stopped job can say where every rank was and which one is behind.
//
// A worker started by the local launcher finds TRAINC_POSITION_DIR in its
// environment and publishes into <dir>/rank-<r>.pos, one small record
// mapped into memory (a few relaxed atomic stores per instruction, no
// lock, no system call), beside <dir>/rank-<r>.labels, its plan's
// instruction labels written once. The launcher reads them all when a rank
// fails or stops sending heartbeats and prints one table:
//
//   where each rank was (step, instruction):
//     rank 0: step 4, waiting in all-reduce of bucket 2 for 61.0 s
//     rank 1: step 4, backward "grad/h.3 = linear_grad_input" (instruction
//             57 of 120) for 61.0 s  <- behind
//
// The clock is CLOCK_MONOTONIC (steady_clock), the same for every process
// of the machine.
#ifndef TRAINC_RUNTIME_POSITION_POSITION_H_
#define TRAINC_RUNTIME_POSITION_POSITION_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc {

inline constexpr char kPositionDirEnv[] = "TRAINC_POSITION_DIR";

// What a rank is doing besides its step's instructions.
enum class RankStage : int64_t { kStarting = 0, kStep, kEvaluating, kCheckpointing, kDone };

// The trainer's own collectives between steps (not the plan's).
enum class HostCollective : int64_t { kLossSum = 1, kStopVote };

// One rank's position: what it publishes, what the launcher reads.
struct PositionRecord {
  std::atomic<int64_t> magic;
  std::atomic<int64_t> stage;           // RankStage
  std::atomic<int64_t> step;            // the optimizer step running (1-based)
  std::atomic<int64_t> compute_instr;   // the compute instruction issued last (-1: none)
  std::atomic<int64_t> compute_since;   // ns when it was issued
  std::atomic<int64_t> comm_instr;      // the collective running, or last run
  std::atomic<int64_t> comm_since;      // ns when it began
  std::atomic<int64_t> comm_busy;       // 1 while it runs
  std::atomic<int64_t> alive;           // ns of the pulse thread's last beat (0: none)
};

// A rank's publisher. Without TRAINC_POSITION_DIR it writes to memory of
// its own, which the watchdog can still read for its message.
class PositionBoard {
 public:
  // The board of `rank`: in `dir`, else in TRAINC_POSITION_DIR when set (an
  // error if its file cannot be made), else private.
  static absl::StatusOr<std::unique_ptr<PositionBoard>> ForRank(int rank,
                                                                const std::string& dir = "");
  ~PositionBoard();
  PositionBoard(const PositionBoard&) = delete;
  PositionBoard& operator=(const PositionBoard&) = delete;

  // The plan's instruction labels, for the launcher's table (written once).
  void SetLabels(const Plan& plan);
  void Stage(RankStage stage, int64_t step);
  void Compute(int64_t step, int instruction);
  void CommBegin(int instruction);
  void CommBegin(HostCollective what);
  void CommEnd();

  // This rank's own line of the table ("step 4, backward ... for 3.0 s").
  std::string Where() const;

  // Beats `alive` from a thread of its own until destroyed, so that the
  // table can tell a frozen rank (SIGSTOP, a hung machine) from the ranks
  // waiting for it in the same collective.
  void StartPulse();

 private:
  PositionBoard() = default;
  std::thread pulse_;
  std::atomic<bool> stop_{false};
  PositionRecord* record_ = nullptr;
  void* mapped_ = nullptr;       // the file's mapping, when shared
  PositionRecord own_{};         // when not
  std::string labels_path_;
  std::vector<std::string> labels_;  // instruction id -> "backward \"label\""
};

// The table of every rank's position from the files in `dir` ("" when
// none can be read). The rank marked "<- behind" is `behind` when given
// (the launcher knows a silent rank), else the only one whose pulse
// stopped while the others' beat, else the one whose step and instruction
// are strictly behind every other's, if one is.
std::string PositionTable(const std::string& dir, int world_size, int behind = -1);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_POSITION_POSITION_H_
