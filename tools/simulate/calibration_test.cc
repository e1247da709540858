#include "tools/simulate/calibration.h"

#include <vector>

#include "gtest/gtest.h"
#include "compiler/cost/cost_model.h"
#include "compiler/cost/simulator.h"
#include "compiler/cost/test_plan.h"

namespace trainc::simulate {
namespace {

using cost::testing::TwoStreamPlan;
using cost::testing::UnitProfile;

// Synthetic all-reduces of three sizes, timed by `link` and `algorithm`.
std::vector<CollectiveSample> Samples(cost::AllReduceAlgorithm algorithm, int64_t n,
                                      const cost::LinkProfile& link) {
  cost::MachineProfile p = UnitProfile(0, 1);
  p.all_reduce = algorithm;
  p.intra = p.inter = link;
  std::vector<CollectiveSample> samples;
  for (double bytes : {1600.0, 136192.0, 802816.0}) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      samples.push_back({bytes, cost::AllReduceUs(p, n, bytes)});
    }
  }
  return samples;
}

TEST(FitAllReduceTest, RecoversAlphaAndBetaOfEachAlgorithm) {
  const cost::LinkProfile truth{/*alpha_us=*/30, /*bandwidth_GBps=*/2};
  for (cost::AllReduceAlgorithm a :
       {cost::AllReduceAlgorithm::kRing, cost::AllReduceAlgorithm::kTree,
        cost::AllReduceAlgorithm::kWholeBufferRing}) {
    for (int64_t n : {2, 4, 64}) {
      SCOPED_TRACE(absl::StrCat(cost::AllReduceAlgorithmName(a), " on ", n));
      cost::LinkProfile fit = FitAllReduce(a, n, Samples(a, n, truth)).value();
      EXPECT_NEAR(fit.alpha_us, truth.alpha_us, 1e-6);
      EXPECT_NEAR(fit.bandwidth_GBps, truth.bandwidth_GBps, 1e-9);
    }
  }
}

TEST(FitAllReduceTest, LeastSquaresThroughNoise) {
  // time = 2 α + S β on 2 ranks (ring), ±5 us of noise, each size seen
  // with both signs.
  std::vector<CollectiveSample> samples;
  for (int i = 0; i < 40; ++i) {
    const double bytes = 10000.0 * (i % 8 + 1);
    samples.push_back({bytes, 2 * 20 + bytes / 1e3 + ((i / 8) % 2 ? 5 : -5)});
  }
  cost::LinkProfile fit = FitAllReduce(cost::AllReduceAlgorithm::kRing, 2, samples).value();
  EXPECT_NEAR(fit.alpha_us, 20, 0.5);
  EXPECT_NEAR(fit.bandwidth_GBps, 1, 0.01);
}

TEST(FitAllReduceTest, NegativeInterceptMeansNoLatency) {
  // 2 ranks, whole-buffer ring: time = α + S β with the points below the
  // origin's line at small sizes.
  std::vector<CollectiveSample> samples = {{1000, 0.5}, {2000, 2.5}, {4000, 4.0}};
  cost::LinkProfile fit =
      FitAllReduce(cost::AllReduceAlgorithm::kWholeBufferRing, 2, samples).value();
  EXPECT_EQ(fit.alpha_us, 0);
  EXPECT_GT(fit.bandwidth_GBps, 0);
}

TEST(FitAllReduceTest, NeedsTwoSizesAndTwoRanks) {
  EXPECT_FALSE(FitAllReduce(cost::AllReduceAlgorithm::kRing, 2, {{100, 5}, {100, 6}}).ok());
  EXPECT_FALSE(FitAllReduce(cost::AllReduceAlgorithm::kRing, 1, {{100, 5}, {200, 6}}).ok());
  EXPECT_FALSE(FitAllReduce(cost::AllReduceAlgorithm::kRing, 2, {{100, 6}, {200, 5}}).ok());
}

// A two-rank trace of `plan` (relu -> all_reduce -> tanh) over `steps`
// steps, from a "true" machine: relu 300 us, tanh 200 us, all-reduce
// α = 40 us, 0.5 GB/s, rank 1 late by `late_us` (its relu is slower), 25 us
// between steps.
viz::Trace SyntheticTrace(const Plan& plan, int steps, double late_us) {
  viz::Trace trace;
  trace.plan_model = plan.model;
  trace.plan_instructions = static_cast<int64_t>(plan.instructions.size());
  trace.world_size = 2;
  const double bytes = static_cast<double>(plan.buckets[0].bytes);
  const double all_reduce_us = 40 + bytes / 500;  // whole-buffer ring, 2 ranks
  double t = 0;
  for (int s = 1; s <= steps; ++s) {
    for (int rank = 0; rank < 2; ++rank) {
      const double relu = 300 + (rank == 1 ? late_us : 0);
      const double last_arrival = t + 300 + late_us;
      auto add = [&](int instr, int stream, double ts, double dur) {
        viz::TraceEvent e;
        e.instr = instr;
        e.op = plan.instructions[instr].op;
        e.cat = PhaseName(plan.instructions[instr].phase);
        e.rank = rank;
        e.stream = stream;
        e.step = s;
        e.ts_us = ts;
        e.dur_us = dur;
        trace.events.push_back(e);
      };
      add(0, 0, t, relu);
      add(1, 1, t + relu, last_arrival + all_reduce_us - (t + relu));
      add(2, 0, t + relu, 200);
    }
    t += 300 + late_us + std::max(all_reduce_us, 200.0) + 25;
  }
  return trace;
}

TEST(CalibrateTest, RecoversOpScalesAndStepOverhead) {
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, 100000, 2);
  // The base has the true network (one bucket size cannot fit it).
  cost::MachineProfile base = UnitProfile(40, 0.5);
  base.scale["relu"] = 7;  // the base's own scale is replaced, not multiplied
  Calibration c = Calibrate(plan, SyntheticTrace(plan, 5, 0), base).value();
  // The unscaled model says 1 us for each: the scale is the measured time.
  EXPECT_NEAR(c.profile.scale.at("relu"), 300, 1e-9);
  EXPECT_NEAR(c.profile.scale.at("tanh"), 200, 1e-9);
  EXPECT_TRUE(c.overlap);
  EXPECT_EQ(c.slowest_rank, 0);  // a tie: the first with the most
  EXPECT_NEAR(c.profile.rank_imbalance, 0, 1e-12);
  // The replay of the fit is 300 + 240 (the all-reduce) = 540; the period
  // 565.
  EXPECT_NEAR(c.profile.step_overhead_us, 25, 1e-6);
  EXPECT_NEAR(c.host_gap_us, 25, 1e-9);
}

TEST(CalibrateTest, RecoversAlphaAndBetaFromTheLastArrival) {
  // Two buckets' worth of sizes: one plan per size, one trace each, would
  // be needed; instead calibrate two plans and check each sample is the
  // last arrival's time (α + S β exactly), then fit across both.
  std::vector<CollectiveSample> samples;
  for (int64_t bytes : {20000, 100000}) {
    const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, bytes, 2);
    // Rank 1 arrives 70 us late: rank 0's all-reduce lasts 70 us longer.
    Calibration c = Calibrate(plan, SyntheticTrace(plan, 4, 70), UnitProfile(1, 100)).value();
    EXPECT_EQ(c.collective_samples, 4);
    EXPECT_EQ(c.slowest_rank, 1);
    EXPECT_NEAR(c.profile.rank_imbalance, 70.0 / 500, 1e-9);
    samples.push_back({static_cast<double>(bytes), 40 + bytes / 500.0});
  }
  cost::LinkProfile fit =
      FitAllReduce(cost::AllReduceAlgorithm::kWholeBufferRing, 2, samples).value();
  EXPECT_NEAR(fit.alpha_us, 40, 1e-9);
  EXPECT_NEAR(fit.bandwidth_GBps, 0.5, 1e-12);
}

TEST(CalibrateTest, OneSizeLeavesTheNetworkAndSaysWhy) {
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, 100000, 2);
  Calibration c = Calibrate(plan, SyntheticTrace(plan, 3, 0), UnitProfile(1, 100)).value();
  EXPECT_FALSE(c.network_fitted);
  EXPECT_NE(c.network_note.find("two or more sizes"), std::string::npos);
  EXPECT_DOUBLE_EQ(c.profile.intra.alpha_us, 1);
}

TEST(CalibrateTest, RejectsATraceOfAnotherPlan) {
  const Plan plan = TwoStreamPlan({{"relu"}}, true, {{"tanh"}}, 100000, 2);
  viz::Trace trace = SyntheticTrace(plan, 2, 0);
  trace.plan_instructions = 99;
  EXPECT_FALSE(Calibrate(plan, trace, UnitProfile(1, 100)).ok());
}

}  // namespace
}  // namespace trainc::simulate
