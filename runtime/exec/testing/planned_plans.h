// Test helpers for running plans the real front end and planner make from
// dsl_examples/*.train: compile one with overrides, give its parameters
// their initial values, and feed deterministic synthetic batches.
#ifndef TRAINC_RUNTIME_EXEC_TESTING_PLANNED_PLANS_H_
#define TRAINC_RUNTIME_EXEC_TESTING_PLANNED_PLANS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/frontend/overrides.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"

namespace trainc {
namespace testing {

// dsl_examples/EXAMPLE.train (a runfile of the test) with `overrides`,
// planned; the diagnostics are the error.
absl::StatusOr<Plan> CompileExample(const std::string& example,
                                    const Overrides& overrides);

// Every parameter as its `init` says (uniform from one fixed seed, ones,
// zeros), so that every rank and split starts from the same weights.
absl::Status InitParameters(const Plan& plan, Device& device);

// Every parameter of the plan, in plan order, one after another.
absl::StatusOr<std::vector<float>> DownloadParameters(const Plan& plan, Device& device);

// Deterministic data: what global micro-batch g of step s holds depends on
// (s, g) only, whichever rank runs it. Labels are in [0, kClasses).
class SyntheticBatches : public BatchSource {
 public:
  static constexpr int64_t kClasses = 10;
  SyntheticBatches(int rank, int64_t step) : rank_(rank), step_(step) {}
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  int rank_;
  int64_t step_;
};

}  // namespace testing
}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_TESTING_PLANNED_PLANS_H_
