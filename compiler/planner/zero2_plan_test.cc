// ZeRO-2 plans: gradient shards that persist, buckets planned by
// liveness, one reduce-scatter per micro-step or per step, and the choice
// between them.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// 2 ranks x micro_batch 16 x accumulate 2, buckets of 0.1 MB.
TrainSpec Zero2Spec(ZeroAccumulate accumulate) {
  TrainSpec spec = testing::MlpSpec(784, {256, 128}, 10, /*gpus=*/2, /*micro_batch=*/16,
                                    /*accumulate=*/2);
  spec.train.bucket_mb = 0.1;
  spec.train.zero = 2;
  spec.train.zero_accumulate = accumulate;
  return spec;
}

Plan Build(const TrainSpec& spec) {
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : Plan();
}

TEST(Zero2Plan, ShardsPersistAndBucketsLiveOnlyUntilScattered) {
  const Plan plan = Build(Zero2Spec(ZeroAccumulate::kShard));
  ASSERT_TRUE(ValidatePlan(plan).ok()) << ValidatePlan(plan);
  EXPECT_EQ(plan.zero, 2);
  EXPECT_EQ(plan.zero_accumulate, ZeroAccumulate::kShard);
  ASSERT_GE(plan.buckets.size(), 2u);
  int64_t shard_bytes = 0;
  for (const Bucket& b : plan.buckets) {
    ASSERT_GE(b.grad_shard, 0);
    const Buffer& shard = plan.buffers[b.grad_shard];
    EXPECT_EQ(shard.kind, BufferKind::kGradShard);
    EXPECT_EQ(shard.bytes * plan.world_size, b.bytes);
    EXPECT_EQ(shard.first_use, -1) << shard.name;  // the whole run
    shard_bytes += shard.bytes;
  }
  EXPECT_EQ(plan.memory.gradient_bytes, shard_bytes);
  // Every micro-step scatters every bucket into its shard, adding after
  // the first; each micro-step's bucket is its own arena buffer, live
  // until the first compute instruction waiting for its scatter.
  std::map<int, std::set<int>> scattered;  // micro-step -> bucket buffers
  std::set<int> micro0_events;
  for (const Instruction& in : plan.instructions) {
    if (in.op != "reduce_scatter") continue;
    const Bucket& b = plan.buckets[static_cast<int>(in.attrs.at("bucket"))];
    EXPECT_EQ(in.outputs, std::vector<int>{b.grad_shard}) << in.label;
    EXPECT_EQ(in.attrs.at("accumulate"), in.micro_step > 0 ? 1 : 0) << in.label;
    const Buffer& bucket = plan.buffers[in.inputs[0]];
    EXPECT_EQ(bucket.kind, BufferKind::kBucket);
    EXPECT_GE(bucket.first_use, 0) << bucket.name;
    scattered[in.micro_step].insert(bucket.id);
    if (in.micro_step == 0) micro0_events.insert(in.record_events.begin(), in.record_events.end());
    int waiter = -1;
    for (size_t j = in.id + 1; j < plan.instructions.size() && waiter < 0; ++j) {
      const Instruction& next = plan.instructions[j];
      for (int e : next.wait_events) {
        if (next.stream == Stream::kCompute && in.record_events[0] == e) waiter = next.id;
      }
    }
    ASSERT_GE(waiter, 0) << in.label;
    EXPECT_GE(bucket.last_use, waiter) << bucket.name;
  }
  ASSERT_EQ(scattered.size(), 2u);
  EXPECT_EQ(scattered[0].size(), plan.buckets.size());
  for (int id : scattered[0]) EXPECT_EQ(scattered[1].count(id), 0u);
  // Micro-step 1 starts once micro-step 0's buckets are scattered, and
  // its gradients start afresh in its own buckets.
  for (const Instruction& in : plan.instructions) {
    if (in.op == "load_batch" && in.micro_step == 1) {
      EXPECT_EQ(std::set<int>(in.wait_events.begin(), in.wait_events.end()), micro0_events);
    }
    for (int id : in.outputs) {
      if (plan.buffers[id].kind == BufferKind::kGradient) {
        EXPECT_EQ(in.attrs.at("accumulate"), 0) << in.label;
      }
    }
  }
  absl::StatusOr<Plan> back = PlanFromText(PlanToText(plan), "zero2.plan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->zero_accumulate, ZeroAccumulate::kShard);
  EXPECT_EQ(back->buckets[0].grad_shard, plan.buckets[0].grad_shard);
  EXPECT_EQ(PlanToText(*back), PlanToText(plan));
}

TEST(Zero2Plan, LocalScattersOnceFromOneBucket) {
  const Plan plan = Build(Zero2Spec(ZeroAccumulate::kLocal));
  ASSERT_TRUE(ValidatePlan(plan).ok());
  int scatters = 0;
  for (const Instruction& in : plan.instructions) {
    if (in.op == "reduce_scatter") {
      ++scatters;
      EXPECT_EQ(in.micro_step, 1);
      EXPECT_EQ(in.attrs.at("accumulate"), 0);  // the shard is overwritten
    }
    for (int id : in.outputs) {
      if (plan.buffers[id].kind == BufferKind::kGradient) {
        EXPECT_EQ(in.attrs.at("accumulate"), in.micro_step) << in.label;
      }
    }
  }
  EXPECT_EQ(scatters, static_cast<int>(plan.buckets.size()));
}

TEST(Zero2Plan, BucketsShareMemoryThatZero1KeepsForTheWholeRun) {
  // Nine layers on 4 ranks, a bucket per weight: ZeRO-1 keeps every
  // bucket; ZeRO-2 keeps the shards and two buckets in flight.
  TrainSpec spec = testing::MlpSpec(784, std::vector<int64_t>(8, 512), 10, /*gpus=*/4,
                                    /*micro_batch=*/16, /*accumulate=*/2);
  spec.train.bucket_mb = 0.5;
  spec.train.zero = 1;
  const Plan zero1 = Build(spec);
  spec.train.zero = 2;
  for (ZeroAccumulate how : {ZeroAccumulate::kShard, ZeroAccumulate::kLocal}) {
    spec.train.zero_accumulate = how;
    const Plan zero2 = Build(spec);
    ASSERT_GE(zero2.buckets.size(), 9u);
    EXPECT_EQ(zero2.memory.optimizer_state_bytes, zero1.memory.optimizer_state_bytes);
    EXPECT_LE(4 * zero2.memory.gradient_bytes,
              zero1.memory.gradient_bytes + 4 * 64 * zero2.buckets.size());
    // Scattering every micro-step frees the buckets between micro-steps.
    if (how == ZeroAccumulate::kShard) {
      EXPECT_LT(zero2.arena_bytes, zero1.arena_bytes - zero1.memory.gradient_bytes / 4)
          << PlanSummary(zero2);
    }
  }
}

TEST(Zero2Plan, DeterministicModeAccumulatesLocallyAndSaysWhy) {
  TrainSpec spec = Zero2Spec(ZeroAccumulate::kAuto);
  spec.train.deterministic = true;
  const Plan plan = Build(spec);
  EXPECT_EQ(plan.zero_accumulate, ZeroAccumulate::kLocal);
  EXPECT_THAT(plan.zero_accumulate_choice, HasSubstr("deterministic"));
  EXPECT_THAT(PlanSummary(plan), HasSubstr("zero_accumulate = local"));
}

TEST(Zero2Plan, AutoReplaysBothAndExplains) {
  const Plan plan = Build(Zero2Spec(ZeroAccumulate::kAuto));
  EXPECT_NE(plan.zero_accumulate, ZeroAccumulate::kAuto);
  EXPECT_THAT(plan.zero_accumulate_choice, HasSubstr("shard's arena"));
  EXPECT_THAT(plan.zero_accumulate_choice, HasSubstr("local's"));
}

TEST(Zero2Plan, ValidationWantsEveryLiveGradientInsideALiveBucket) {
  Plan plan = Build(Zero2Spec(ZeroAccumulate::kShard));
  for (Buffer& b : plan.buffers) {
    if (b.kind != BufferKind::kGradient) continue;
    ASSERT_GT(b.first_use, 0);
    b.first_use = 0;  // live before its bucket
    break;
  }
  EXPECT_THAT(ValidatePlan(plan).message(), HasSubstr("inside no live bucket"));
  // ... and inside its bytes: one moved to straddle its bucket's end is
  // held by none.
  plan = Build(Zero2Spec(ZeroAccumulate::kShard));
  bool moved = false;
  for (Buffer& g : plan.buffers) {
    if (g.kind != BufferKind::kGradient || g.first_use < 0) continue;
    for (const Buffer& c : plan.buffers) {
      if (c.kind == BufferKind::kBucket && c.first_use >= 0 && c.first_use <= g.first_use &&
          g.last_use <= c.last_use && c.offset <= g.offset &&
          g.offset + g.bytes <= c.offset + c.bytes) {
        g.offset = c.offset + c.bytes - g.bytes / 2;
        moved = true;
        break;
      }
    }
    if (moved) break;
  }
  ASSERT_TRUE(moved);
  EXPECT_THAT(ValidatePlan(plan).message(), HasSubstr("inside no live bucket"));
  plan = Build(Zero2Spec(ZeroAccumulate::kShard));
  plan.buckets[0].grad_shard = -1;
  EXPECT_THAT(ValidatePlan(plan).message(), HasSubstr("grad shard"));
}

}  // namespace
}  // namespace trainc
