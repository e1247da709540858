// Learning rate at an optimizer step, from a plan's ScheduleConfig.
#ifndef TRAINC_RUNTIME_TRAIN_SCHEDULE_H_
#define TRAINC_RUNTIME_TRAIN_SCHEDULE_H_

#include <cstdint>

#include "compiler/plan/plan.h"

namespace trainc {

// `step` is 1-based. constant: base_lr. cosine: linear warm-up,
// base_lr * step / warmup_steps (as llm.c's), then a half cosine that
// reaches 0 on step `total_steps`, the last one (no floor). llm.c's decay
// and Hugging Face's get_cosine_schedule_with_warmup (warm-up included,
// from 0) are one step later: their last step still has a small lr.
// With warmup_steps >= total_steps every step is warm-up (the compiler
// and the trainer warn).
double LearningRateAt(const ScheduleConfig& schedule, double base_lr,
                      int64_t step, int64_t total_steps);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_SCHEDULE_H_
