#include "runtime/data/sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

BatchPlanner Planner(int64_t n, int64_t world, int64_t acc, int64_t micro,
                     int64_t seed = 7) {
  BatchConfig config;
  config.world_size = world;
  config.accumulate = acc;
  config.micro_batch = micro;
  config.seed = seed;
  auto planner = BatchPlanner::Create(n, config);
  EXPECT_TRUE(planner.ok()) << planner.status();
  return *std::move(planner);
}

// Every sample of global batch `step`, in global micro-batch order.
std::vector<int64_t> GlobalBatch(const BatchPlanner& p, int64_t world,
                                 int64_t acc, int64_t epoch, int64_t step) {
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < acc; ++k) {
      auto idx = p.MicroBatchIndices(epoch, step, r, k);
      EXPECT_TRUE(idx.ok()) << idx.status();
      all.insert(all.end(), idx->begin(), idx->end());
    }
  }
  return all;
}

TEST(SplitMix64Test, MatchesReferenceOutput) {
  // First outputs of the reference implementation seeded with 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
}

TEST(EpochSamplerTest, IsAPermutationAndDeterministic) {
  EpochSampler sampler(1000, 3, true);
  std::vector<int64_t> a = sampler.Permutation(2);
  EXPECT_EQ(a, EpochSampler(1000, 3, true).Permutation(2));
  EXPECT_NE(a, sampler.Permutation(3));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
}

// The seed matters: the same epoch under another seed is another order.
TEST(EpochSamplerTest, SeedChangesTheOrder) {
  for (int64_t epoch : {0, 1, 5}) {
    const std::vector<int64_t> a = EpochSampler(1000, 0, true).Permutation(epoch);
    const std::vector<int64_t> b = EpochSampler(1000, 1, true).Permutation(epoch);
    const std::vector<int64_t> c =
        EpochSampler(1000, 12345, true).Permutation(epoch);
    EXPECT_NE(a, b) << "epoch " << epoch << ": seeds 0 and 1 give one order";
    EXPECT_NE(a, c) << "epoch " << epoch << ": seeds 0 and 12345 give one order";
    EXPECT_NE(b, c) << "epoch " << epoch << ": seeds 1 and 12345 give one order";
  }
}

// With the default seed (0) every epoch is still its own order: seed and
// epoch are mixed so that a zero seed does not cancel the epoch (as a
// product seed * epoch would).
TEST(EpochSamplerTest, DefaultSeedGivesEveryEpochItsOwnOrder) {
  EpochSampler sampler(1000, 0, true);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    orders.push_back(sampler.Permutation(epoch));
    for (int64_t earlier = 0; earlier < epoch; ++earlier) {
      EXPECT_NE(orders[epoch], orders[earlier])
          << "seed 0: epochs " << earlier << " and " << epoch
          << " visit the examples in the same order";
    }
  }
  // The same through the planner with a default BatchConfig (seed 0).
  BatchConfig config;
  config.micro_batch = 10;
  auto planner = BatchPlanner::Create(1000, config);
  ASSERT_TRUE(planner.ok()) << planner.status();
  EXPECT_NE(*planner->MicroBatchIndices(0, 0, 0, 0),
            *planner->MicroBatchIndices(1, 0, 0, 0));
}

// The data order is part of the checkpoint format: a checkpoint stores only
// (seed, epoch, step_in_epoch), so resuming with another build must give
// the same permutations. Fisher-Yates over SplitMix64(seed + epoch); these
// are that reference's outputs (computed independently, in Python).
TEST(EpochSamplerTest, PermutationsArePinned) {
  EXPECT_EQ(EpochSampler(10, 0, true).Permutation(0),
            (std::vector<int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(EpochSampler(10, 0, true).Permutation(2),
            (std::vector<int64_t>{9, 8, 3, 2, 4, 6, 1, 7, 5, 0}));
  EXPECT_EQ(EpochSampler(10, 7, true).Permutation(0),
            (std::vector<int64_t>{8, 1, 5, 9, 0, 4, 3, 2, 6, 7}));
  EXPECT_EQ(EpochSampler(10, 7, true).Permutation(3),
            (std::vector<int64_t>{3, 0, 2, 1, 7, 9, 4, 8, 5, 6}));
}

TEST(EpochSamplerTest, NoShuffleIsIdentity) {
  std::vector<int64_t> p = EpochSampler(5, 3, false).Permutation(4);
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(BatchPlannerTest, GlobalBatchDoesNotDependOnTheSplit) {
  const int64_t n = 1000, micro = 8;  // global batch 32
  BatchPlanner a = Planner(n, 1, 4, micro);
  BatchPlanner b = Planner(n, 2, 2, micro);
  BatchPlanner c = Planner(n, 4, 1, micro);
  ASSERT_EQ(a.steps_per_epoch(), 31);
  ASSERT_EQ(b.steps_per_epoch(), 31);
  ASSERT_EQ(c.steps_per_epoch(), 31);
  for (int64_t epoch : {0, 1}) {
    for (int64_t step = 0; step < 31; ++step) {
      std::vector<int64_t> ga = GlobalBatch(a, 1, 4, epoch, step);
      // Same samples and even the same global micro-batch order.
      EXPECT_EQ(ga, GlobalBatch(b, 2, 2, epoch, step));
      EXPECT_EQ(ga, GlobalBatch(c, 4, 1, epoch, step));
      EXPECT_EQ(std::set<int64_t>(ga.begin(), ga.end()).size(), 32u);
    }
  }
}

TEST(BatchPlannerTest, EpochVisitsEachSampleOnceAndDropsTheRest) {
  BatchPlanner p = Planner(100, 2, 2, 4);  // 16 per step, 6 steps, 4 dropped
  ASSERT_EQ(p.steps_per_epoch(), 6);
  std::set<int64_t> seen;
  for (int64_t s = 0; s < 6; ++s) {
    for (int64_t i : GlobalBatch(p, 2, 2, 0, s)) {
      EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 96u);
  EXPECT_FALSE(p.MicroBatchIndices(0, 6, 0, 0).ok());
  EXPECT_FALSE(p.MicroBatchIndices(0, 0, 2, 0).ok());
  EXPECT_FALSE(p.MicroBatchIndices(0, 0, 0, 2).ok());
}

TEST(BatchPlannerTest, ResumingMidEpochGivesTheSameBatches) {
  BatchPlanner p = Planner(500, 2, 1, 10);
  auto first = p.MicroBatchIndices(3, 7, 1, 0);
  p.MicroBatchIndices(0, 0, 0, 0).IgnoreError();  // move the cache away
  BatchPlanner fresh = Planner(500, 2, 1, 10);
  EXPECT_EQ(*first, *fresh.MicroBatchIndices(3, 7, 1, 0));
  EXPECT_EQ(*first, *p.MicroBatchIndices(3, 7, 1, 0));
}

TEST(BatchPlannerTest, RejectsTooSmallDataSets) {
  BatchConfig config;
  config.world_size = 4;
  config.micro_batch = 8;
  EXPECT_FALSE(BatchPlanner::Create(31, config).ok());
  config.micro_batch = 0;
  EXPECT_FALSE(BatchPlanner::Create(31, config).ok());
}

TEST(EvalIteratorTest, ShardsCoverEverythingOnce) {
  std::vector<int64_t> all, batch;
  for (int rank = 0; rank < 3; ++rank) {
    EvalIterator it(100, 16, rank, 3);
    while (it.Next(&batch)) {
      EXPECT_LE(batch.size(), 16u);
      all.insert(all.end(), batch.begin(), batch.end());
    }
  }
  ASSERT_EQ(all.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[i], i);
}

}  // namespace
}  // namespace trainc
