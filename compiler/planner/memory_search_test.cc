// memory = ...: the search keeps the fastest plan that fits, lists what it
// tried, and refuses with the smallest plan's arithmetic.
#include "compiler/planner/memory_search.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/cost/simulator.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// An MLP on 2 ranks, global batch 256, micro_batch = auto.
TrainSpec AutoSpec(int64_t budget) {
  TrainSpec spec = testing::MlpSpec(784, {1024, 1024}, 10, /*gpus=*/2, /*micro_batch=*/128,
                                    /*accumulate=*/1);
  spec.train.micro_batch_auto = true;
  spec.train.memory_bytes = budget;
  return spec;
}

struct Measured {
  int64_t bytes;
  double step_us;
};

// A plan's device bytes and predicted step, as the search measures them.
Measured Measure(TrainSpec spec, int64_t micro_batch, int64_t zero,
                 ZeroAccumulate accumulate = ZeroAccumulate::kAuto) {
  spec.train.memory_bytes = 0;
  spec.train.micro_batch_auto = false;
  spec.train.micro_batch = micro_batch;
  spec.train.accumulate = spec.train.global_batch / (spec.train.gpus * micro_batch);
  spec.train.zero = zero;
  spec.train.zero_accumulate = accumulate;
  if (zero == 3) spec.train.zero_prefetch = 1;  // as the search costs it
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<cost::MachineProfile> profile = PlanningProfile(spec, {});
  EXPECT_TRUE(profile.ok());
  cost::SimulationOptions options;
  options.world_size = spec.train.gpus;
  absl::StatusOr<cost::StepPrediction> p = cost::SimulateStep(*plan, *profile, options);
  EXPECT_TRUE(p.ok());
  return {DeviceBytes(*plan), p->step_us};
}

TEST(MemorySearch, KeepsTheFastestPlanThatFits) {
  // Every (micro_batch, zero) pair the search tries, measured directly.
  const TrainSpec spec = AutoSpec(1);
  std::vector<int64_t> micro_batches;
  for (int64_t m = 1; m <= 128; ++m) {
    if (128 % m == 0) micro_batches.push_back(m);
  }
  int64_t smallest = INT64_MAX, largest = 0;
  for (int64_t m : micro_batches) {
    for (int64_t zero : {0, 1, 2, 3}) {
      for (ZeroAccumulate how : {ZeroAccumulate::kLocal, ZeroAccumulate::kShard}) {
        const Measured x = Measure(spec, m, zero, how);
        smallest = std::min(smallest, x.bytes);
        largest = std::max(largest, x.bytes);
      }
    }
  }
  ASSERT_LT(smallest, largest);
  for (int64_t budget : {smallest, (smallest + largest) / 2, largest}) {
    absl::StatusOr<Plan> plan = BuildPlan(AutoSpec(budget));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LE(DeviceBytes(*plan), budget);
    EXPECT_EQ(plan->global_batch, 256);
    const Measured kept = Measure(spec, plan->micro_batch, plan->zero);
    for (int64_t m : micro_batches) {
      for (int64_t zero : {0, 1, 2, 3}) {
        const Measured x = Measure(spec, m, zero);
        if (x.bytes <= budget) {
          EXPECT_LE(kept.step_us, x.step_us) << m << " " << zero;
        }
      }
    }
    EXPECT_THAT(plan->memory_choice, HasSubstr("plans tried"));
    EXPECT_THAT(plan->memory_choice, HasSubstr("-> micro_batch"));
    EXPECT_THAT(PlanSummary(*plan), HasSubstr("the fastest that fits kept"));
  }
  // The whole batch in one micro-step only when everything fits.
  absl::StatusOr<Plan> roomy = BuildPlan(AutoSpec(largest));
  ASSERT_TRUE(roomy.ok());
  EXPECT_THAT(roomy->memory_choice, ::testing::Not(HasSubstr("too big")));
}

TEST(MemorySearch, RefusesWithTheSmallestPlansArithmetic) {
  absl::StatusOr<Plan> plan = BuildPlan(AutoSpec(1 << 20));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("none of the 46 plans tried fits"));
  EXPECT_THAT(plan.status().message(), HasSubstr("memory = 1.0 MiB"));
  EXPECT_THAT(plan.status().message(), HasSubstr("the smallest (micro_batch 1 x accumulate 128"));
  EXPECT_THAT(plan.status().message(), HasSubstr("parameters "));
}

TEST(MemorySearch, AGivenMicroBatchIsKept) {
  TrainSpec spec = AutoSpec(int64_t{1} << 40);
  spec.train.micro_batch_auto = false;
  spec.train.micro_batch = 32;
  spec.train.accumulate = 4;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->micro_batch, 32);
  EXPECT_EQ(plan->accumulate, 4);
  // zero 0, 1, 2, 2 (shard), 3, 3 (shard)
  EXPECT_THAT(plan->memory_choice, HasSubstr("6 plans tried"));
}

// At 512 ranks bucket_mb = auto wants large buckets (rings are latency-
// bound), which ZeRO-2 and 3 hold in flight: under a budget the search
// keeps the fastest bucketing whose plan fits.
TEST(MemorySearch, AutoBucketsFitTheBudget) {
  TrainSpec spec = testing::MlpSpec(784, {1024, 1024}, 10, /*gpus=*/512, /*micro_batch=*/1,
                                    /*accumulate=*/1);
  spec.train.machine = "h100_nvlink_ib";
  spec.train.zero = 2;
  spec.train.bucket_mb_auto = true;
  absl::StatusOr<Plan> fastest = BuildPlan(spec);
  ASSERT_TRUE(fastest.ok()) << fastest.status();
  int64_t smallest = INT64_MAX;
  for (int64_t zero : {0, 1, 2, 3}) {
    TrainSpec fixed = spec;
    fixed.train.zero = zero;
    fixed.train.bucket_mb_auto = false;
    fixed.train.bucket_mb = 0.0625;
    if (zero == 3) fixed.train.zero_prefetch = 1;
    absl::StatusOr<Plan> plan = BuildPlan(fixed);
    ASSERT_TRUE(plan.ok()) << plan.status();
    smallest = std::min(smallest, DeviceBytes(*plan));
  }
  ASSERT_LT(smallest, DeviceBytes(*fastest));
  spec.train.memory_bytes = (smallest + DeviceBytes(*fastest)) / 2;
  absl::StatusOr<Plan> capped = BuildPlan(spec);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_LE(DeviceBytes(*capped), spec.train.memory_bytes);
  EXPECT_THAT(capped->bucket_choice, HasSubstr("kept the fastest that fits"));
}

}  // namespace
}  // namespace trainc
