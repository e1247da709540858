#include "compiler/planner/bucketing.h"

#include <vector>

#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;
using Buckets = std::vector<std::vector<int>>;

constexpr int64_t kMb = kBytesPerMb;

TEST(AssignBuckets, ClosesWhenFullAndNeverSplits) {
  // 0.6 + 0.6 reaches 1 MiB; 3 MiB alone exceeds it; the rest is left over.
  const std::vector<int64_t> bytes = {6 * kMb / 10, 6 * kMb / 10, 3 * kMb, kMb / 10};
  EXPECT_EQ(AssignBuckets(bytes, 1.0).buckets, (Buckets{{0, 1}, {2}, {3}}));
}

TEST(AssignBuckets, ExactlyFullCloses) {
  EXPECT_EQ(AssignBuckets({kMb / 2, kMb / 2, kMb / 2}, 1.0).buckets, (Buckets{{0, 1}, {2}}));
}

TEST(AssignBuckets, ZeroMeansOneBucketPerParameter) {
  EXPECT_EQ(AssignBuckets({4, 8, 16}, 0.0).buckets, (Buckets{{0}, {1}, {2}}));
}

TEST(AssignBuckets, EverythingFitsInOne) {
  EXPECT_EQ(AssignBuckets({4, 8, 16}, 25.0).buckets, (Buckets{{0, 1, 2}}));
}

TEST(AssignBuckets, SmallerFirstBucketLikeDdp) {
  const std::vector<int64_t> bytes = {kMb / 2, kMb / 2, kMb / 2, kMb / 2, kMb / 2};
  EXPECT_EQ(AssignBuckets(bytes, 2.0, 0.5).buckets, (Buckets{{0}, {1, 2, 3, 4}}));
}

TEST(AssignBuckets, Empty) { EXPECT_TRUE(AssignBuckets({}, 25.0).buckets.empty()); }

TEST(PlanBuckets, BackwardOrderLastLayerFirst) {
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.bucket_mb = 0;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> order;
  for (const Bucket& b : plan->buckets) {
    ASSERT_EQ(b.parameters.size(), 1u);
    order.push_back(b.parameters[0]);
  }
  EXPECT_THAT(order, ElementsAre("logits.weight", "logits.bias", "h2.weight", "h2.bias",
                                 "h1.weight", "h1.bias"));
}

TEST(PlanBuckets, SplitsFashionMlpAndOverlaps) {
  // 0.1 MiB = 104858 bytes: logits (5 KiB) + h2.weight (128 KiB) close the
  // first bucket, h2.bias + h1.weight the second, h1.bias is alone.
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.bucket_mb = 0.1;
  spec.train.optimizer.decay_all = true;  // one class: buckets in ready order
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_THAT(plan->buckets[0].parameters,
              ElementsAre("logits.weight", "logits.bias", "h2.weight"));
  EXPECT_THAT(plan->buckets[1].parameters, ElementsAre("h2.bias", "h1.weight"));
  EXPECT_THAT(plan->buckets[2].parameters, ElementsAre("h1.bias"));
  // The first all-reduce is issued right after its last gradient, before
  // the next bucket is written: it overlaps the rest of the backward pass.
  EXPECT_EQ(plan->buckets[0].all_reduce, plan->buckets[0].ready_after + 1);
  EXPECT_LT(plan->buckets[0].all_reduce, plan->buckets[1].ready_after);
}

TEST(PlanBuckets, UndecayedVectorsGetTheirOwnBuckets) {
  // AdamW decays matrices only by default: weights and biases never share
  // a bucket, and each bucket still starts when its last gradient is ready.
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.bucket_mb = 0.1;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_THAT(plan->buckets[0].parameters, ElementsAre("logits.weight", "h2.weight"));
  EXPECT_TRUE(plan->buckets[0].weight_decay);
  EXPECT_THAT(plan->buckets[1].parameters, ElementsAre("h1.weight"));
  EXPECT_THAT(plan->buckets[2].parameters, ElementsAre("logits.bias", "h2.bias", "h1.bias"));
  EXPECT_FALSE(plan->buckets[2].weight_decay);
  for (size_t b = 1; b < plan->buckets.size(); ++b) {
    EXPECT_LE(plan->buckets[b - 1].ready_after, plan->buckets[b].ready_after);
  }
}

TEST(PlanBuckets, SameOnEveryRank) {
  // Buckets depend only on the spec: building twice gives the same plan.
  TrainSpec spec = testing::ResidualSpec(32, 16, 4, 4, 8, 1);
  spec.train.bucket_mb = 0.001;
  absl::StatusOr<Plan> a = BuildPlan(spec), b = BuildPlan(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->buckets.size(), b->buckets.size());
  for (size_t i = 0; i < a->buckets.size(); ++i) {
    EXPECT_EQ(a->buckets[i].parameters, b->buckets[i].parameters);
  }
}

}  // namespace
}  // namespace trainc
