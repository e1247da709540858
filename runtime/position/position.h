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
#include <optional>
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

// A rank's record as read back (from a mapped file or a store), its
// clocks turned into ages: what the table is made of.
struct PositionSample {
  int rank = 0;
  int64_t stage = 0;  // RankStage
  int64_t step = 0;
  int64_t compute_instr = -1;
  int64_t compute_age_ns = 0;  // since it was issued
  int64_t comm_instr = -1;     // -HostCollective for the trainer's own
  int64_t comm_age_ns = 0;
  bool comm_busy = false;
  enum class Pulse { kNone, kBeating, kSilent } pulse = Pulse::kNone;
  std::vector<std::string> labels;  // instruction id -> label
};

// One rank's line of the table, judged: what --trace records and
// tools/viz draws.
struct RankPosition {
  int rank = 0;
  RankStage stage = RankStage::kStarting;
  int64_t step = 0;
  int64_t instruction = -1;   // the collective it is in, else the compute
                              // instruction issued last; -1: none, or the
                              // trainer's own collective
  int64_t instructions = 0;   // in its plan; 0 when its labels are unknown
  std::string label;          // "backward \"h1 = linear\"", "all-reduce of bucket 1"
  std::string state;          // "in all-reduce of bucket 1", "running data \"...\""
  bool in_collective = false;
  double seconds = 0;         // how long it has been there
  bool behind = false;
  std::string where;          // the table's text after "rank N: "
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
  // Its record now, as a reader would sample it (pulse kNone), with its
  // labels unless `with_labels` is false.
  PositionSample Sample(int rank, bool with_labels = true) const;

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

// The samples judged, in rank order. The rank behind is `behind` when
// given (the launcher knows a silent rank), else the only one whose pulse
// stopped while the others' beat, else the one whose step and instruction
// are strictly behind every other's, if one is.
std::vector<RankPosition> JudgePositions(std::vector<PositionSample> samples, int behind = -1);

// Every rank's position from the files in `dir`, judged (none: empty).
std::vector<RankPosition> ReadPositions(const std::string& dir, int world_size, int behind = -1);

// "where each rank was:\n  rank 0: ...\n", the rank behind marked
// "<- behind"; "" for no positions.
std::string FormatPositionTable(const std::vector<RankPosition>& positions);

// FormatPositionTable(ReadPositions(dir, world_size, behind)).
std::string PositionTable(const std::string& dir, int world_size, int behind = -1);

// What the local launcher leaves in the positions folder when it stops a
// failed job (before its SIGTERM), so that each rank's trace can say why
// and who was behind.
struct StopNote {
  int behind = -1;      // the rank the launcher blames for silence, or -1
  std::string reason;   // its error line
};
// Written whole (then renamed) into <dir>/stopped; best effort.
void WriteStopNote(const std::string& dir, const StopNote& note);
// The note in `dir`, if the launcher left one.
std::optional<StopNote> ReadStopNote(const std::string& dir);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_POSITION_POSITION_H_
