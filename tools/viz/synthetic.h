// Synthetic plans and traces for the tests of tools/viz (testonly).
//
// The plan is an MLP in the shape the planner produces (ARCHITECTURE.md,
// compiler/plan/plan.h):
// `hidden_layers` x (linear -> relu), a linear head, cross-entropy; its
// gradients bucketed in backward order; all-reduces issued in the last
// micro-step; one optimizer op per bucket. It passes ValidatePlan.
// The trace is what a runtime with fixed op costs would record for it.
#ifndef TRAINC_TOOLS_VIZ_SYNTHETIC_H_
#define TRAINC_TOOLS_VIZ_SYNTHETIC_H_

#include <cstdint>
#include <string>

#include "compiler/plan/plan.h"

namespace trainc::viz {

struct MlpPlanOptions {
  std::string model = "synthetic_mlp";
  int hidden_layers = 2;
  int64_t input = 784, width = 256, classes = 10;
  int64_t world_size = 2, micro_batch = 64, accumulate = 2;
  int64_t bucket_bytes = 256 * 1024;  // close a bucket once it holds this
};

Plan MakeSyntheticPlan(const MlpPlanOptions& options);

// Chrome trace JSON for `steps` steps of `plan` on every rank: compute ops
// back to back (forward 10 us, backward 20 us, others 5 us), each
// all-reduce as soon as its event and the comm stream allow, lasting
// 1 us per KiB; rank r runs r us late.
std::string MakeSyntheticTrace(const Plan& plan, int steps);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_SYNTHETIC_H_
