#include "runtime/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "runtime/launch/heartbeat.h"
#include "runtime/position/position.h"
#include "runtime/launch/rank_env.h"

extern char** environ;

namespace trainc {
namespace {

// The heartbeat socket's number in every worker.
constexpr int kWorkerHeartbeatFd = 3;
// How often the loop wakes up to check exits and deadlines even when no
// output arrives.
constexpr int kPollIntervalMs = 50;
// A rank silent this long when a peer failed (its pulse beats every
// 0.5 s) was frozen before the failure, and is blamed for it.
constexpr absl::Duration kSilentBeforeFailure = absl::Seconds(5);

absl::Status ErrnoError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // nowhere to report it; the output is best effort
    data += w;
    n -= w;
  }
}

std::string ExitDescription(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    // Nobody in the job sends SIGKILL before a failure: most often the
    // kernel's out-of-memory killer.
    return absl::StrFormat("exited with signal %d (%s)%s", sig, strsignal(sig),
                           sig == SIGKILL ? ", not sent by trainc: out of memory? "
                                            "(`dmesg | grep -i oom` tells)"
                                          : "");
  }
  return absl::StrCat("exited with status ", WEXITSTATUS(status));
}

// Whether the process is stopped (SIGSTOP, SIGTSTP: state T in
// /proc/PID/stat), not running or asleep.
bool IsStopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::ifstream in(path);
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');  // the name may hold spaces and ')'
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
}

// The rank a peer's rendezvous error names as absent, "rank 1 of 2 did not
// join job ..." or "ranks 1, 3 of 4 did not join job ..." (runtime/comm/gloo),
// the first of them; -1 when the error says no such thing.
int RankThatDidNotJoin(absl::string_view error) {
  const size_t at = error.find(" did not join job ");
  const size_t word = at == absl::string_view::npos ? at : error.rfind("rank", at);
  if (word == absl::string_view::npos) return -1;
  absl::string_view rest = error.substr(word + 4);
  absl::ConsumePrefix(&rest, "s");
  if (!absl::ConsumePrefix(&rest, " ")) return -1;
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(rest[digits])) ++digits;
  int rank = -1;
  return absl::SimpleAtoi(rest.substr(0, digits), &rank) ? rank : -1;
}

// One worker output stream, forwarded line by line.
struct OutputStream {
  int fd = -1;  // read end; -1 once closed
  int sink = -1;
  std::string prefix;
  std::string partial;     // an unfinished line
  std::string last_error;  // the last line saying "error: ", for the summary

  void Forward(const char* data, size_t n) {
    partial.append(data, n);
    size_t end = partial.rfind('\n');
    if (end == std::string::npos) return;
    std::string out;
    size_t begin = 0;
    while (begin <= end) {
      size_t eol = partial.find('\n', begin);
      const absl::string_view line = absl::string_view(partial).substr(begin, eol - begin);
      if (const size_t at = line.find("error: "); at != absl::string_view::npos) {
        last_error = std::string(line.substr(at + 7));
      }
      absl::StrAppend(&out, prefix,
                      absl::string_view(partial).substr(begin, eol + 1 - begin));
      begin = eol + 1;
    }
    WriteAll(sink, out.data(), out.size());
    partial.erase(0, end + 1);
  }

  void Flush() {
    if (!partial.empty()) Forward("\n", 1);
  }
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  OutputStream out, err;
  int heartbeat_fd = -1;  // our end of the socket pair
  bool armed = false;     // has beaten at least once
  std::string how_it_failed;  // "exited with signal 9 (Killed)...", or empty
  int exit_signal = 0;    // the signal that ended it, if one did
  int exit_code = -1;     // its exit status, if it exited
  bool killed_by_us = false;  // we sent it SIGKILL
  bool stopped_at_failure = false;  // stopped (IsStopped) when the job failed
  absl::Time last_beat;
};

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// Reads what is available on `fd`; closes it at EOF. Returns whether
// anything arrived.
bool Drain(int* fd, OutputStream* stream) {
  char buffer[1 << 14];
  ssize_t n = ::read(*fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n <= 0) {
    CloseFd(fd);
    if (stream != nullptr) stream->Flush();
    return false;
  }
  if (stream != nullptr) stream->Forward(buffer, n);
  return true;
}

// The environment of a worker: ours, minus what we set, plus its rank.
std::vector<std::string> WorkerEnvironment(int rank, int world,
                                           const std::string& rendezvous,
                                           const std::string& positions, int restarts) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", absl::StrCat(rank)},
      {"WORLD_SIZE", absl::StrCat(world)},
      {"LOCAL_RANK", absl::StrCat(rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(world)},
      {kRendezvousDirEnv, rendezvous},
      {kLocalLauncherEnv, "local"},
      {kHeartbeatFdEnv, absl::StrCat(kWorkerHeartbeatFd)},
      {kPositionDirEnv, positions},
      {kRestartCountEnv, absl::StrCat(restarts)},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const auto& [key, value] : ours) {
      replaced |= absl::StartsWith(*e, key + "=");
    }
    if (!replaced) env.push_back(*e);
  }
  for (const auto& [key, value] : ours) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Only async-signal-safe calls between fork and exec: the parent may have
// other threads holding locks.
[[noreturn]] void ExecWorker(pid_t launcher, int out_fd, int err_fd,
                             int heartbeat_fd, const char* executable,
                             char* const* argv, char* const* envp) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher ignores SIGPIPE, and an ignored signal stays ignored
  // across exec: give the worker the default back.
  ::signal(SIGPIPE, SIG_DFL);
  // The launcher may have died before prctl took effect.
  if (::getppid() != launcher) ::_exit(1);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  if (heartbeat_fd == kWorkerHeartbeatFd) {
    ::fcntl(kWorkerHeartbeatFd, F_SETFD, 0);  // keep it across exec
  } else {
    ::dup2(heartbeat_fd, kWorkerHeartbeatFd);
  }
  ::execve(executable, argv, envp);
  // strerror is not async-signal-safe; the number will do.
  char message[64] = "launcher: exec failed with errno ";
  size_t len = strlen(message);
  char digits[12];
  int n = 0;
  for (int e = errno; n == 0 || e > 0; e /= 10) digits[n++] = '0' + e % 10;
  while (n > 0) message[len++] = digits[--n];
  message[len++] = '\n';
  (void)!::write(STDERR_FILENO, message, len);
  ::_exit(127);
}

// The signal that asked the launcher to stop (SIGINT, SIGTERM, SIGHUP),
// or 0. Set by the handler, read by the supervising loop.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_count = 0;
// JobStopSignal(): the signal that stopped the last job.
int g_job_stop_signal = 0;

void OnStopSignal(int sig) {
  g_stop_signal = sig;
  g_stop_count = g_stop_count + 1;
}

// Installs the stop handlers for the job's lifetime, and ignores SIGPIPE so
// that a closed pipe (`train ... | head`) is a write error, not a silent
// death. The previous dispositions come back at the end.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    g_stop_count = 0;
    struct sigaction action = {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], &action, &previous_[i]);
    }
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &previous_pipe_);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], &previous_[i], nullptr);
    }
    ::sigaction(SIGPIPE, &previous_pipe_, nullptr);
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_;
  struct sigaction previous_pipe_;
};

class Job {
 public:
  Job(int n, const LaunchOptions& options, int restarts)
      : options_(options), workers_(n), restarts_(restarts) {}

  ~Job() {
    // Only reached with live workers if Start failed half way.
    Signal(SIGKILL);
    for (Worker& w : workers_) {
      if (w.running) ::waitpid(w.pid, nullptr, 0);
      CloseFd(&w.out.fd);
      CloseFd(&w.err.fd);
      CloseFd(&w.heartbeat_fd);
    }
    if (!rendezvous_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(rendezvous_, ignored);
    }
  }

  absl::Status Start(const std::vector<std::string>& argv) {
    std::string base = options_.temp_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    std::string dir = base + "/trainc-rendezvous-XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) {
      return ErrnoError(absl::StrCat("cannot create a rendezvous folder in ",
                                     base));
    }
    rendezvous_ = dir;
    // Where each rank publishes its position (runtime/position), for the
    // table a failure prints.
    positions_dir_ = dir + "/positions";
    if (::mkdir(positions_dir_.c_str(), 0700) != 0) {
      return ErrnoError(absl::StrCat("cannot create ", positions_dir_));
    }

    std::vector<std::string> args = argv;
    std::vector<char*> c_args = CStrings(args);
    const int n = workers_.size();
    for (int rank = 0; rank < n; ++rank) {
      Worker& w = workers_[rank];
      w.rank = rank;
      int out[2], err[2], beat[2];
      if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe2");
      if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(out[0]);
        ::close(out[1]);
        return ErrnoError("pipe2");
      }
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, beat) != 0) {
        for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
        return ErrnoError("socketpair");
      }
      w.out = {out[0], options_.stdout_fd,
               rank == 0 ? "" : absl::StrCat("[rank ", rank, "] "), ""};
      w.err = {err[0], options_.stderr_fd, w.out.prefix, ""};
      w.heartbeat_fd = beat[0];
      std::vector<std::string> env =
          WorkerEnvironment(rank, n, rendezvous_, positions_dir_, restarts_);
      std::vector<char*> c_env = CStrings(env);

      const pid_t launcher = ::getpid();
      const pid_t pid = ::fork();
      if (pid == 0) {
        ExecWorker(launcher, out[1], err[1], beat[1],
                   options_.executable.c_str(), c_args.data(), c_env.data());
      }
      for (int fd : {out[1], err[1], beat[1]}) ::close(fd);
      if (pid < 0) return ErrnoError("fork");
      w.pid = pid;
      w.running = true;
      ++running_;
      for (int fd : {w.out.fd, w.err.fd, w.heartbeat_fd}) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      }
    }
    return absl::OkStatus();
  }

  // Forwards output and watches the ranks until every one has exited.
  absl::Status Supervise() {
    const absl::Time start = absl::Now();
    for (Worker& w : workers_) w.last_beat = start;
    while (running_ > 0) {
      PollOnce(kPollIntervalMs);
      if (g_stop_signal != 0 && !stopping_) {
        // Asked to stop (Ctrl-C, Slurm preemption, a closed terminal): every
        // rank gets SIGTERM (the trainer stops at a step boundary and
        // writes a checkpoint), then SIGKILL after the stop grace period
        // or a second signal, and the
        // rendezvous folder goes with the job. Ranks that die of it are
        // not the news.
        const int sig = g_stop_signal;
        failure_ = absl::CancelledError(absl::StrCat(
            "interrupted by ", strsignal(sig), " (signal ", sig,
            "); stopped ", running_, " rank(s)"));
        stopping_ = true;
        kill_at_ = absl::Now() + options_.stop_grace_period;
        Signal(SIGTERM);
      }
      if (g_stop_count > 1 && !killed_) {  // asked twice: no more waiting
        Signal(SIGKILL);
        killed_ = true;
      }
      ReapExited();
      CheckHeartbeats();
      if (stopping_ && !killed_ && absl::Now() >= kill_at_) {
        Signal(SIGKILL);
        killed_ = true;
      }
    }
    DrainAfterExits();
    for (Worker& w : workers_) {
      CloseFd(&w.out.fd);
      CloseFd(&w.err.fd);
      CloseFd(&w.heartbeat_fd);
      w.out.Flush();
      w.err.Flush();
    }
    RefineBlame();
    if (failure_.ok() && ranks_stop_signal_ != 0) {
      const int sig = ranks_stop_signal_;
      g_job_stop_signal = sig;
      return absl::CancelledError(absl::StrCat(
          "a rank was stopped by ", strsignal(sig), " (signal ", sig,
          "); every rank stopped at the same step"));
    }
    if (absl::IsCancelled(failure_)) g_job_stop_signal = g_stop_signal;
    if (!failure_.ok() && !absl::IsCancelled(failure_) && !positions_table_.empty()) {
      return absl::Status(failure_.code(),
                          absl::StrCat(failure_.message(), "\n", positions_table_));
    }
    return failure_;
  }

  // The rank the job's error names and how it ended; rank -1 when no rank
  // failed (every one exited 0, or a stop signal ended the job).
  RankFailure Failure() const {
    RankFailure f;
    f.restarts = restarts_;
    if (cause_ < 0 || failure_.code() != absl::StatusCode::kAborted) return f;
    const Worker& w = workers_[cause_];
    f.rank = cause_;
    f.exit_code = w.exit_code;
    // Not the SIGTERM or SIGKILL that we sent to end a hang: not its cause.
    f.signal = KilledFromOutside(w) ? w.exit_signal : 0;
    for (const RankPosition& p : positions_) {
      if (p.rank == cause_) f.step = p.step;
    }
    f.reason = std::string(failure_.message());
    return f;
  }

  // The signal a trainer rank exited for (status 128 + SIGINT, SIGTERM or
  // SIGHUP, runtime/train), or 0.
  static int StoppedBySignal(int status) {
    if (!WIFEXITED(status)) return 0;
    const int code = WEXITSTATUS(status);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      if (code == 128 + sig) return sig;
    }
    return 0;
  }

 private:
  // Forwards what the ranks wrote before they exited, until every output
  // pipe is at its end: a round of poll that reads nothing (a signal, a
  // scheduler that has not run us) must not drop a rank's last line. A
  // pipe a rank's own child still holds open is given up after a while.
  void DrainAfterExits() {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    auto open_outputs = [&] {
      for (const Worker& w : workers_) {
        if (w.out.fd >= 0 || w.err.fd >= 0) return true;
      }
      return false;
    };
    while (open_outputs() && absl::Now() < give_up) PollOnce(kPollIntervalMs);
  }

  // Returns whether anything was read.
  bool PollOnce(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int*, OutputStream*>> targets;
    for (Worker& w : workers_) {
      if (w.out.fd >= 0) targets.push_back({&w.out.fd, &w.out});
      if (w.err.fd >= 0) targets.push_back({&w.err.fd, &w.err});
      if (w.heartbeat_fd >= 0) targets.push_back({&w.heartbeat_fd, nullptr});
    }
    for (auto& [fd, stream] : targets) fds.push_back({*fd, POLLIN, 0});
    if (fds.empty()) {
      if (timeout_ms > 0) ::usleep(timeout_ms * 1000);
      return false;
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return false;
    bool any = false;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [fd, stream] = targets[i];
      if (stream == nullptr) {
        // A heartbeat: which worker's?
        for (Worker& w : workers_) {
          if (&w.heartbeat_fd == fd && Drain(fd, nullptr)) {
            w.armed = true;
            w.last_beat = absl::Now();
            any = true;
          }
        }
      } else {
        any |= Drain(fd, stream);
      }
    }
    return any;
  }

  void ReapExited() {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      w.running = false;
      --running_;
      if (r >= 0 && StoppedBySignal(status) != 0) {
        // The trainer's exit after a stop signal at a step boundary (128 +
        // the signal), checkpoint written: the ranks agreed to stop
        // together, so a rank signalled alone (Slurm's SIGTERM to one
        // task) is a preemption, not a failure of the job.
        if (ranks_stop_signal_ == 0) ranks_stop_signal_ = StoppedBySignal(status);
        continue;
      }
      if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        w.how_it_failed = ExitDescription(status);
        w.exit_signal = r >= 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        w.exit_code = r >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        Fail(w, w.how_it_failed);
      }
    }
  }

  // Whether a rank failed only because a peer went away: it died writing
  // to a closed socket, or its last error is a collective's lost connection.
  static bool IsPeerCasualty(const Worker& w) {
    if (w.exit_signal == SIGPIPE) return true;
    for (const char* s : {"gloo", "nccl", "Connection", "connection", "peer",
                          "Timed out", "timed out", "Broken pipe", "did not join"}) {
      if (absl::StrContains(w.err.last_error, s)) return true;
    }
    return false;
  }

  // Whether a rank died of a signal that neither we nor a dead peer sent:
  // a kill from outside (the OOM killer, an operator), a crash.
  static bool KilledFromOutside(const Worker& w) {
    return w.exit_signal != 0 && w.exit_signal != SIGPIPE &&
           w.exit_signal != SIGTERM && !w.killed_by_us;
  }

  void CheckHeartbeats() {
    if (options_.heartbeat_timeout <= absl::ZeroDuration() || stopping_) return;
    const absl::Time now = absl::Now();
    for (Worker& w : workers_) {
      if (w.running && w.armed &&
          now - w.last_beat > options_.heartbeat_timeout) {
        Fail(w,
             absl::StrCat("sent no heartbeat for ", absl::FormatDuration(now - w.last_beat),
                          " (hung?)"),
             /*silent=*/true);
      }
    }
  }

  // The first rank to fail is not always the cause: when rank 0's save
  // fails, the others may exit first with "connection closed" from their
  // collective. If the first failure says only that a peer went away and
  // another rank failed of something else, that one is named; either way
  // the summary carries the named rank's own error.
  void RefineBlame() {
    if (blamed_ < 0 || failure_.code() != absl::StatusCode::kAborted) return;
    const Worker* named = &workers_[blamed_];
    const int others = static_cast<int>(workers_.size()) - 1;
    if (IsPeerCasualty(*named)) {
      for (const Worker& w : workers_) {
        if (!w.err.last_error.empty() && !IsPeerCasualty(w)) {
          named = &w;
          break;
        }
      }
    }
    if (IsPeerCasualty(*named)) {
      if (std::optional<Cause> cause = CauseOfPeerFailure(*named)) {
        cause_ = cause->rank;
        failure_ = absl::AbortedError(
            absl::StrCat(cause->text, "; stopped the other ", others, " rank(s)"));
        return;
      }
    }
    if (named->err.last_error.empty()) return;
    cause_ = named->rank;
    failure_ = absl::AbortedError(absl::StrCat("rank ", named->rank, " failed: ",
                                               named->err.last_error, "; stopped the other ",
                                               others, " rank(s)"));
  }

  // The rank that `named`, a casualty (IsPeerCasualty), waited for and why,
  // when the job shows one; else nullopt.
  struct Cause {
    int rank;
    std::string text;
  };
  std::optional<Cause> CauseOfPeerFailure(const Worker& named) const {
    const std::string& why =
        named.err.last_error.empty() ? named.how_it_failed : named.err.last_error;
    const std::string gave_up = absl::StrCat(" and rank ", named.rank, " gave up waiting: ", why);
    // A rank killed outright (SIGKILL) may be reaped after the peer that
    // died of SIGPIPE writing to it a millisecond later.
    for (const Worker& w : workers_) {
      if (KilledFromOutside(w)) {
        return Cause{w.rank, absl::StrCat("rank ", w.rank, " ", w.how_it_failed)};
      }
    }
    // A frozen rank (SIGSTOP, a stuck read) may make a peer's collective
    // time out before the heartbeat watchdog fires (a loaded machine): a
    // rank already silent when the first failure came is the cause.
    for (const Worker& w : workers_) {
      const absl::Duration silent = first_failure_ - w.last_beat;
      if (&w != &named && w.armed && silent > kSilentBeforeFailure) {
        return Cause{w.rank, absl::StrCat("rank ", w.rank, " sent no heartbeat for ",
                                          absl::FormatDuration(silent), " (hung?) when rank ",
                                          named.rank, " failed: ", why)};
      }
    }
    // A rank stopped before its pulse started (before or during the
    // rendezvous) was never watched: the kernel says it is stopped.
    for (const Worker& w : workers_) {
      if (&w != &named && w.stopped_at_failure) {
        return Cause{w.rank, absl::StrCat("rank ", w.rank, " is stopped (SIGSTOP?)", gave_up)};
      }
    }
    // A rank alive that never reached the rendezvous (a slow start, a
    // stuck file system): the peer's error names it.
    const int absent = RankThatDidNotJoin(named.err.last_error);
    if (absent >= 0 && absent < static_cast<int>(workers_.size()) && absent != named.rank) {
      return Cause{absent, absl::StrCat("rank ", absent, " did not join the job", gave_up)};
    }
    // A rank alive but stuck (a data loader asleep, a stuck read) beats
    // on: the positions say which one the others waited for.
    if (const RankPosition* behind = BehindPosition(); behind && behind->rank != named.rank) {
      return Cause{behind->rank,
                   absl::StrCat("rank ", behind->rank, " is behind (", behind->where, ")", gave_up)};
    }
    return std::nullopt;
  }

  // The first failure stops the job and is the one reported; the ranks
  // that die of our SIGTERM after it are not news.
  void Fail(const Worker& w, const std::string& what, bool silent = false) {
    if (stopping_) return;
    first_failure_ = absl::Now();
    blamed_ = static_cast<int>(&w - workers_.data());
    cause_ = w.rank;
    // Where every rank was when the job broke, before they are stopped; a
    // silent rank is the one behind.
    positions_ = ReadPositions(positions_dir_, static_cast<int>(workers_.size()),
                               silent ? w.rank : -1);
    positions_table_ = FormatPositionTable(positions_);
    const int others = running_ - (w.running ? 1 : 0);
    failure_ = absl::AbortedError(absl::StrCat(
        "rank ", w.rank, " ", what, "; stopping the other ", others,
        " rank(s)"));
    for (Worker& other : workers_) {
      other.stopped_at_failure = other.running && IsStopped(other.pid);
    }
    // Before the SIGTERM: the ranks' traces (--trace) say why, and who.
    WriteStopNote(positions_dir_, {Behind(), std::string(failure_.message())});
    stopping_ = true;
    kill_at_ = absl::Now() + options_.grace_period;
    Signal(SIGTERM);
  }

  // The position the first failure's table marks behind, or null.
  const RankPosition* BehindPosition() const {
    for (const RankPosition& p : positions_) {
      if (p.behind) return &p;
    }
    return nullptr;
  }
  int Behind() const { return BehindPosition() ? BehindPosition()->rank : -1; }

  void Signal(int sig) {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      ::kill(w.pid, sig);
      w.killed_by_us |= sig == SIGKILL;
    }
  }

  const LaunchOptions& options_;
  std::vector<Worker> workers_;
  std::string rendezvous_;
  std::string positions_dir_;    // rendezvous_/positions
  std::vector<RankPosition> positions_;  // read at the first failure
  std::string positions_table_;  // FormatPositionTable(positions_)
  int blamed_ = -1;  // index of the first worker to fail
  int cause_ = -1;   // the rank the error names (RefineBlame's verdict)
  const int restarts_;  // restarts of the job before this start
  int running_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  absl::Time kill_at_;
  absl::Status failure_;
  int ranks_stop_signal_ = 0;  // the first rank's StoppedBySignal
  absl::Time first_failure_;   // when Fail() first ran
};

}  // namespace

int JobStopSignal() { return g_job_stop_signal; }

absl::Status LaunchLocalWorkers(int num_workers,
                                const std::vector<std::string>& argv,
                                const LaunchOptions& options) {
  if (num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot launch ", num_workers, " workers"));
  }
  if (argv.empty()) return absl::InvalidArgumentError("empty worker argv");
  g_job_stop_signal = 0;
  StopSignals stop_signals;
  std::vector<std::string> args = argv;
  for (int restarts = 0;; ++restarts) {
    RankFailure failure;
    absl::Status status;
    {
      Job job(num_workers, options, restarts);
      status = job.Start(args);  // on an error, ~Job kills what did start
      if (status.ok()) {
        status = job.Supervise();
        failure = job.Failure();
      }
    }
    if (options.failure != nullptr) *options.failure = failure;
    if (failure.rank < 0 || restarts >= options.max_restarts || !options.restart_argv ||
        g_stop_signal != 0) {
      return status;
    }
    absl::StatusOr<std::vector<std::string>> next =
        options.restart_argv(failure, status, restarts + 1);
    if (!next.ok()) return next.status();
    if (next->empty()) return absl::InvalidArgumentError("empty worker argv for a restart");
    args = *std::move(next);
  }
}

}  // namespace trainc
