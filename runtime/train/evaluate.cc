#include "runtime/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"
#include "runtime/exec/batch_source.h"
#include "compiler/ops/kernel_families.h"

namespace trainc {
namespace {

// Feeds one fixed list of examples to RunForward.
class IndexBatchSource : public BatchSource {
 public:
  explicit IndexBatchSource(const Dataset* dataset) : loader_(dataset) {}
  void set_indices(std::vector<int64_t> indices) { indices_ = std::move(indices); }
  absl::Status Fill(int /*micro_step*/, const Plan& plan,
                    Device& device) override {
    return loader_.Fill(indices_, plan, device);
  }

 private:
  MicroBatchLoader loader_;
  std::vector<int64_t> indices_;
};

}  // namespace

absl::StatusOr<EvalHead> FindEvalHead(const Plan& plan) {
  for (const Instruction& instr : plan.instructions) {
    if (instr.micro_step > 0) break;
    const KernelOp op = KernelOpOfInstruction(instr.op);
    const bool classification =
        op == KernelOp::kCrossEntropy || op == KernelOp::kCrossEntropyFused;
    if (!classification && op != KernelOp::kMse) continue;
    if (instr.inputs.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: ", instr.op, " needs 2 inputs"));
    }
    EvalHead head;
    head.classification = classification;
    head.prediction = &plan.buffers[instr.inputs[0]];
    head.target = &plan.buffers[instr.inputs[1]];
    if (head.classification) {
      head.rows_per_example = head.target->bytes / 4 / plan.micro_batch;
    }
    return head;
  }
  return absl::InvalidArgumentError("plan: no loss instruction");
}

absl::StatusOr<EvalResult> Evaluate(const Plan& plan, Executor& executor,
                                    Device& device, Communicator& comm,
                                    const Dataset& eval, const EvalHead& head) {
  const int64_t batch = plan.micro_batch;
  EvalIterator it(eval.size(), batch, comm.rank(), comm.world_size());
  IndexBatchSource source(&eval);
  const int64_t rows = head.rows_per_example;  // > 1: tokens of a sequence
  const Buffer& prediction = *head.prediction;
  const int64_t elems = prediction.bytes / DTypeBytes(prediction.dtype);
  const int64_t width = elems / batch / rows;
  // Floats as f32, whether the plan keeps them in f32 or (precision =
  // bf16) in bf16: the logits or prediction, and a regression's target.
  std::vector<float> pred(elems);
  std::vector<float> target_floats;
  std::vector<int32_t> labels;
  if (head.classification) {
    labels.resize(head.target->bytes / sizeof(int32_t));
  } else {
    target_floats.resize(head.target->bytes / DTypeBytes(head.target->dtype));
  }
  double correct = 0, loss = 0, count = 0;
  std::vector<int64_t> indices;
  while (it.Next(&indices)) {
    const int64_t n = static_cast<int64_t>(indices.size());
    source.set_indices(indices);
    RETURN_IF_ERROR(executor.RunForward(source));
    RETURN_IF_ERROR(DownloadFloats(device, prediction, 0, elems, pred.data()));
    if (head.classification) {
      RETURN_IF_ERROR(device.Download(head.target->offset, labels.data(), head.target->bytes));
    } else {
      RETURN_IF_ERROR(DownloadFloats(device, *head.target, 0, target_floats.size(),
                                     target_floats.data()));
    }
    for (int64_t r = 0; r < n * rows; ++r) {
      const float* row = pred.data() + r * width;
      if (head.classification) {
        const int32_t label = labels[r];
        const int64_t arg = std::max_element(row, row + width) - row;
        correct += arg == label;
        const float mx = row[arg];
        double z = 0;
        for (int64_t j = 0; j < width; ++j) z += std::exp(row[j] - mx);
        loss += std::log(z) + mx - row[label];
      } else {
        const float* t = target_floats.data() + r * width;
        double se = 0;
        for (int64_t j = 0; j < width; ++j) se += (row[j] - t[j]) * (row[j] - t[j]);
        loss += se / width;
      }
    }
    count += n * rows;
  }
  std::vector<float> totals = {static_cast<float>(correct),
                               static_cast<float>(loss),
                               static_cast<float>(count)};
  // The world's totals (host memory, through the host communicator).
  if (comm.world_size() > 1) {
    RETURN_IF_ERROR(comm.AllReduceSum(totals.data(), static_cast<int64_t>(totals.size()),
                                      nullptr));
  }
  EvalResult result;
  result.examples = static_cast<int64_t>(totals[2]);
  if (result.examples > 0) {
    result.loss = totals[1] / totals[2];
    if (head.classification) result.accuracy = totals[0] / totals[2];
  }
  return result;
}

}  // namespace trainc
