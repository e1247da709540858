#include "runtime/data/loader.h"

#include <cstring>
#include <utility>

#include "absl/memory/memory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/util/status_macros.h"
#include "runtime/data/augment.h"

namespace trainc {
namespace {

enum class Field {
  kFeatures,
  kClassIndex,
  kClassAsFloat,
  kWindowInputs,   // a window's first T tokens
  kWindowTargets,  // its last T: the next token of each input
};

int64_t RowWidth(const Buffer& b) {
  int64_t width = 1;
  for (size_t i = 1; i < b.shape.size(); ++i) width *= b.shape[i];
  return width;
}

std::string Describe(const Buffer& b) {
  return absl::StrCat("'", b.name, "' (", BufferKindName(b.kind), " ",
                      DTypeName(b.dtype), "[", absl::StrJoin(b.shape, ","), "])");
}

absl::StatusOr<Field> FieldFor(const Buffer& b, const Dataset& dataset) {
  const int64_t width = RowWidth(b);
  if (dataset.is_token_windows()) {
    const int64_t context = dataset.context();
    if (!b.shape.empty() && b.dtype == DType::kI32 && width == context) {
      if (b.kind == BufferKind::kInput) return Field::kWindowInputs;
      if (b.kind == BufferKind::kLabel) return Field::kWindowTargets;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot fill input buffer ", Describe(b),
        " from a token data set: its windows fill an input i32[B,", context,
        "] (the tokens) and a label i32[B,", context, "] (the next tokens)"));
  }
  const int64_t feature_dim = dataset.feature_dim();
  if (!b.shape.empty()) {
    if (b.kind == BufferKind::kInput && b.dtype == DType::kF32 &&
        width == feature_dim) {
      return Field::kFeatures;
    }
    if (b.kind == BufferKind::kLabel && b.dtype == DType::kI32 && width == 1) {
      return Field::kClassIndex;
    }
    if (b.kind == BufferKind::kLabel && b.dtype == DType::kF32) {
      if (width == feature_dim) return Field::kFeatures;
      if (width == 1) return Field::kClassAsFloat;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot fill input buffer ", Describe(b), " from a data set of ",
      feature_dim, " features and a class index per example"));
}

}  // namespace

absl::Status MicroBatchLoader::Validate(const Plan& plan) const {
  for (int id : plan.input_buffers) {
    RETURN_IF_ERROR(FieldFor(plan.buffers[id], *dataset_).status());
  }
  return absl::OkStatus();
}

absl::Status MicroBatchLoader::Fill(absl::Span<const int64_t> indices,
                                    const Plan& plan, Device& device,
                                    int64_t first_example) {
  for (int id : plan.input_buffers) {
    const Buffer& b = plan.buffers[id];
    ASSIGN_OR_RETURN(Field field, FieldFor(b, *dataset_));
    const int64_t rows = b.shape[0];
    const int64_t width = RowWidth(b);
    if (static_cast<int64_t>(indices.size()) > rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("a batch of ", indices.size(), " examples does not fit "
                       "input buffer '", b.name, "' of ", rows, " rows"));
    }
    // Gathered where the device copies from (pinned memory), or into our
    // own. Every example's row is written whole below; the padding rows
    // are zeroed: the previous batch must not leak into them.
    const int64_t bytes = rows * width * 4;
    char* data = static_cast<char*>(device.UploadBuffer(bytes));
    if (data == nullptr) {
      // Never shrunk: the next buffer (images after labels) would
      // zero-fill it again when it grows.
      if (static_cast<int64_t>(staging_.size()) < bytes) staging_.resize(bytes);
      data = staging_.data();
    }
    const int64_t filled = static_cast<int64_t>(indices.size()) * width * 4;
    std::memset(data + filled, 0, static_cast<size_t>(bytes - filled));
    const bool augment = first_example >= 0 && field == Field::kFeatures &&
                         b.kind == BufferKind::kInput && b.shape.size() == 4 &&
                         (plan.data.random_crop > 0 || plan.data.random_flip);
    for (size_t r = 0; r < indices.size(); ++r) {
      const int64_t i = indices[r];
      if (i < 0 || i >= dataset_->size()) {
        return absl::OutOfRangeError(absl::StrCat(
            "example ", i, " is outside the data set of ", dataset_->size()));
      }
      char* row = data + r * width * 4;
      constexpr size_t kPrefetchAhead = 4;  // rows: ~4 images' latency ahead
      if (field == Field::kFeatures && r + kPrefetchAhead < indices.size()) {
        dataset_->PrefetchFeatures(indices[r + kPrefetchAhead]);
      }
      switch (field) {
        case Field::kFeatures:
          if (augment) {
            const ImageTransform t =
                TransformFor(static_cast<uint64_t>(plan.seed),
                             static_cast<uint64_t>(first_example) + r,
                             plan.data.random_crop, plan.data.random_flip);
            plain_.resize(width);
            dataset_->CopyFeatures(i, plain_.data());
            ApplyTransform(t, plain_.data(), b.shape[1], b.shape[2], b.shape[3],
                           reinterpret_cast<float*>(row));
          } else {
            dataset_->CopyFeatures(i, reinterpret_cast<float*>(row));
          }
          break;
        case Field::kClassIndex: {
          const int32_t label = dataset_->label(i);
          std::memcpy(row, &label, 4);
          break;
        }
        case Field::kClassAsFloat: {
          const float label = static_cast<float>(dataset_->label(i));
          std::memcpy(row, &label, 4);
          break;
        }
        case Field::kWindowInputs:
          std::memcpy(row, dataset_->window(i).data(), width * 4);
          break;
        case Field::kWindowTargets:
          std::memcpy(row, dataset_->window(i).data() + 1, width * 4);
          break;
      }
    }
    RETURN_IF_ERROR(device.Upload(b.offset, data, bytes));
  }
  return absl::OkStatus();
}

absl::Status FillMicroBatch(const Dataset& dataset,
                            absl::Span<const int64_t> indices,
                            const Plan& plan, Device& device) {
  MicroBatchLoader loader(&dataset);
  return loader.Fill(indices, plan, device);
}

absl::StatusOr<std::unique_ptr<TrainBatchSource>> TrainBatchSource::Create(
    const Dataset* dataset, const Plan& plan, int rank) {
  RETURN_IF_ERROR(MicroBatchLoader(dataset).Validate(plan));
  if (plan.data.random_crop > 0 || plan.data.random_flip) {
    bool image = false;
    std::vector<std::string> inputs;
    for (int id : plan.input_buffers) {
      const Buffer& b = plan.buffers[id];
      if (b.kind != BufferKind::kInput) continue;
      image = image || (b.shape.size() == 4 && b.dtype == DType::kF32);
      inputs.push_back(Describe(b));
    }
    if (!image) {
      return absl::InvalidArgumentError(absl::StrCat(
          "random_crop and random_flip move pixels: they need an image input "
          "[channels, height, width] (e.g. input image: f32[1, 28, 28]); the "
          "model's inputs are ", absl::StrJoin(inputs, ", ")));
    }
  }
  ASSIGN_OR_RETURN(BatchPlanner planner,
                   BatchPlanner::ForPlan(plan, dataset->size()));
  if (rank < 0 || rank >= plan.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the plan's world of ", plan.world_size));
  }
  return absl::WrapUnique(
      new TrainBatchSource(dataset, std::move(planner), rank));
}

TrainBatchSource::TrainBatchSource(const Dataset* dataset,
                                   BatchPlanner planner, int rank)
    : loader_(dataset), planner_(std::move(planner)), rank_(rank) {}

void TrainBatchSource::SetPosition(int64_t epoch, int64_t step_in_epoch) {
  epoch_ = epoch;
  step_in_epoch_ = step_in_epoch;
}

absl::Status TrainBatchSource::Fill(int micro_step, const Plan& plan,
                                    Device& device) {
  ASSIGN_OR_RETURN(
      std::vector<int64_t> indices,
      planner_.MicroBatchIndices(epoch_, step_in_epoch_, rank_, micro_step));
  // The first row's place in the run, as dropout's masks count it.
  const int64_t step_index = epoch_ * planner_.steps_per_epoch() + step_in_epoch_;
  const int64_t first_example =
      step_index * plan.global_batch +
      (int64_t{rank_} * plan.accumulate + micro_step) * plan.micro_batch;
  return loader_.Fill(indices, plan, device, first_example);
}

absl::Status StepBatches::Fill(int micro_step, const Plan& plan, Device& device) {
  const int64_t steps = source_->steps_per_epoch();
  source_->SetPosition((step_ - 1) / steps, (step_ - 1) % steps);
  return source_->Fill(micro_step, plan, device);
}

}  // namespace trainc
