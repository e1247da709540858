#include "runtime/train/rank_positions.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {

absl::Status RankPositions::Open(const RankContext& rank) {
  rank_ = rank.rank;
  world_size_ = rank.world_size;
  // Under a cluster launcher (torchrun, srun) with a shared rendezvous
  // folder, the ranks publish there, and a failing rank prints every
  // rank's position itself (the local launcher does it for its own jobs).
  const char* launcher_positions = std::getenv(kPositionDirEnv);
  if ((launcher_positions == nullptr || *launcher_positions == '\0') &&
      !rank.rendezvous_dir.empty() && rank.world_size > 1) {
    std::error_code ignored;
    const std::string dir = rank.rendezvous_dir + "/positions";
    if (std::filesystem::create_directories(dir, ignored) || std::filesystem::is_directory(dir)) {
      shared_dir_ = dir;
    }
  }
  if (launcher_positions != nullptr) launcher_dir_ = launcher_positions;
  ASSIGN_OR_RETURN(board_, PositionBoard::ForRank(rank.rank, shared_dir_));
  // A shared board beats, so that a frozen rank shows in the table.
  if (!shared_dir_.empty() || !launcher_dir_.empty()) board_->StartPulse();
  return absl::OkStatus();
}

void RankPositions::PublishToRedis(const RankContext& rank, std::ostream& log) {
  if (rank.redis.empty() || rank.world_size == 1) return;
  const size_t colon = rank.redis.rfind(':');
  absl::StatusOr<std::unique_ptr<RedisPositions>> redis = RedisPositions::Connect(
      rank.redis.substr(0, colon), std::atoi(rank.redis.c_str() + colon + 1), rank.job);
  if (!redis.ok()) {
    // Only the table is lost: training goes on.
    log << "warning: " << redis.status().message() << "; a failure will say only where this "
        << "rank was\n";
    return;
  }
  redis_ = *std::move(redis);
  redis_->StartPublishing(board_.get(), rank.rank);
}

std::string RankPositions::Where() const {
  if (!Shared()) return board_->Where();
  return absl::StrCat(board_->Where(), "\n", FormatPositionTable(All()));
}

std::vector<RankPosition> RankPositions::All(int behind) const {
  const std::string& dir = !shared_dir_.empty() ? shared_dir_ : launcher_dir_;
  if (!dir.empty()) return ReadPositions(dir, world_size_, behind);
  if (redis_) return redis_->ReadAll(world_size_, behind);
  return JudgePositions({board_->Sample(rank_)}, behind);
}

}  // namespace trainc
