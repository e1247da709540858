// Learning rate at an optimizer step, from a plan's ScheduleConfig.
#ifndef TRAINC_RUNTIME_TRAIN_SCHEDULE_H_
#define TRAINC_RUNTIME_TRAIN_SCHEDULE_H_

#include <cstdint>

#include "compiler/plan/plan.h"

namespace trainc {

// `step` is 1-based. constant: base_lr. cosine: linear warm-up from
// base_lr / warmup to base_lr over `warmup_steps`, then a half cosine down
// to 0 at `total_steps` (as timm/llm.c schedules do, without a floor).
double LearningRateAt(const ScheduleConfig& schedule, double base_lr,
                      int64_t step, int64_t total_steps);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_SCHEDULE_H_
