// Where a rank is in its plan, for the tables a stuck or failed job prints:
// a private part of runtime/train (trainer.cc's). This rank publishes on a
// PositionBoard (the local launcher reads it); under a cluster launcher
// with a shared rendezvous folder, or with a Redis rendezvous, the ranks
// publish where each can read all of them.
//
//   RankPositions positions;
//   RETURN_IF_ERROR(positions.Open(rank));
//   ... positions.board().Stage(RankStage::kStep, step) ...
//   error message: positions.Where()
#ifndef TRAINC_RUNTIME_TRAIN_RANK_POSITIONS_H_
#define TRAINC_RUNTIME_TRAIN_RANK_POSITIONS_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/position/position.h"
#include "runtime/position/redis_positions.h"
#include "runtime/train/trainer.h"

namespace trainc {

class RankPositions {
 public:
  // This rank's board: in a "positions" folder of the rendezvous folder
  // when the ranks share one and no local launcher reads them, else where
  // the launcher says (TRAINC_POSITION_DIR), else private. A shared board
  // beats, so that a frozen rank shows in the table.
  absl::Status Open(const RankContext& rank);
  // Ranks that meet through Redis: this rank's position published there
  // (once the board has its labels). A failure is a warning on `log`.
  void PublishToRedis(const RankContext& rank, std::ostream& log);

  PositionBoard& board() const { return *board_; }
  // Whether this rank can read every rank's position (and prints the table).
  bool Shared() const { return !shared_dir_.empty() || redis_ != nullptr; }
  // The local launcher's positions folder (it prints the table), or "".
  const std::string& launcher_dir() const { return launcher_dir_; }

  // This rank's position, or when shared every rank's table.
  std::string Where() const;
  // Every rank's position, from wherever the ranks publish (only this
  // rank's when nowhere they share); `behind` as in JudgePositions.
  std::vector<RankPosition> All(int behind = -1) const;

 private:
  int rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<PositionBoard> board_;  // where this rank is (the launcher reads it)
  std::string shared_dir_;    // every rank's positions, when this rank prints the table
  std::string launcher_dir_;  // the local launcher's positions folder (it prints the table)
  // Ranks that meet through Redis publish there (and print the table).
  std::unique_ptr<RedisPositions> redis_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RANK_POSITIONS_H_
