// The stop signals of a training run (SIGTERM, SIGINT, SIGHUP: Slurm
// preemption, Ctrl-C, the launcher passing either on): a private part of
// runtime/train (trainer.cc's). A signal only marks the request; the ranks
// vote at a step boundary (StopVote, summed over ranks, then AgreeOnStop)
// and stop together. ReceivedStopSignal (trainer.h) reads the result.
#ifndef TRAINC_RUNTIME_TRAIN_STOP_SIGNALS_H_
#define TRAINC_RUNTIME_TRAIN_STOP_SIGNALS_H_

#include <signal.h>

#include <array>
#include <vector>

namespace trainc {

// The stop handlers for one TrainRank; the previous ones come back after.
// Installing them forgets the signals of an earlier run.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};
  std::array<struct sigaction, 3> previous_;
};

// This rank's vote: one value per signal a vote counts (SIGINT, SIGTERM,
// SIGHUP), 1 for the one this rank received; summed over ranks, it is
// AgreeOnStop's input.
std::vector<float> StopVote();

// The signal the ranks agree to stop on, from the votes summed over ranks
// (the first counted; once agreed it stays), or 0 to go on.
int AgreeOnStop(const std::vector<float>& summed_votes);

// Whether this rank received a stop signal itself (else another rank did).
bool ThisRankWasSignalled();

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_STOP_SIGNALS_H_
