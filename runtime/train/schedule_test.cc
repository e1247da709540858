#include "runtime/train/schedule.h"

#include <cmath>

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
  s.kind = ScheduleKind::kCosine;
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 60, 110), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 110, 110), 0.0, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 200, 110), 0.0, 1e-12);
}

// Hugging Face's get_cosine_schedule_with_warmup, written from its
// documented formula: the optimizer's k-th step (1-based) runs at
// lambda(k - 1). Ours is the same curve one step earlier: step k at
// lambda(k), so the last step is at 0 (docs/language.md says so).
TEST(Schedule, CosineIsHuggingFacesOneStepEarlier) {
  const int64_t warmup = 10, total = 110;
  auto hf_lambda = [&](int64_t s) {
    if (s < warmup) return static_cast<double>(s) / warmup;
    const double progress = static_cast<double>(s - warmup) / (total - warmup);
    return 0.5 * (1.0 + std::cos(M_PI * progress));
  };
  ScheduleConfig s;
  s.kind = ScheduleKind::kCosine;
  s.warmup_steps = warmup;
  for (int64_t k = 1; k <= total; ++k) {
    EXPECT_NEAR(LearningRateAt(s, 1.0, k, total), hf_lambda(k), 1e-12) << "step " << k;
  }
  EXPECT_GT(hf_lambda(total - 1), 0.0);  // Hugging Face's last step still moves
}

TEST(Schedule, CosineWithoutWarmupStartsNearBase) {
  ScheduleConfig s;
  s.kind = ScheduleKind::kCosine;
  EXPECT_NEAR(LearningRateAt(s, 2.0, 1, 1000), 2.0, 1e-4);
}

}  // namespace
}  // namespace trainc
