#include "runtime/train/run_data.h"

#include <iostream>

#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"

namespace trainc {

absl::Status RunData::Load(const Plan& plan, const RankContext& rank,
                           const TrainOptions& options, std::ostream& log) {
  ASSIGN_OR_RETURN(train, LoadTrainDataset(plan));
  if (options.eval && !plan.data.eval_paths.empty()) {
    ASSIGN_OR_RETURN(eval, LoadEvalDataset(plan));
  }
  ASSIGN_OR_RETURN(batches, TrainBatchSource::Create(&*train, plan, rank.rank));
  for (auto& view : step_views) view = std::make_unique<StepBatches>(batches.get());
  ASSIGN_OR_RETURN(const Fault fault, FaultFromEnvironment());
  if (fault.kind != Fault::Kind::kNone && fault.rank == rank.rank) {
    sleeping_batches = std::make_unique<SleepingBatchSource>(batches.get(), fault, std::cerr);
  }
  ASSIGN_OR_RETURN(eval_head, FindEvalHead(plan));
  steps_per_epoch = batches->steps_per_epoch();
  total_steps = plan.steps > 0 ? plan.steps : plan.epochs * steps_per_epoch;
  total_epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  dropped_per_epoch = train->size() - steps_per_epoch * plan.global_batch;
  if (plan.schedule.kind == ScheduleKind::kCosine &&
      plan.schedule.warmup_steps >= total_steps) {
    // With `steps` the compiler warns at the setting; with epochs the step
    // count is known only now.
    log << absl::StrFormat(
        "warning: %s: schedule = cosine(warmup = %d) is as long as the whole run of %d "
        "steps (%d epoch(s) of %d): every step is warm-up, the last at lr * %d/%d, and "
        "the cosine never starts\n",
        plan.source, plan.schedule.warmup_steps, total_steps, plan.epochs,
        steps_per_epoch, total_steps, plan.schedule.warmup_steps);
  }
  return absl::OkStatus();
}

void RunData::SetStep(int64_t step, int64_t epoch, int64_t in_epoch) {
  batches->SetPosition(epoch, in_epoch);
  if (sleeping_batches) sleeping_batches->SetStep(step);
  step_views[step % 2]->SetStep(step);
  step_views[(step + 1) % 2]->SetStep(step + 1);
}

BatchSource& RunData::Batches(int64_t step) {
  if (sleeping_batches) return *sleeping_batches;
  return *step_views[step % 2];
}

BatchSource* RunData::NextBatches(int64_t step, bool last) {
  return sleeping_batches || last ? nullptr : step_views[(step + 1) % 2].get();
}

}  // namespace trainc
