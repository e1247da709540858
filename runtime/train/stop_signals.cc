#include "runtime/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstddef>

#include "runtime/train/trainer.h"

namespace trainc {
namespace {

// SIGTERM, SIGINT or SIGHUP received during TrainRank (Slurm preemption,
// Ctrl-C, the launcher passing either on), or 0. A second one ends the
// process at once, unless it is the local launcher (this process's parent)
// passing on the stop this rank already has: a terminal's Ctrl-C, `timeout`
// and `scancel` signal the launcher and every rank at once, and the
// launcher's SIGTERM that follows is the same request, not a second one.
// The launcher's own relay may also arrive first (it runs on another core
// while the kernel is still signalling the group), so only signals from
// elsewhere count towards "a second one": the launcher escalates by itself.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_outside_signals = 0;  // stop signals not from the launcher
// The signal the ranks agreed to stop on (every rank's, this one's or not).
int g_agreed_stop_signal = 0;

// The signals a stop vote counts, in the vote's order.
constexpr std::array<int, 3> kVotedSignals = {SIGINT, SIGTERM, SIGHUP};

void OnStopSignal(int sig, siginfo_t* info, void*) {
  const bool from_launcher =
      info != nullptr && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (!from_launcher) {
    g_outside_signals = g_outside_signals + 1;
    if (g_outside_signals > 1) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
      return;
    }
  }
  if (g_stop_signal == 0 || !from_launcher) g_stop_signal = sig;
}

}  // namespace

StopSignalScope::StopSignalScope() {
  g_stop_signal = 0;
  g_outside_signals = 0;
  g_agreed_stop_signal = 0;
  struct sigaction action = {};
  action.sa_sigaction = OnStopSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], &action, &previous_[i]);
  }
}

StopSignalScope::~StopSignalScope() {
  for (size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
}

std::vector<float> StopVote() {
  std::vector<float> stop(kVotedSignals.size(), 0.0f);
  for (size_t k = 0; k < kVotedSignals.size(); ++k) stop[k] = g_stop_signal == kVotedSignals[k];
  return stop;
}

int AgreeOnStop(const std::vector<float>& summed_votes) {
  for (size_t k = 0; k < kVotedSignals.size() && g_agreed_stop_signal == 0; ++k) {
    if (summed_votes[k] > 0) g_agreed_stop_signal = kVotedSignals[k];
  }
  return g_agreed_stop_signal;
}

bool ThisRankWasSignalled() { return g_stop_signal != 0; }

int ReceivedStopSignal() {
  return g_agreed_stop_signal != 0 ? g_agreed_stop_signal : g_stop_signal;
}

}  // namespace trainc
