// Small hand-made plans and profiles for the simulator's tests, with
// durations chosen by the profile (tiny rooflines, so an instruction takes
// the kernel overhead times its op's scale).
#ifndef TRAINC_COMPILER_COST_TEST_PLAN_H_
#define TRAINC_COMPILER_COST_TEST_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "compiler/cost/machine_profile.h"

namespace trainc::cost::testing {

// One compute instruction to append: its op ("relu", "tanh", ...), phase
// and whether the next all_reduce waits for it.
struct TestCompute {
  std::string op;
  Phase phase = Phase::kBackward;
};

// A plan of world_size ranks whose instructions are, in order, `before`,
// one all_reduce of a bucket of `bucket_bytes` (waiting for an event
// recorded by the last of `before` when `wait` is true), then `after`.
Plan TwoStreamPlan(const std::vector<TestCompute>& before, bool wait,
                   const std::vector<TestCompute>& after, int64_t bucket_bytes,
                   int64_t world_size);

// A profile where every compute instruction takes 1 us times scale[op]
// (a roofline of ~0) and an all-reduce is Gloo's whole-buffer ring with
// `alpha_us` and `bandwidth_GBps`; no step overhead.
MachineProfile UnitProfile(double alpha_us, double bandwidth_GBps);

}  // namespace trainc::cost::testing

#endif  // TRAINC_COMPILER_COST_TEST_PLAN_H_
