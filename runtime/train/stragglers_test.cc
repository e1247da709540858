#include "runtime/train/stragglers.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// Each rank busy `busy[r]` ms per step, the rest of a 10 ms step waiting;
// rank r's data time is `data[r]`.
std::vector<RankStepTimes> Times(int, std::vector<double> busy, std::vector<double> data) {
  std::vector<RankStepTimes> out;
  for (size_t r = 0; r < busy.size(); ++r) out.push_back({busy[r], data[r], 10.0 - busy[r]});
  return out;
}

TEST(MedianStepTimes, IgnoresABurst) {
  const RankStepTimes m = MedianStepTimes({{2, 1, 8}, {50, 1, 8}, {3, 1, 7}});
  EXPECT_DOUBLE_EQ(m.busy_ms, 3);
  EXPECT_DOUBLE_EQ(m.waiting_ms, 8);
}

TEST(StragglerWatch, NamesTheRankBusyLongestOnceTheWindowIsFull) {
  StragglerWatch watch(3, /*window_steps=*/20, /*ratio=*/1.5);
  // 10 steps: not a window yet.
  EXPECT_TRUE(watch.Add(10, 10, Times(10, {2, 2, 9}, {0.5, 0.5, 7})).empty());
  std::vector<Straggler> named = watch.Add(20, 10, Times(10, {2, 2, 9}, {0.5, 0.5, 7}));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_DOUBLE_EQ(named[0].ratio, 4.5);
  EXPECT_EQ(named[0].first_step, 1);
  EXPECT_EQ(named[0].last_step, 20);
  EXPECT_DOUBLE_EQ(named[0].data_ms, 7);
  EXPECT_DOUBLE_EQ(named[0].compute_ms, 2);
  EXPECT_DOUBLE_EQ(named[0].waiting_ms, 1);
  EXPECT_DOUBLE_EQ(named[0].others_busy_ms, 2);
  EXPECT_THAT(Describe(named[0]),
              HasSubstr("rank 2 was busy 4.5x as long as the others over steps 1-20: 9.00 ms "
                        "per step (data 7.00, compute 2.00), waiting 1.00"));
  // Named once; the summary keeps its worst.
  EXPECT_TRUE(watch.Add(40, 20, Times(20, {2, 2, 8}, {0.5, 0.5, 7})).empty());
  EXPECT_TRUE(watch.Add(60, 20, Times(20, {1, 1, 9}, {0.5, 0.5, 7})).empty());
  ASSERT_EQ(watch.named().size(), 1u);
  EXPECT_DOUBLE_EQ(watch.named()[0].ratio, 9);
  EXPECT_EQ(watch.named()[0].first_step, 41);
}

TEST(StragglerWatch, EvenRanksAndOneRankNameNone) {
  StragglerWatch watch(2, 20, 1.5);
  EXPECT_TRUE(watch.Add(30, 30, Times(30, {4, 5.5}, {1, 1})).empty());  // 1.4x: under
  StragglerWatch alone(1, 20, 1.5);
  EXPECT_TRUE(alone.Add(30, 30, Times(30, {4}, {1})).empty());
  EXPECT_TRUE(watch.named().empty());
}

// The window slides: what is judged is the last window_steps steps.
TEST(StragglerWatch, JudgesTheLastWindowOnly) {
  StragglerWatch watch(2, 20, 1.5);
  EXPECT_TRUE(watch.Add(20, 20, Times(20, {4, 4}, {1, 1})).empty());
  std::vector<Straggler> named = watch.Add(40, 20, Times(20, {2, 8}, {1, 1}));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_EQ(named[0].first_step, 21);
  EXPECT_DOUBLE_EQ(named[0].ratio, 4);
}

}  // namespace
}  // namespace trainc
