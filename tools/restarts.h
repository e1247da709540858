// A local job that outlives a lost rank: train's --max_restarts on the
// local launcher, and the exit code that tells an outside launcher (Slurm's
// --requeue, a wrapper script) that the run can continue.
//
//   bool resumable = false;
//   absl::Status s = LaunchWithRestarts(job, &resumable);
//   return resumable ? kResumableExitCode : 1;
#ifndef TRAINC_TOOLS_RESTARTS_H_
#define TRAINC_TOOLS_RESTARTS_H_

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
  std::ostream* log = nullptr;  // the restart lines (train's stderr)
};

// LaunchLocalWorkers, restarting every rank after a failure at most
// job.max_restarts times, each from the newest whole checkpoint the run
// wrote (as --resume does), else from its start, each restart logged with
// its cause. After a failure that ends the job, `*resumable` says whether
// a checkpoint of the run can continue it; the error then says which.
absl::Status LaunchWithRestarts(const RestartingJob& job, bool* resumable);

// `argv` with its --resume and --init-from options replaced by
// "--resume `checkpoint`" (right after argv[0]).
std::vector<std::string> WithResume(const std::vector<std::string>& argv,
                                    const std::string& checkpoint);

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
