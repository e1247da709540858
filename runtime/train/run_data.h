// A run's data: the training set and its batches per step, the eval set,
// and the run's length in steps and epochs. A private part of
// runtime/train (trainer.cc's).
//
//   RunData data;
//   RETURN_IF_ERROR(data.Load(plan, rank, options, log));
//   data.SetStep(step, epoch, in_epoch);
//   executor.RunStep(state, data.Batches(step), data.NextBatches(step, last));
#ifndef TRAINC_RUNTIME_TRAIN_RUN_DATA_H_
#define TRAINC_RUNTIME_TRAIN_RUN_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/exec/batch_source.h"
#include "runtime/fault/fault.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/trainer.h"

namespace trainc {

// Not movable once loaded: the batch sources point into it.
struct RunData {
  // The training data and its batches, the eval set (unless --no-eval or
  // the file has none), and the run's length in steps and epochs; a
  // cosine warm-up as long as the run is a warning on `log`.
  absl::Status Load(const Plan& plan, const RankContext& rank, const TrainOptions& options,
                    std::ostream& log);

  // Puts the batch sources at the run's optimizer step `step` (from 1),
  // the `in_epoch`th of epoch `epoch` (both from 0).
  void SetStep(int64_t step, int64_t epoch, int64_t in_epoch);
  // The batches step `step` reads.
  BatchSource& Batches(int64_t step);
  // The next step's, fed while `step` runs (Executor::RunStep's `next`):
  // none after the last step, nor under an injected loader fault, whose
  // sleep belongs to its own step.
  BatchSource* NextBatches(int64_t step, bool last);

  std::optional<Dataset> train;
  std::optional<Dataset> eval;  // none: no evaluation
  std::unique_ptr<TrainBatchSource> batches;
  // TRAINC_FAULT=loader_sleep on this rank: `batches` behind a sleep.
  std::unique_ptr<SleepingBatchSource> sleeping_batches;
  // Otherwise: the batches of step n are step_views[n % 2], and the next
  // step's are fed while step n runs.
  std::unique_ptr<StepBatches> step_views[2];
  EvalHead eval_head;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t total_epochs = 0;
  int64_t dropped_per_epoch = 0;  // samples not in a full global batch
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RUN_DATA_H_
