// Filling a plan's input buffers (the outputs of its load_batch
// instruction) with a micro-batch of examples.
//
// Each buffer in plan.input_buffers is matched to a data set field by its
// kind, dtype and row width (product of the dimensions after the batch):
//   kInput, f32, width = feature_dim         -> the features
//   kLabel, i32, width 1                     -> the class index
//   kLabel, f32, width = feature_dim         -> the features (the target of
//                                               a model that reconstructs
//                                               its input, e.g. mse)
//   kLabel, f32, width 1                     -> the class index as a float
// and from a token data set (Dataset::TokenWindows, T = its context):
//   kInput, i32, width T                     -> the window's first T tokens
//   kLabel, i32, width T                     -> its last T (the next tokens)
// anything else is an error naming the buffer. A plan with no label buffer
// gets only the features.
//
// A batch may hold fewer examples than the buffers' batch dimension (the
// last evaluation batch): the remaining rows are zeros, and the caller must
// ignore them.
#ifndef TRAINC_RUNTIME_DATA_LOADER_H_
#define TRAINC_RUNTIME_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/plan/plan.h"
#include "runtime/data/dataset.h"
#include "runtime/data/sampler.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"

namespace trainc {

// Gathers rows into one reusable host staging buffer and uploads it to each
// input buffer's arena offset. `dataset` must outlive it.
class MicroBatchLoader {
 public:
  explicit MicroBatchLoader(const Dataset* dataset) : dataset_(dataset) {}

  // Checks that every input buffer of `plan` can be served (see above).
  absl::Status Validate(const Plan& plan) const;

  // `first_example` >= 0: the rows are global examples first_example,
  // first_example + 1, ... of the run, and image inputs are augmented as
  // plan.data says (runtime/data/augment.h). -1: no augmentation (eval).
  absl::Status Fill(absl::Span<const int64_t> indices, const Plan& plan,
                    Device& device, int64_t first_example = -1);

 private:
  const Dataset* dataset_;
  std::vector<char> staging_;
  std::vector<float> plain_;  // one example before augmentation
};

// The executor's BatchSource for training: rank `rank`'s micro-batches of
// the step set by SetPosition, as BatchPlanner assigns them, augmented as
// the plan says.
//
//   ASSIGN_OR_RETURN(auto batches, TrainBatchSource::Create(&train, plan, rank));
//   for (int64_t s = 0; s < batches->steps_per_epoch(); ++s) {
//     batches->SetPosition(epoch, s);
//     executor.RunStep(state, *batches);
//   }
class TrainBatchSource : public BatchSource {
 public:
  // Fails if the plan's input buffers cannot be served from `dataset` or
  // the data set is smaller than one global batch.
  static absl::StatusOr<std::unique_ptr<TrainBatchSource>> Create(
      const Dataset* dataset, const Plan& plan, int rank);

  int64_t steps_per_epoch() const { return planner_.steps_per_epoch(); }
  // The optimizer step the next Fill calls belong to.
  void SetPosition(int64_t epoch, int64_t step_in_epoch);

  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  TrainBatchSource(const Dataset* dataset, BatchPlanner planner, int rank);

  MicroBatchLoader loader_;
  BatchPlanner planner_;
  int rank_;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
};

// One optimizer step's batches of a TrainBatchSource, at a position of its
// own: the trainer holds two, the running step's and the next step's,
// which it gives Executor::RunStep as `next` so that the next batch moves
// while this step runs. `source` must outlive it.
class StepBatches : public BatchSource {
 public:
  explicit StepBatches(TrainBatchSource* source) : source_(source) {}
  // The run's optimizer step `step` (1-based, epochs one after another).
  void SetStep(int64_t step) { step_ = step; }
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  TrainBatchSource* source_;
  int64_t step_ = 1;
};

// One-off form of MicroBatchLoader::Fill (allocates its staging buffer).
absl::Status FillMicroBatch(const Dataset& dataset,
                            absl::Span<const int64_t> indices,
                            const Plan& plan, Device& device);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_LOADER_H_
