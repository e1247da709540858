#include "tools/restarts.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include <chrono>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/checkpoint/checkpoint.h"

namespace trainc {
namespace {

// File times come from the kernel's coarse clock, a few milliseconds behind
// the one `now()` reads: a checkpoint written right after the start may
// look older than it.
constexpr std::chrono::seconds kFileClockSlack{2};

// Where every rank starts again: a checkpoint, or the beginning.
std::string StartingPoint(const std::string& checkpoint) {
  return checkpoint.empty() ? "the beginning (no checkpoint written yet)" : checkpoint;
}

// "; the run can continue from CHECKPOINT: run again with --resume ..."
std::string ResumableNote(const RankFailure& failure, int max_restarts,
                          const std::string& checkpoint) {
  const std::string gave_up =
      max_restarts > 0
          ? absl::StrFormat("gave up after %d restart(s) (--max_restarts %d): ",
                            failure.restarts, max_restarts)
          : "";
  return absl::StrFormat(
      "%srank %d %s at step %d; the run can continue from %s: run the same "
      "command with --resume %s (exit code %d)",
      gave_up, failure.rank, FailureCause(failure), failure.step, checkpoint, checkpoint,
      kResumableExitCode);
}

// `argv` without the options `flags` (--flag VALUE or --flag=VALUE), with
// `added` right after argv[0].
std::vector<std::string> Replacing(const std::vector<std::string>& argv,
                                   const std::vector<std::string>& flags,
                                   const std::vector<std::string>& added) {
  std::vector<std::string> out = {argv[0]};
  out.insert(out.end(), added.begin(), added.end());
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {  // the rest is positional
      out.insert(out.end(), argv.begin() + i, argv.end());
      break;
    }
    bool dropped = false;
    for (const std::string& flag : flags) {
      if (arg == flag) {
        ++i;  // and its value
        dropped = true;
      } else if (absl::StartsWith(arg, flag + "=")) {
        dropped = true;
      }
    }
    if (!dropped) out.push_back(arg);
  }
  return out;
}

// CUDA_VISIBLE_DEVICES without the device of local rank `rank` of `world`,
// for the workers of a smaller job (they inherit this process's).
void LeaveOutDevice(int rank, int world) {
  std::vector<std::string> devices;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    devices = absl::StrSplit(visible, ',', absl::SkipEmpty());
  } else {
    for (int d = 0; d < world; ++d) devices.push_back(absl::StrCat(d));
  }
  if (rank < 0 || rank >= static_cast<int>(devices.size())) return;
  devices.erase(devices.begin() + rank);
  ::setenv("CUDA_VISIBLE_DEVICES", absl::StrJoin(devices, ",").c_str(), 1);
}

}  // namespace

std::string FailureCause(const RankFailure& failure) {
  if (failure.signal != 0) {
    return absl::StrFormat("died of signal %d (%s)", failure.signal, strsignal(failure.signal));
  }
  if (failure.exit_code >= 0) return absl::StrCat("exited with status ", failure.exit_code);
  return "failed";
}

std::vector<std::string> WithResume(const std::vector<std::string>& argv,
                                    const std::string& checkpoint) {
  return Replacing(argv, {"--resume", "--init-from"}, {"--resume", checkpoint});
}

std::vector<std::string> WithWorld(const std::vector<std::string>& argv, int world,
                                   int64_t global_batch) {
  return Replacing(argv, {"--gpus", "--accumulate", "--global_batch"},
                   {"--gpus", absl::StrCat(world), "--global_batch", absl::StrCat(global_batch)});
}

int SmallerWorld(int world, int min_gpus, int64_t global_batch, int64_t micro_batch) {
  for (int w = world - 1; w >= std::max(min_gpus, 1); --w) {
    if (micro_batch > 0 && global_batch % (w * micro_batch) == 0) return w;
  }
  return 0;
}

std::string NewestCheckpointSince(const std::string& dir,
                                  std::filesystem::file_time_type since) {
  if (dir.empty()) return "";
  absl::StatusOr<std::vector<std::string>> found = CheckpointsNewestFirst(dir);
  if (!found.ok()) return "";
  for (const std::string& weights : *found) {
    std::error_code e1, e2;
    const auto weights_time = std::filesystem::last_write_time(weights, e1);
    const auto state_time = std::filesystem::last_write_time(TrainingStatePath(weights), e2);
    if (!e1 && !e2 && weights_time >= since - kFileClockSlack &&
        state_time >= since - kFileClockSlack) {
      return weights;
    }
  }
  return "";
}

absl::Status LaunchWithRestarts(const RestartingJob& job, bool* resumable) {
  *resumable = false;
  const auto start = std::filesystem::file_time_type::clock::now();
  std::ostream& log = *job.log;
  std::vector<std::string> argv = job.argv;  // the current job's (its rank count)
  LaunchOptions options;
  RankFailure failure;
  options.failure = &failure;
  options.max_restarts = job.max_restarts;
  options.restart_argv = [&](const RankFailure& failed, const absl::Status& why,
                             int restart) -> absl::StatusOr<std::vector<std::string>> {
    const std::string from = NewestCheckpointSince(job.checkpoint_dir, start);
    log << absl::StrFormat(
               "train: %s\ntrain: restart %d of %d (--max_restarts): rank %d %s at step %d; "
               "every rank starts again from %s\n",
               why.message(), restart, job.max_restarts, failed.rank, FailureCause(failed),
               failed.step, StartingPoint(from))
        << std::flush;
    return from.empty() ? argv : WithResume(argv, from);
  };
  int world = job.world_size;
  absl::Status status;
  for (;;) {
    status = LaunchLocalWorkers(world, argv, options);
    if (status.ok() || failure.rank < 0) return status;
    const int smaller = job.min_gpus > 0 ? SmallerWorld(world, job.min_gpus, job.global_batch,
                                                        job.micro_batch)
                                         : 0;
    if (smaller == 0) break;
    const std::string from = NewestCheckpointSince(job.checkpoint_dir, start);
    log << absl::StrFormat(
               "train: %s\ntrain: rank %d %s at step %d after %d restart(s): going on with %d "
               "of %d ranks (--min_gpus %d), global batch %d = %d ranks x %d micro_batch x %d "
               "accumulate, from %s\n",
               status.message(), failure.rank, FailureCause(failure), failure.step,
               failure.restarts, smaller, world, job.min_gpus, job.global_batch, smaller,
               job.micro_batch, job.global_batch / (smaller * job.micro_batch),
               StartingPoint(from))
        << std::flush;
    if (job.on_gpus) LeaveOutDevice(failure.rank, world);
    argv = WithWorld(job.argv, smaller, job.global_batch);
    if (!from.empty()) argv = WithResume(argv, from);
    world = smaller;
  }
  const std::string from = NewestCheckpointSince(job.checkpoint_dir, start);
  if (from.empty()) return status;
  *resumable = true;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), "\n",
                                   ResumableNote(failure, job.max_restarts, from)));
}

}  // namespace trainc
