#include "runtime/train/schedule.h"

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(Schedule, ConstantIsBaseRate) {
  ScheduleConfig s;
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0.1, 1, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0.1, 100, 100), 0.1);
}

TEST(Schedule, CosineWarmsUpThenDecaysToZero) {
  ScheduleConfig s;
  s.kind = "cosine";
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 60, 110), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 110, 110), 0.0, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 200, 110), 0.0, 1e-12);
}

TEST(Schedule, CosineWithoutWarmupStartsNearBase) {
  ScheduleConfig s;
  s.kind = "cosine";
  EXPECT_NEAR(LearningRateAt(s, 2.0, 1, 1000), 2.0, 1e-4);
}

}  // namespace
}  // namespace trainc
