// Hand-built plans of a ReLU MLP with cross-entropy, a batch source over
// host vectors and a double-precision reference of one optimizer step: what
// the runtime's tests and benchmarks need without the planner.
//
// The plan follows plan.h to the letter: per micro-step load / forward /
// backward, the bucket all-reduces issued in the last micro-step right after
// their last gradient, then one optimizer instruction per bucket. Buckets
// take `layers_per_bucket` layers each, from the last layer back (the order
// gradients become ready).
#ifndef TRAINC_RUNTIME_EXEC_TESTING_TEST_PLANS_H_
#define TRAINC_RUNTIME_EXEC_TESTING_TEST_PLANS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"

namespace trainc {
namespace testing {

struct MlpPlanOptions {
  std::vector<int64_t> dims = {8, 16, 12, 4};  // input, hidden..., classes
  int64_t micro_batch = 4;
  int64_t accumulate = 1;
  int64_t world_size = 1;
  int layers_per_bucket = 1 << 20;  // all in one bucket
  bool deterministic = false;
  OptimizerConfig optimizer = AdamWConfig();

  static OptimizerConfig AdamWConfig() {
    OptimizerConfig o;
    o.kind = OptimizerKind::kAdamW;
    o.lr = 1e-2;
    o.weight_decay = 0.01;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    return o;
  }
};

Plan MakeMlpPlan(const MlpPlanOptions& options);

// Layer l's weight [out, in] and bias [out], PyTorch's layout.
struct MlpParams {
  std::vector<std::vector<float>> w, b;
};
MlpParams RandomMlpParams(const std::vector<int64_t>& dims, uint32_t seed);
absl::Status UploadMlpParams(const Plan& plan, const MlpParams& params,
                             Device& device);
absl::StatusOr<MlpParams> DownloadMlpParams(const Plan& plan, Device& device);

struct MlpBatch {
  std::vector<float> x;        // [micro_batch, dims[0]]
  std::vector<int32_t> label;  // [micro_batch]
};
std::vector<MlpBatch> RandomBatches(const std::vector<int64_t>& dims,
                                    int64_t micro_batch, int64_t count,
                                    uint32_t seed);

// Serves micro-step k from batches[k].
class VectorBatchSource : public BatchSource {
 public:
  explicit VectorBatchSource(std::vector<MlpBatch> batches)
      : batches_(std::move(batches)) {}
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  std::vector<MlpBatch> batches_;
};

// The same MLP and optimizer in double precision over the whole global batch.
class MlpReference {
 public:
  MlpReference(std::vector<int64_t> dims, OptimizerConfig optimizer,
               const MlpParams& init);
  // One optimizer step over every micro-batch of the global batch; returns
  // the summed loss.
  double Step(const StepState& state, const std::vector<MlpBatch>& global);
  MlpParams params() const;

 private:
  std::vector<int64_t> dims_;
  OptimizerConfig opt_;
  // Per layer, flattened [w ; b]: parameters and optimizer state.
  std::vector<std::vector<double>> p_, m_, v_;
};

}  // namespace testing
}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_TESTING_TEST_PLANS_H_
