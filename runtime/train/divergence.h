// How a training run tells that it diverged: a non-finite gradient norm
// (after each step, with clipping or skip_nonfinite) or a non-finite loss
// (at each sum over ranks). A private part of runtime/train (trainer.cc's).
// Every check decides alike on every rank (the norm and the loss sums are
// the world's), so the ranks stop together, before anything is saved over
// a good checkpoint.
#ifndef TRAINC_RUNTIME_TRAIN_DIVERGENCE_H_
#define TRAINC_RUNTIME_TRAIN_DIVERGENCE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"

namespace trainc {

// The first parameter (in model order) whose reduced gradient of the last
// step holds a non-finite value, as "; first non-finite gradient: NAME", or
// "" when there is none or it cannot be read. Read once, on the way out.
std::string FirstNonFiniteGradient(const Plan& plan, Device& device);

// The world's loss sums of the steps up to `step` (the last one is
// `step`'s), each with whether skip_nonfinite left it out: a non-finite one
// that was not left out is a divergence (DataLoss, naming the step).
absl::Status CheckLossesFinite(const Plan& plan, Device& device, int64_t step,
                               const std::vector<float>& losses,
                               const std::vector<bool>& skipped);

// skip_nonfinite's steps left out.
class NonFiniteSteps {
 public:
  // After step `step` with gradient norm `norm`: whether the step was left
  // out because the norm is not finite (the optimizers left the weights
  // and their state alone, plan.h); said on `log` for the first ten, then
  // every 100th. Without skip_nonfinite that is a divergence, found at its
  // step (not at the next log line); so are kMaxInARow skipped steps in a
  // row.
  absl::StatusOr<bool> LeaveOut(const Plan& plan, Device& device, int64_t step, double norm,
                                std::ostream& log, const char* line_start);
  int64_t skipped() const { return skipped_; }

  // skip_nonfinite gives up after this many skipped steps in a row.
  static constexpr int64_t kMaxInARow = 100;

 private:
  int64_t skipped_ = 0;
  int64_t in_a_row_ = 0;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_DIVERGENCE_H_
