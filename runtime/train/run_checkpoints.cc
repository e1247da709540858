#include "runtime/train/run_checkpoints.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

// Where a run stopped by a signal writes its checkpoint: the run's
// checkpoint folder (checkpoint_every, or a checkpoint_dir given without
// it), else --save, else checkpoints/<model> (the folder's default).
std::string StopCheckpointPath(const Plan& plan, const TrainOptions& options, int64_t step) {
  const bool default_dir = plan.checkpoints.dir == absl::StrCat("checkpoints/", plan.model);
  if (plan.checkpoints.every > 0 || !default_dir) {
    return CheckpointPath(plan.checkpoints.dir, step);
  }
  if (!options.save_path.empty()) return options.save_path;
  return CheckpointPath(absl::StrCat("checkpoints/", plan.model), step);
}

}  // namespace

TrainingState StateAfter(int64_t step, int64_t steps_per_epoch) {
  TrainingState state;
  state.step = step;
  state.epoch = step / steps_per_epoch;
  state.step_in_epoch = step % steps_per_epoch;
  return state;
}

absl::Status SavePeriodicCheckpoint(const Plan& plan, Device& device, const TrainingState& now,
                                    const Sharding* sharding, int rank, std::ostream& log,
                                    const char* line_start) {
  const CheckpointConfig& periodic = plan.checkpoints;
  const std::string path = CheckpointPath(periodic.dir, now.step);
  absl::Status saved = SaveCheckpoint(path, plan, device, now, sharding);
  if (rank != 0) return saved;  // ZeRO-1: this rank's part of the gather
  if (!saved.ok()) {
    // A full disk: the writes were temporary files, now gone; the
    // checkpoints already there are whole.
    absl::StatusOr<std::vector<std::string>> kept = CheckpointsNewestFirst(periodic.dir);
    return absl::Status(saved.code(), absl::StrCat(
        "step ", now.step, ": checkpoint not written: ", saved.message(), "; ",
        kept.ok() && !kept->empty()
            ? absl::StrCat("the newest whole one is ", kept->front(),
                           " (continue with --resume ", periodic.dir, ")")
            : std::string("no earlier checkpoint")));
  }
  RETURN_IF_ERROR(PruneCheckpoints(periodic.dir, periodic.keep));
  log << absl::StrFormat("%scheckpoint %s\n", line_start, path) << std::flush;
  return absl::OkStatus();
}

absl::StatusOr<std::string> SaveStopCheckpoint(const Plan& plan, const TrainOptions& options,
                                               Device& device, const TrainingState& now,
                                               const Sharding* sharding, int rank) {
  const CheckpointConfig& periodic = plan.checkpoints;
  const std::string path = StopCheckpointPath(plan, options, now.step);
  const bool written = periodic.every > 0 && now.step % periodic.every == 0;
  if (!written && rank != 0 && plan.zero > 0) {
    RETURN_IF_ERROR(SaveCheckpoint(path, plan, device, now, sharding));
  }
  if (rank == 0) {
    if (!written) {
      const std::string folder = std::filesystem::path(path).parent_path().string();
      RETURN_IF_ERROR(PrepareCheckpointFolder(folder.empty() ? "." : folder));
      RETURN_IF_ERROR(SaveCheckpoint(path, plan, device, now, sharding));
    }
    if (periodic.every > 0) RETURN_IF_ERROR(PruneCheckpoints(periodic.dir, periodic.keep));
  }
  return path;
}

absl::Status SaveFinalCheckpoint(const Plan& plan, const std::string& path, Device& device,
                                 const TrainingState& out, const Sharding* sharding, int rank,
                                 std::ostream& log) {
  if (rank == 0 || plan.zero > 0) {
    RETURN_IF_ERROR(SaveCheckpoint(path, plan, device, out, sharding));
  }
  if (rank == 0) log << "checkpoint: " << path << " (step " << out.step << ")\n";
  return absl::OkStatus();
}

}  // namespace trainc
