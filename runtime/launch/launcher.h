// LaunchLocalWorkers: run a data-parallel job of N processes on this
// machine, one per rank, and stop all of them when one fails.
//
// The workers are the same binary (fork + exec of /proc/self/exe) with the
// same arguments; each finds its rank with RankFromEnvironment() (RANK,
// WORLD_SIZE, LOCAL_RANK, TRAINC_RENDEZVOUS_DIR) and builds its own
// communicator. The rendezvous folder is created here and removed when the
// job ends.
//
// Failures. The first rank to exit non-zero or die by a signal, or to stop
// beating its Heartbeat for `heartbeat_timeout`, fails the job: every
// other rank gets SIGTERM, then SIGKILL after `grace_period`, and the
// returned error names it:
//   "rank 1 exited with signal 9 (Killed); stopping the other 1 rank(s)"
// A rank that failed only because a peer went away (a lost connection, a
// rendezvous or collective timeout) is not the one named: the peer killed
// from outside, silent, stopped (SIGSTOP, also before its first beat),
// absent from the rendezvous or behind is.
// Workers die with the launcher too (PR_SET_PDEATHSIG), so that no rank
// outlives it, whatever kills it.
//
// Signals. SIGINT, SIGTERM or SIGHUP to the launcher (Ctrl-C, Slurm
// preemption, a closed terminal) stops every rank the same way (SIGTERM,
// then SIGKILL after the grace period), removes the rendezvous folder and
// returns CANCELLED: "interrupted by Terminated (signal 15); stopped 2
// rank(s)". SIGPIPE is ignored while the job runs (a closed output pipe is
// an error, not a silent death).
//
// Output. Rank 0's stdout and stderr pass through unchanged; every other
// rank's lines are prefixed "[rank k] " so that its warnings and errors
// stay readable. Lines are never interleaved mid-line.
#ifndef TRAINC_RUNTIME_LAUNCH_LAUNCHER_H_
#define TRAINC_RUNTIME_LAUNCH_LAUNCHER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainc {

// The environment variable that tells a worker how many times its job has
// been restarted (0: the first start), as TORCHELASTIC_RESTART_COUNT does
// under torchrun.
inline constexpr char kRestartCountEnv[] = "TRAINC_RESTART_COUNT";

// The rank a failed job is blamed on (the one its error names), and how it
// ended.
struct RankFailure {
  int rank = -1;       // -1: no rank failed (success, or a stop signal)
  int exit_code = -1;  // its exit status when it exited; -1: it did not
  int signal = 0;      // the signal it died of; 0: none
  int64_t step = 0;    // the step it was at (its position); 0: before the first
  int restarts = 0;    // restarts before this failure
  std::string reason;  // the job's error, first line: "rank 1 exited with signal 9 ..."
};

struct LaunchOptions {
  // What each worker runs; argv[0] is passed as given.
  std::string executable = "/proc/self/exe";
  // A rank whose heartbeat is armed and silent this long is hung
  // (absl::ZeroDuration(): no watchdog). With the grace period, a hung job
  // is gone within 20 s by default. Shorter than the communicators'
  // timeouts (Gloo: 20 s): the frozen rank is named before a peer's
  // collective gives up on it.
  absl::Duration heartbeat_timeout = absl::Seconds(15);
  // Between SIGTERM and SIGKILL when stopping the ranks after one failed.
  absl::Duration grace_period = absl::Seconds(5);
  // The same when the launcher itself was asked to stop (SIGINT, SIGTERM,
  // SIGHUP): long enough for the ranks to reach a step boundary together
  // and write a checkpoint (runtime/train). A second signal kills them at
  // once.
  absl::Duration stop_grace_period = absl::Seconds(30);
  // Where to create the rendezvous folder; empty: $TMPDIR, else /tmp.
  std::string temp_dir;
  // Where the workers' output goes.
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Automatic restarts (torchrun's --max-restarts): when a rank fails (a
  // non-zero exit, a signal that is not a stop signal, a hang), the others
  // are stopped as always, and then every rank is started again with the
  // arguments `restart_argv` returns (given the failure, the job's error
  // and the restart's number, from 1), at most `max_restarts` times. An
  // error from `restart_argv` ends the job with it.
  int max_restarts = 0;
  std::function<absl::StatusOr<std::vector<std::string>>(
      const RankFailure&, const absl::Status& why, int restart)>
      restart_argv;
  // When not null: the last start's failure (rank -1 when none).
  RankFailure* failure = nullptr;
};

// Starts `num_workers` ranks and returns when all have exited: OK if every
// one exited 0; CANCELLED when a stop signal ended the job, the launcher's
// (above) or one a rank received itself (it exits 128 + the signal after
// the ranks stopped together at a step boundary, checkpoint written:
// "a rank was stopped by Terminated (signal 15); every rank stopped at the
// same step"); else the failure's error, of the last start when
// `options.max_restarts` allowed restarts (each worker of restart k sees
// TRAINC_RESTART_COUNT=k). Blocks; call it from a thread that lives until
// it returns (PR_SET_PDEATHSIG follows the forking thread).
absl::Status LaunchLocalWorkers(int num_workers,
                                const std::vector<std::string>& argv,
                                const LaunchOptions& options = {});

// The signal that stopped the last LaunchLocalWorkers job (the launcher's
// own, else the ranks'), or 0: the launcher's exit code is 128 + it.
int JobStopSignal();

}  // namespace trainc

#endif  // TRAINC_RUNTIME_LAUNCH_LAUNCHER_H_
