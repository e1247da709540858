// Stragglers: a rank whose steps take it consistently longer than its
// peers' (a throttled GPU, a slow disk, a noisy neighbour) slows every
// rank, since every step ends in collectives they all wait for. Its peers
// then wait in those collectives while it works, so the rank that is busy
// longest (data and compute, not waiting) is the one to name.
//
//   StragglerWatch watch(world_size);
//   // every sum over ranks: each rank's times over the steps since the last
//   for (const Straggler& s : watch.Add(last_step, steps, per_rank)) log << Describe(s);
//   // at the end: watch.named()
#ifndef TRAINC_RUNTIME_TRAIN_STRAGGLERS_H_
#define TRAINC_RUNTIME_TRAIN_STRAGGLERS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace trainc {

// One rank's host time per step over some steps, in ms: the median of
// each over those steps (runtime/exec's StepTimes), so that a burst (the
// rank descheduled once on a busy machine) does not count as slowness.
struct RankStepTimes {
  double busy_ms = 0;     // data (wall time) + compute (the host thread's CPU time)
  double data_ms = 0;
  double waiting_ms = 0;
};

// The medians of `steps` (each a step's {busy, data, waiting}).
RankStepTimes MedianStepTimes(std::vector<RankStepTimes> steps);

// A rank named: how much longer it was busy than the others, over which
// steps, and where its time went (per step).
struct Straggler {
  int rank = 0;
  double ratio = 0;  // its busy time over the median of the others'
  int64_t first_step = 0, last_step = 0;
  double busy_ms = 0, data_ms = 0, compute_ms = 0, waiting_ms = 0;  // its own, per step
  double others_busy_ms = 0, others_waiting_ms = 0;                 // the median others'
};

// "rank 1 was busy 5.3x as long as the others over steps 21-40: 24.1 ms
// per step (data 20.3, compute 3.8), waiting 0.4; the others busy 4.5 ms,
// waiting 20.0"
std::string Describe(const Straggler& s);

class StragglerWatch {
 public:
  // A rank is named when over the last `window_steps` steps (at least) its
  // busy time is `ratio` times the median of the other ranks' or more.
  static constexpr int64_t kWindowSteps = 20;
  static constexpr double kRatio = 2.0;
  explicit StragglerWatch(int world_size, int64_t window_steps = kWindowSteps,
                          double ratio = kRatio);

  // Each rank's times per step over the `steps` steps up to `last_step`.
  // Returns the ranks named now that were not named before.
  std::vector<Straggler> Add(int64_t last_step, int64_t steps,
                             const std::vector<RankStepTimes>& per_rank);

  // Every rank named so far, in the order named, each at its worst ratio.
  const std::vector<Straggler>& named() const { return named_; }

 private:
  struct Interval {
    int64_t last_step, steps;
    std::vector<RankStepTimes> per_rank;
  };
  const int world_size_;
  const int64_t window_steps_;
  const double ratio_;
  std::deque<Interval> window_;
  std::vector<Straggler> named_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_STRAGGLERS_H_
