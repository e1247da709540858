#include "runtime/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string WorkerPath() {
  char path[PATH_MAX];
  EXPECT_NE(realpath("runtime/launch/test_worker", path), nullptr);
  return path;
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Running and not a zombie.
bool Alive(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (stat.empty()) return false;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] != 'Z';
}

std::vector<pid_t> Pids(const std::string& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::string text = ReadFile(absl::StrCat(dir, "/rank", r, ".pid"));
    if (!text.empty()) pids.push_back(std::stoi(text));
  }
  return pids;
}

struct JobResult {
  absl::Status status;
  std::string out, err;
  std::vector<pid_t> pids;
  // False when the launcher had not returned by the test's own deadline
  // (the test then killed the workers itself so that it could report).
  bool returned_in_time = true;
};

// Runs the job with a deadline of the test's own, far below Bazel's
// timeout: a launcher that fails to stop a job becomes a failed assertion
// with a message, not a TIMEOUT.
JobResult RunJob(const std::string& name, int n, std::vector<std::string> flags,
                 LaunchOptions options = {},
                 absl::Duration deadline = absl::Seconds(30)) {
  const std::string dir = FreshDir(name);
  std::vector<std::string> argv = {"test_worker", "--pid_dir=" + dir};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  options.executable = WorkerPath();
  options.stdout_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  options.stderr_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  options.temp_dir = dir;
  JobResult result;
  absl::Notification returned;
  // The launcher's thread forks the workers and must outlive them
  // (PR_SET_PDEATHSIG): it is joined below, after LaunchLocalWorkers
  // returned.
  std::thread launcher([&] {
    result.status = LaunchLocalWorkers(n, argv, options);
    returned.Notify();
  });
  if (!returned.WaitForNotificationWithTimeout(deadline)) {
    result.returned_in_time = false;
    for (pid_t pid : Pids(dir, n)) kill(pid, SIGKILL);
    if (!returned.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      std::fprintf(stderr,
                   "launcher_test: job '%s' still running %s after its "
                   "deadline, even with every worker killed; giving up\n",
                   name.c_str(), absl::FormatDuration(deadline).c_str());
      std::_Exit(1);
    }
  }
  launcher.join();
  close(options.stdout_fd);
  close(options.stderr_fd);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  result.pids = Pids(dir, n);
  return result;
}

void ExpectAllGone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid;
}

TEST(LauncherTest, NormalRunForwardsOutputAndCleansUp) {
  JobResult r = RunJob("normal", 3, {"--run_ms=300"});
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  ASSERT_TRUE(r.status.ok()) << r.status << "\n" << r.err;
  ASSERT_EQ(r.pids.size(), 3u);
  ExpectAllGone(r.pids);
  // Rank 0 unprefixed, the others prefixed; every rank saw its rank.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("(^|\n)hello from rank 0 of 3 via trainc"));
  EXPECT_THAT(r.out, HasSubstr("[rank 1] hello from rank 1 of 3 via trainc"));
  EXPECT_THAT(r.out, HasSubstr("[rank 2] hello from rank 2 of 3 via trainc"));
  // A last line without a newline still arrives, whole.
  EXPECT_THAT(r.err, HasSubstr("[rank 2] partial line without newline from 2\n"));
  // The rendezvous folder is gone.
  const std::string dir = FreshDir("unused");
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir).parent_path() / "normal")) {
    EXPECT_THAT(entry.path().string(), Not(HasSubstr("trainc-rendezvous")));
  }
}

// Ctrl-C or Slurm's SIGTERM to the launcher: every rank is stopped, the
// status says why, and the rendezvous folder is gone.
TEST(LauncherTest, SigtermToTheLauncherStopsEveryRankAndCleansUp) {
  LaunchOptions options;
  // Longer than the test's deadline: ranks stopped only by the SIGKILL
  // after it would not return in time.
  options.stop_grace_period = absl::Hours(1);
  const std::string dir = FreshDir("sigterm");
  std::thread interrupter([&] {
    // Once every worker runs, the launcher's handlers are installed.
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (Pids(dir, 3).size() < 3 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    kill(getpid(), SIGTERM);
  });
  JobResult r = RunJob("sigterm", 3, {"--run_ms=-1"}, options);
  interrupter.join();
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled) << r.status;
  EXPECT_EQ(r.status.message(),
            "interrupted by Terminated (signal 15); stopped 3 rank(s)");
  ASSERT_EQ(r.pids.size(), 3u);
  ExpectAllGone(r.pids);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_THAT(entry.path().string(), Not(HasSubstr("trainc-rendezvous")));
  }
}

TEST(LauncherTest, FailingRankStopsTheOthers) {
  LaunchOptions options;
  options.grace_period = absl::Hours(1);  // the others must go at SIGTERM
  JobResult r = RunJob("fail", 3, {"--run_ms=-1", "--fail_rank=1", "--exit_code=3"},
                       options);
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.message(),
            "rank 1 exited with status 3; stopping the other 2 rank(s)");
  ASSERT_EQ(r.pids.size(), 3u);
  ExpectAllGone(r.pids);
}

TEST(LauncherTest, RankKilledBySignal) {
  JobResult r = RunJob("crash", 2, {"--run_ms=-1", "--crash_rank=1"});
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.message(),
            "rank 1 exited with signal 9 (Killed), not sent by trainc: out of memory? "
            "(`dmesg | grep -i oom` tells); stopping the other 1 rank(s)");
  ExpectAllGone(r.pids);
}

// --max_restarts: a rank that dies is followed by a new start of every
// rank, with the arguments restart_argv gives, until a start succeeds.
TEST(LauncherTest, RestartsEveryRankAfterAFailure) {
  LaunchOptions options;
  options.max_restarts = 3;
  std::vector<RankFailure> seen;
  options.restart_argv = [&](const RankFailure& failure, const absl::Status& why,
                             int restart) -> absl::StatusOr<std::vector<std::string>> {
    seen.push_back(failure);
    EXPECT_THAT(why.message(), HasSubstr("rank 1 exited with signal 9"));
    EXPECT_EQ(restart, static_cast<int>(seen.size()));
    return std::vector<std::string>{"test_worker", "--run_ms=400", "--crash_rank=1",
                                    "--crash_restarts=2", absl::StrCat("--start=", restart)};
  };
  RankFailure last;
  options.failure = &last;
  JobResult r = RunJob("restarts", 2, {"--run_ms=-1", "--crash_rank=1", "--crash_restarts=2"},
                       options);
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  ASSERT_TRUE(r.status.ok()) << r.status << "\n" << r.err;
  ASSERT_EQ(seen.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(seen[i].rank, 1);
    EXPECT_EQ(seen[i].signal, SIGKILL);
    EXPECT_EQ(seen[i].exit_code, -1);
    EXPECT_EQ(seen[i].restarts, i);
  }
  EXPECT_EQ(last.rank, -1);
  EXPECT_EQ(last.restarts, 2);
  // Each start's workers know which start they are.
  for (int restart = 0; restart < 3; ++restart) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[rank 1] hello from rank 1 of 2 via trainc")));
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat(", restart ", restart, "\n")));
  }
  EXPECT_THAT(r.out, Not(HasSubstr(", restart 3\n")));
}

// More failures than --max_restarts: the last one's error, and which rank.
TEST(LauncherTest, GivesUpAfterMaxRestarts) {
  LaunchOptions options;
  options.max_restarts = 1;
  int calls = 0;
  options.restart_argv = [&](const RankFailure&, const absl::Status&,
                             int) -> absl::StatusOr<std::vector<std::string>> {
    ++calls;
    return std::vector<std::string>{"test_worker", "--run_ms=-1", "--fail_rank=0",
                                    "--exit_code=7"};
  };
  RankFailure last;
  options.failure = &last;
  JobResult r = RunJob("give_up", 2, {"--run_ms=-1", "--crash_rank=1"}, options);
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.status.message(), "rank 0 exited with status 7; stopping the other 1 rank(s)");
  EXPECT_EQ(last.rank, 0);
  EXPECT_EQ(last.exit_code, 7);
  EXPECT_EQ(last.signal, 0);
  EXPECT_EQ(last.restarts, 1);
  EXPECT_EQ(last.reason, r.status.message());
}

// A rank killed outright takes its peers with it: one writing to its
// socket dies of SIGPIPE, often reaped before (or in the same pass as, and
// lower-ranked than) the rank that was killed. The kill is the news.
TEST(LauncherTest, BlamesTheKilledRankNotItsSigpipeCasualty) {
  JobResult r = RunJob("sigpipe", 2, {"--run_ms=-1", "--crash_rank=1", "--sigpipe_rank=0"});
  ASSERT_TRUE(r.returned_in_time) << r.status;
  EXPECT_TRUE(absl::StartsWith(r.status.message(), "rank 1 exited with signal 9")) << r.status;
  ExpectAllGone(r.pids);
}

// The cause is named even when another rank exits first with only a
// "connection closed" from its collective (rank 0's failed save used to be
// blamed on rank 1), and the summary carries the cause's own error.
TEST(LauncherTest, BlamesTheCauseNotTheFirstPeerError) {
  JobResult r = RunJob("blame", 3,
                       {"--run_ms=-1", "--peer_error_rank=1", "--error_rank=0",
                        "--error=cannot write model.safetensors: No space left on device",
                        "--error_exit_delay_ms=400"});
  ASSERT_TRUE(r.returned_in_time) << r.status;
  EXPECT_EQ(r.status.message(),
            "rank 0 failed: cannot write model.safetensors: No space left on device; "
            "stopped the other 2 rank(s)");
  ExpectAllGone(r.pids);
}

TEST(LauncherTest, HungRankIsStoppedAfterTheTimeout) {
  LaunchOptions options;
  options.heartbeat_timeout = absl::Seconds(2);
  options.grace_period = absl::Hours(1);  // every rank goes at SIGTERM
  // Rank 2 stops beating after 0.2 s, so the job should end after about
  // 2.2 s; not returning by the deadline is a broken watchdog.
  JobResult r = RunJob("hang", 3, {"--run_ms=-1", "--hang_rank=2"}, options);
  ASSERT_TRUE(r.returned_in_time)
      << "rank 2 hung with a 2 s heartbeat timeout, but the launcher had "
         "not stopped the job by the deadline (the test killed the workers): "
         "the watchdog did not fire. Launcher said: "
      << r.status;
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::MatchesRegex("rank 2 sent no heartbeat for [0-9.]+s "
                                      "\\(hung\\?\\); stopping the other 2 rank\\(s\\)"));
  ExpectAllGone(r.pids);
}

// A frozen rank can make a peer's collective time out before the watchdog
// fires (on a loaded machine the two deadlines are close): the rank that
// was already silent when the peer failed is the one named.
TEST(LauncherTest, BlamesTheFrozenRankWhenAPeerTimesOutFirst) {
  LaunchOptions options;
  options.heartbeat_timeout = absl::Seconds(60);  // the peer's error comes first
  options.grace_period = absl::Seconds(1);
  JobResult r = RunJob("frozen", 3,
                       {"--run_ms=-1", "--hang_rank=2", "--peer_error_rank=1",
                        "--peer_error_ms=6000"},
                       options, /*deadline=*/absl::Seconds(30));
  ASSERT_TRUE(r.returned_in_time) << r.status;
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::MatchesRegex("rank 2 sent no heartbeat for [0-9.]+s \\(hung\\?\\) when "
                                      "rank 1 failed: gloo: Connection closed by peer; "
                                      "stopped the other 2 rank\\(s\\)"));
  ExpectAllGone(r.pids);
}

// A rank stopped before its first heartbeat (before the rendezvous) is
// not watched by the heartbeat: a peer gives up on it first, with an error
// that may not say who (Gloo's, when the stop came between its contexts).
// The rank the kernel has stopped is named, not the peer.
TEST(LauncherTest, BlamesTheRankStoppedBeforeItsFirstBeat) {
  LaunchOptions options;
  options.grace_period = absl::Milliseconds(500);  // the stopped rank goes at SIGKILL
  JobResult r = RunJob("stopped_early", 2,
                       {"--run_ms=-1", "--stop_rank=1", "--error_rank=0",
                        "--error=a rank of 2 did not join job trainc within 20s"},
                       options);
  ASSERT_TRUE(r.returned_in_time) << r.status;
  EXPECT_EQ(r.status.message(),
            "rank 1 is stopped (SIGSTOP?) and rank 0 gave up waiting: a rank of 2 did not "
            "join job trainc within 20s; stopped the other 1 rank(s)");
  ExpectAllGone(r.pids);
}

// A rank alive but not at the rendezvous (stuck on its way there) never
// beats either: the peer's error names it, and so does the summary.
TEST(LauncherTest, BlamesTheRankAPeerSaysDidNotJoin) {
  LaunchOptions options;
  options.grace_period = absl::Hours(1);  // every rank goes at SIGTERM
  JobResult r = RunJob("not_joined", 3,
                       {"--run_ms=-1", "--silent_rank=2", "--error_rank=0",
                        "--error=rank 2 of 3 did not join job trainc within 20s (gloo)"},
                       options);
  ASSERT_TRUE(r.returned_in_time) << r.status;
  EXPECT_EQ(r.status.message(),
            "rank 2 did not join the job and rank 0 gave up waiting: rank 2 of 3 did not join "
            "job trainc within 20s (gloo); stopped the other 2 rank(s)");
  ExpectAllGone(r.pids);
}

TEST(LauncherTest, RanksIgnoringSigtermAreKilled) {
  LaunchOptions options;
  options.grace_period = absl::Milliseconds(500);
  JobResult r = RunJob("stubborn", 3,
                       {"--run_ms=-1", "--fail_rank=0", "--ignore_sigterm"},
                       options);
  ASSERT_TRUE(r.returned_in_time) << "the launcher did not return: " << r.status;
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(r.status.message(), HasSubstr("rank 0 exited with status 1"));
  // Returned at all: the SIGKILL after the grace period came (SIGTERM is
  // ignored), else the deadline above fails.
  ExpectAllGone(r.pids);
}

TEST(LauncherTest, ExecFailureIsReported) {
  LaunchOptions options;
  const std::string dir = FreshDir("noexec");
  options.executable = dir + "/does-not-exist";
  options.temp_dir = dir;
  const std::string err_path = dir + "/stderr";
  options.stderr_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  absl::Status status = LaunchLocalWorkers(2, {"x"}, options);
  close(options.stderr_fd);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("exited with status 127"));
  EXPECT_THAT(ReadFile(err_path), HasSubstr("exec failed"));
}

TEST(LauncherTest, WorkersDieWithTheLauncher) {
  const std::string dir = FreshDir("orphans");
  const std::string worker = WorkerPath();
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions options;
    options.executable = worker;
    options.temp_dir = dir;
    absl::Status s = LaunchLocalWorkers(
        2, {"test_worker", "--pid_dir=" + dir, "--run_ms=-1"}, options);
    _exit(s.ok() ? 0 : 1);
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < 200 && pids.size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    pids = Pids(dir, 2);
  }
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_TRUE(Alive(pid));
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  bool any_alive = true;
  for (int i = 0; i < 100 && any_alive; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    any_alive = false;
    for (pid_t pid : pids) any_alive |= Alive(pid);
  }
  EXPECT_FALSE(any_alive) << "workers outlived their launcher";
}

TEST(LauncherTest, RejectsBadArguments) {
  EXPECT_FALSE(LaunchLocalWorkers(0, {"x"}).ok());
  EXPECT_FALSE(LaunchLocalWorkers(2, {}).ok());
}

}  // namespace
}  // namespace trainc
