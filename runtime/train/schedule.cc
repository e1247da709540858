#include "runtime/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace trainc {

double LearningRateAt(const ScheduleConfig& schedule, double base_lr,
                      int64_t step, int64_t total_steps) {
  if (schedule.kind != ScheduleKind::kCosine) return base_lr;
  const int64_t warmup = std::max<int64_t>(0, schedule.warmup_steps);
  if (step <= warmup) return base_lr * static_cast<double>(step) / warmup;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
  return 0.5 * base_lr * (1.0 + std::cos(M_PI * progress));
}

}  // namespace trainc
