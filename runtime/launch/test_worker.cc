// A worker for launcher_test: does what its flags say, on the rank they
// name. Flags: --pid_dir=DIR (writes DIR/rank<k>.pid), --run_ms=T (beat
// for T ms then exit 0; -1: forever), --fail_rank=R --exit_code=C,
// --crash_rank=R (SIGKILL itself), --hang_rank=R (beat once, then sleep
// without beating), --ignore_sigterm, --error_rank=R --error=TEXT (at
// 200 ms prints "train: error: TEXT", then exits 1 after
// --error_exit_delay_ms, as a rank slow to tear down), --peer_error_rank=R
// (at --peer_error_ms=T if given, else once the error rank has printed its
// error, or at 250 ms without --pid_dir, prints a "connection closed" error
// and exits 1),
// --sigpipe_rank=R (dies of SIGPIPE, as a rank writing to a peer that has
// just been killed; with --crash_rank and --pid_dir, the crashing rank
// waits for it to be dead before it dies, deaf to the launcher's SIGTERM,
// so that the casualty is reaped first), --stop_rank=R (stops itself with
// SIGSTOP before its first beat, as a rank stopped before the rendezvous;
// with --pid_dir the error rank prints its error only once it is stopped),
// --silent_rank=R (never beats: sleeps before its first beat, as a rank
// stuck on its way to the rendezvous), --crash_restarts=K (--crash_rank
// crashes only in the job's first K starts: TRAINC_RESTART_COUNT < K).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "runtime/launch/heartbeat.h"
#include "runtime/launch/rank_env.h"

namespace {

int IntFlag(int argc, char** argv, const std::string& name, int fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    int value;
    if (absl::StartsWith(argv[i], prefix) &&
        absl::SimpleAtoi(argv[i] + prefix.size(), &value)) {
      return value;
    }
  }
  return fallback;
}

std::string StringFlag(int argc, char** argv, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], prefix)) return argv[i] + prefix.size();
  }
  return "";
}

// Waits (at most 10 s) until rank `rank`, whose pid is in DIR/rank<k>.pid,
// has exited: a zombie or gone.
void WaitUntilDead(const std::string& pid_dir, int rank) {
  int pid = 0;
  std::ifstream(pid_dir + "/rank" + std::to_string(rank) + ".pid") >> pid;
  for (int i = 0; i < 10000 && pid > 0; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos || line.compare(paren + 2, 1, "Z") == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Waits (at most 10 s) until rank `rank`, whose pid is in DIR/rank<k>.pid,
// is stopped (state T).
void WaitUntilStopped(const std::string& pid_dir, int rank) {
  for (int i = 0; i < 10000; ++i) {
    int pid = 0;
    std::ifstream(pid_dir + "/rank" + std::to_string(rank) + ".pid") >> pid;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    const size_t paren = std::getline(stat, line) ? line.rfind(')') : std::string::npos;
    if (pid > 0 && paren != std::string::npos && line.compare(paren + 2, 1, "T") == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// This rank and its command line.
struct Worker {
  int argc;
  char** argv;
  int rank;
  std::string pid_dir;
  int restarts;  // TRAINC_RESTART_COUNT

  int Flag(const std::string& name, int fallback) const {
    return IntFlag(argc, argv, name, fallback);
  }
};

// --error_rank: "train: error: TEXT" (once --stop_rank has stopped, with
// --pid_dir, which then records that it errored), exit 1 after
// --error_exit_delay_ms.
int PrintErrorAndExit(const Worker& w) {
  const int stopped = w.Flag("stop_rank", -1);
  if (stopped >= 0 && !w.pid_dir.empty()) WaitUntilStopped(w.pid_dir, stopped);
  std::string text = "failed";
  for (int i = 1; i < w.argc; ++i) {
    if (absl::StartsWith(w.argv[i], "--error=")) text = w.argv[i] + 8;
  }
  std::fprintf(stderr, "\ntrain: error: %s\n", text.c_str());
  std::fflush(stderr);
  if (!w.pid_dir.empty()) std::ofstream(w.pid_dir + "/errored") << w.rank << "\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(w.Flag("error_exit_delay_ms", 0)));
  return 1;
}

// --crash_rank: SIGKILL, after --sigpipe_rank's casualty is dead (with
// --pid_dir), deaf to the launcher's SIGTERM meanwhile.
void Crash(const Worker& w) {
  const int casualty = w.Flag("sigpipe_rank", -1);
  if (casualty >= 0 && !w.pid_dir.empty()) {
    // Already dying, as far as the launcher's SIGTERM is concerned.
    signal(SIGTERM, SIG_IGN);
    std::ofstream(w.pid_dir + "/crashing") << w.rank << "\n";
    WaitUntilDead(w.pid_dir, casualty);
  }
  raise(SIGKILL);
}

// From 200 ms on: the failure the flags ask of this rank, `elapsed` ms
// after its start, as its exit status; none while it keeps running.
std::optional<int> Misbehave(const Worker& w, int64_t elapsed) {
  if (w.rank == w.Flag("fail_rank", -1)) return w.Flag("exit_code", 1);
  if (w.rank == w.Flag("error_rank", -1)) return PrintErrorAndExit(w);
  // After the error rank has printed its error (with --pid_dir: it says
  // so in a file), so that the launcher sees the cause's words whatever
  // the two ranks' start-up times.
  const int peer_error_ms = w.Flag("peer_error_ms", -1);
  if (w.rank == w.Flag("peer_error_rank", -1) &&
      (peer_error_ms >= 0 ? elapsed >= peer_error_ms
       : w.pid_dir.empty() ? elapsed >= 250
                           : std::ifstream(w.pid_dir + "/errored").good())) {
    std::fprintf(stderr, "\ntrain: error: gloo: Connection closed by peer\n");
    return 1;
  }
  if (w.rank == w.Flag("crash_rank", -1) && w.restarts < w.Flag("crash_restarts", 1 << 30)) {
    Crash(w);
  }
  if (w.rank == w.Flag("sigpipe_rank", -1) && !w.pid_dir.empty() &&
      std::ifstream(w.pid_dir + "/crashing").good()) {
    signal(SIGPIPE, SIG_DFL);
    raise(SIGPIPE);
  }
  if (w.rank == w.Flag("hang_rank", -1)) {
    for (;;) pause();
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  auto info = trainc::RankFromEnvironment();
  if (!info.ok() || !info->has_value()) {
    std::fprintf(stderr, "test_worker: no rank in the environment\n");
    return 2;
  }
  const char* restarts_env = std::getenv("TRAINC_RESTART_COUNT");
  const Worker w{argc, argv, (*info)->rank, StringFlag(argc, argv, "pid_dir"),
                 restarts_env != nullptr ? std::atoi(restarts_env) : 0};
  if (!w.pid_dir.empty()) {
    std::ofstream(w.pid_dir + "/rank" + std::to_string(w.rank) + ".pid")
        << getpid() << "\n";
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--ignore_sigterm") signal(SIGTERM, SIG_IGN);
  }
  std::printf("hello from rank %d of %d via %s, rendezvous %s, restart %d\n", w.rank,
              (*info)->world_size, (*info)->source.c_str(),
              (*info)->rendezvous.c_str(), w.restarts);
  std::fflush(stdout);
  std::fprintf(stderr, "partial line without newline from %d", w.rank);

  if (w.rank == w.Flag("stop_rank", -1)) raise(SIGSTOP);
  if (w.rank == w.Flag("silent_rank", -1)) {
    for (;;) pause();
  }
  trainc::Heartbeat heartbeat = trainc::Heartbeat::FromEnvironment();
  heartbeat.Beat();
  const int run_ms = w.Flag("run_ms", 200);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const int64_t elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
    if (run_ms >= 0 && elapsed >= run_ms) return 0;
    if (elapsed >= 200) {
      if (std::optional<int> status = Misbehave(w, elapsed)) return *status;
    }
    heartbeat.Beat();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
