// A local job that outlives a lost rank: train's --max_restarts on the
// local launcher, and the exit code that tells an outside launcher (Slurm's
// --requeue, a wrapper script) that the run can continue.
//
//   bool resumable = false;
//   absl::Status s = LaunchWithRestarts(job, &resumable);
//   return resumable ? kResumableExitCode : 1;
#ifndef TRAINC_TOOLS_RESTARTS_H_
#define TRAINC_TOOLS_RESTARTS_H_

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/launch/launcher.h"

namespace trainc {

// train's exit code when a rank of a local job failed (died, hung or
// exited non-zero) after --max_restarts restarts, and a checkpoint of the
// run can continue it (the message names it: --resume CHECKPOINT).
// sysexits.h's EX_TEMPFAIL: "a temporary failure; retry".
inline constexpr int kResumableExitCode = 75;

struct RestartingJob {
  int world_size = 1;
  std::vector<std::string> argv;  // the workers' command line
  // checkpoint_every's folder; empty: the run writes no periodic checkpoints
  // (every restart starts from the beginning).
  std::string checkpoint_dir;
  int max_restarts = 0;
  // --min_gpus: when a rank fails after the restarts (0: never), the job
  // goes on with fewer ranks, as long as at least this many, with the same
  // global batch (more accumulation): needs the plan's batch.
  int min_gpus = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  bool on_gpus = false;  // a smaller job leaves the failed rank's GPU out
  std::ostream* log = nullptr;  // the restart lines (train's stderr)
};

// LaunchLocalWorkers, restarting every rank after a failure at most
// job.max_restarts times, each from the newest whole checkpoint the run
// wrote (as --resume does), else from its start, each restart logged with
// its cause; with job.min_gpus, a failure after those restarts goes on
// with fewer ranks (the largest count from min_gpus up, below the failed
// job's, that divides the global batch into whole micro-batches), from the
// newest checkpoint, with job.max_restarts restarts again, and so on down
// to min_gpus. After a failure that ends the job, `*resumable` says whether
// a checkpoint of the run can continue it; the error then says which.
absl::Status LaunchWithRestarts(const RestartingJob& job, bool* resumable);

// `argv` with its --resume and --init-from options replaced by
// "--resume `checkpoint`" (right after argv[0]).
std::vector<std::string> WithResume(const std::vector<std::string>& argv,
                                    const std::string& checkpoint);

// `argv` with its --gpus, --accumulate and --global_batch options replaced
// by "--gpus `world` --global_batch `global_batch`" (the front end infers
// the accumulation).
std::vector<std::string> WithWorld(const std::vector<std::string>& argv, int world,
                                   int64_t global_batch);

// The largest rank count in [min_gpus, world) that divides `global_batch`
// into whole micro-batches of `micro_batch`; 0 when none.
int SmallerWorld(int world, int min_gpus, int64_t global_batch, int64_t micro_batch);

// The newest checkpoint in `dir` whose weights and training state were both
// written at `since` or later (by this run, not an older one that wrote to
// the same folder); "" when none.
std::string NewestCheckpointSince(const std::string& dir,
                                  std::filesystem::file_time_type since);

// How the failed rank ended: "died of signal 9 (Killed)", "exited with
// status 1", or "failed" (a hang the launcher named, then stopped).
std::string FailureCause(const RankFailure& failure);

}  // namespace trainc

#endif  // TRAINC_TOOLS_RESTARTS_H_
