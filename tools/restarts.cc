#include "tools/restarts.h"

#include <string.h>

#include <chrono>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  std::vector<std::string> out = {argv[0], "--resume", checkpoint};
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {  // the rest is positional
      out.insert(out.end(), argv.begin() + i, argv.end());
      break;
    }
    bool dropped = false;
    for (const char* flag : {"--resume", "--init-from"}) {
      if (arg == flag) {
        ++i;  // and its value
        dropped = true;
      } else if (absl::StartsWith(arg, absl::StrCat(flag, "="))) {
        dropped = true;
      }
    }
    if (!dropped) out.push_back(arg);
  }
  return out;
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
    return from.empty() ? job.argv : WithResume(job.argv, from);
  };
  absl::Status status = LaunchLocalWorkers(job.world_size, job.argv, options);
  if (status.ok() || failure.rank < 0) return status;
  const std::string from = NewestCheckpointSince(job.checkpoint_dir, start);
  if (from.empty()) return status;
  *resumable = true;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), "\n",
                                   ResumableNote(failure, job.max_restarts, from)));
}

}  // namespace trainc
