#include "compiler/cost/simulator.h"

#include <string>

#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/cost/test_plan.h"

namespace trainc::cost {
namespace {

using testing::TwoStreamPlan;
using testing::UnitProfile;

// Compute: relu 100 us. All-reduce of 1000 bytes on 2 ranks: α + S β =
// 49 + 1 = 50 us.
MachineProfile Profile() {
  MachineProfile p = UnitProfile(/*alpha_us=*/49, /*bandwidth_GBps=*/1);
  p.scale["relu"] = 100;
  return p;
}

TEST(SimulatorTest, AllReduceWaitingForTheGradientIsFullyExposed) {
  const Plan plan = TwoStreamPlan({{"relu"}}, /*wait=*/true, {}, 1000, 2);
  StepPrediction p = SimulateStep(plan, Profile()).value();
  EXPECT_DOUBLE_EQ(p.step_us, 150);
  EXPECT_DOUBLE_EQ(p.all_reduce_us, 50);
  EXPECT_DOUBLE_EQ(p.hidden_us, 0);
  EXPECT_DOUBLE_EQ(p.exposed_us, 50);
  ASSERT_EQ(p.spans.size(), 2u);
  EXPECT_DOUBLE_EQ(p.spans[1].begin_us, 100);
}

TEST(SimulatorTest, IndependentAllReduceIsFullyHidden) {
  // No event between them: the comm stream runs beside the compute stream
  // (the host issues the all-reduce once relu is issued, here with an
  // asynchronous host so both start at 0).
  MachineProfile profile = Profile();
  profile.host_synchronous = false;
  const Plan plan = TwoStreamPlan({{"relu"}}, /*wait=*/false, {}, 1000, 2);
  StepPrediction p = SimulateStep(plan, profile).value();
  EXPECT_DOUBLE_EQ(p.step_us, 100);
  EXPECT_DOUBLE_EQ(p.hidden_us, 50);
  EXPECT_DOUBLE_EQ(p.exposed_us, 0);
}

TEST(SimulatorTest, SynchronousHostIssuesAfterTheComputeItRuns) {
  // The CPU device: the host thread runs relu, so the all-reduce after it
  // in program order cannot start before relu ends, event or not.
  const Plan plan = TwoStreamPlan({{"relu"}}, /*wait=*/false, {}, 1000, 2);
  StepPrediction p = SimulateStep(plan, Profile()).value();
  EXPECT_DOUBLE_EQ(p.step_us, 150);
  EXPECT_DOUBLE_EQ(p.exposed_us, 50);
}

TEST(SimulatorTest, OverlapOffMovesTheAllReduceBehindTheBackward) {
  // relu (backward) -> all_reduce, then tanh (backward, 80 us) beside it.
  MachineProfile profile = Profile();
  profile.scale["tanh"] = 80;
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, 1000, 2);
  StepPrediction on = SimulateStep(plan, profile).value();
  EXPECT_DOUBLE_EQ(on.step_us, 180);
  EXPECT_DOUBLE_EQ(on.hidden_us, 50);
  EXPECT_DOUBLE_EQ(on.exposed_us, 0);
  EXPECT_DOUBLE_EQ(on.backward_us, 180);

  SimulationOptions off;
  off.overlap = false;
  StepPrediction p = SimulateStep(plan, profile, off).value();
  EXPECT_DOUBLE_EQ(p.step_us, 230);
  EXPECT_DOUBLE_EQ(p.hidden_us, 0);
  EXPECT_DOUBLE_EQ(p.exposed_us, 50);
}

TEST(SimulatorTest, OneRankSkipsTheCollectiveAndAddsTheStepOverhead) {
  MachineProfile profile = Profile();
  profile.step_overhead_us = 7;
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {}, 1000, 2);
  SimulationOptions one;
  one.world_size = 1;
  StepPrediction p = SimulateStep(plan, profile, one).value();
  EXPECT_DOUBLE_EQ(p.step_us, 107);
  EXPECT_DOUBLE_EQ(p.all_reduce_us, 0);
  EXPECT_EQ(p.spans.size(), 1u);
}

TEST(SimulatorTest, TheSlowestRankHoldsTheCollective) {
  // The slowest rank's relu takes 150 us: the typical rank waits 50 us
  // inside the all-reduce, which then moves data for 50 us.
  MachineProfile profile = Profile();
  profile.rank_imbalance = 0.5;
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {}, 1000, 2);
  StepPrediction p = SimulateStep(plan, profile).value();
  EXPECT_DOUBLE_EQ(p.step_us, 200);
  EXPECT_DOUBLE_EQ(p.all_reduce_us, 100);
  EXPECT_DOUBLE_EQ(p.exposed_us, 100);
}

TEST(SimulatorTest, ContentionSlowsComputeBesideAMovingCollective) {
  // Asynchronous host: tanh (80 us of work) starts at 100 beside the
  // all-reduce [100, 150) at half speed: 25 us of work by 150, the other
  // 55 after, so it ends at 205.
  MachineProfile profile = Profile();
  profile.host_synchronous = false;
  profile.scale["tanh"] = 80;
  profile.comm_contention = 1;
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, 1000, 2);
  StepPrediction p = SimulateStep(plan, profile).value();
  EXPECT_DOUBLE_EQ(p.step_us, 205);
}

TEST(SimulatorTest, RejectsAnEventOutOfRange) {
  Plan plan = TwoStreamPlan({{"relu"}}, true, {}, 1000, 2);
  plan.instructions[1].wait_events = {3};
  EXPECT_FALSE(SimulateStep(plan, Profile()).ok());
}

TEST(SimulatorTest, DefaultExampleOnEveryBundledProfile) {
  // The real compile pipeline: more ranks never make a step faster, and the
  // exposed part is never more than the all-reduce time.
  FrontendResult result = CompileFile("dsl_examples/fashion_mlp.train");
  ASSERT_TRUE(result.spec.has_value());
  const Plan plan = BuildPlan(*result.spec).value();
  for (const BundledProfile& b : BundledProfiles()) {
    SCOPED_TRACE(b.name);
    const MachineProfile profile = ParseMachineProfile(b.text, b.path).value();
    double previous = 0;
    for (int64_t n : {1, 2, 8, 64, 1024}) {
      SimulationOptions options;
      options.world_size = n;
      StepPrediction p = SimulateStep(plan, profile, options).value();
      EXPECT_GE(p.step_us, previous);
      EXPECT_LE(p.exposed_us, p.all_reduce_us + 1e-9);
      EXPECT_GT(p.backward_us, 0);
      previous = p.step_us;
    }
  }
}

Plan CompileExample(const std::string& file, const Overrides& overrides) {
  FrontendResult result = CompileFile(file, overrides);
  EXPECT_TRUE(result.spec.has_value()) << FormatDiagnostics(result.diagnostics, result.source);
  return BuildPlan(*result.spec).value();
}

// A profile where communication dominates: 1 us of latency, 0.01 GB/s.
MachineProfile CommBound() {
  MachineProfile p = ParseMachineProfile(BundledProfiles()[0].text, "x").value();
  p.intra = p.inter = {/*alpha_us=*/1, /*bandwidth_GBps=*/0.01};
  p.step_overhead_us = 0;
  return p;
}

TEST(SimulatorTest, ZeroPlanAccountsItsReduceScattersAndAllGathers) {
  // fashion_mlp with clipping: per bucket a reduce-scatter and an
  // all-gather, and the all-reduce of grad_sq.
  const Plan plan = CompileExample("dsl_examples/fashion_mlp.train",
                                   {{"zero", "1"}, {"gpus", "2"}, {"clip_grad_norm", "1"}});
  ASSERT_EQ(plan.zero, 1);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap);
    SimulationOptions options;
    options.overlap = overlap;
    StepPrediction p = SimulateStep(plan, CommBound(), options).value();
    double rs = 0, ag = 0, scalar = 0;
    for (const SimulatedSpan& s : p.spans) {
      const Instruction& in = plan.instructions[s.instr];
      const double us = s.end_us - s.begin_us;
      if (in.op == "reduce_scatter") rs += us;
      if (in.op == "all_gather") ag += us;
      if (in.op == "all_reduce") scalar += us;
    }
    EXPECT_GT(rs, 0);
    EXPECT_GT(ag, 0);
    EXPECT_GT(scalar, 0);
    // One comm stream: its busy time is the sum, hidden + exposed.
    EXPECT_NEAR(p.all_reduce_us, rs + ag + scalar, 1e-6);
    EXPECT_NEAR(p.hidden_us + p.exposed_us, p.all_reduce_us, 1e-6);
    // Comm-bound: the step cannot hide the all-gathers after the last
    // optimizer, nor (overlap off) any reduce-scatter.
    EXPECT_GT(p.exposed_us, overlap ? 0.0 : rs);
  }
}

TEST(SimulatorTest, Bf16HalvesGradientCommunicationWhenCommBound) {
  for (const char* zero : {"0", "1"}) {
    SCOPED_TRACE(zero);
    const Overrides base = {{"gpus", "2"}, {"zero", zero}};
    Overrides bf16 = base;
    bf16.emplace_back("grad_comm", "bf16");
    const Plan fp32_plan = CompileExample("dsl_examples/fashion_mlp.train", base);
    const Plan bf16_plan = CompileExample("dsl_examples/fashion_mlp.train", bf16);
    const StepPrediction a = SimulateStep(fp32_plan, CommBound()).value();
    const StepPrediction b = SimulateStep(bf16_plan, CommBound()).value();
    auto gradient_comm_us = [](const Plan& plan, const StepPrediction& p) {
      double us = 0;
      for (const SimulatedSpan& s : p.spans) {
        const std::string& op = plan.instructions[s.instr].op;
        if (op == "all_reduce" || op == "reduce_scatter") us += s.end_us - s.begin_us;
      }
      return us;
    };
    const double grads_a = gradient_comm_us(fp32_plan, a);
    const double grads_b = gradient_comm_us(bf16_plan, b);
    // 1 us of latency per step of the collective; the bytes halve.
    EXPECT_NEAR(grads_b / grads_a, 0.5, 0.01);
    EXPECT_LT(b.step_us, a.step_us);
  }
}

}  // namespace
}  // namespace trainc::cost
