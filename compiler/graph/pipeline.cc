#include "compiler/graph/pipeline.h"

#include <utility>

#include "compiler/graph/dce.h"
#include "compiler/graph/fuse_activation.h"
#include "compiler/graph/fuse_add_layernorm.h"
#include "compiler/graph/fuse_classifier.h"
#include "compiler/graph/fuse_linear_gelu.h"
#include "compiler/graph/fuse_linear_gelu_grad.h"
#include "compiler/graph/fuse_swiglu.h"
#include "compiler/graph/precision.h"
#include "compiler/graph/recompute.h"
#include "compiler/graph/relu_after_max_pool.h"

namespace trainc {
namespace {

bool Always(const PipelineOptions&) { return true; }
bool Bf16(const PipelineOptions& o) { return o.bf16; }
bool Fusion(const PipelineOptions& o) { return o.fusion; }
bool Recomputes(const PipelineOptions& o) { return !o.recompute.empty(); }

template <typename Pass>
std::unique_ptr<GraphPass> Make(const PipelineOptions&) {
  return std::make_unique<Pass>();
}
std::unique_ptr<GraphPass> MakeRecompute(const PipelineOptions& o) {
  return std::make_unique<Recompute>(o.recompute);
}

}  // namespace

const std::vector<PipelineStep>& TrainPipelineSteps() {
  static const auto* steps = new std::vector<PipelineStep>{
      {"dce", "always: the lowered forward graph, before its gradients", Always,
       &Make<DeadCodeElimination>},
      {"relu_after_max_pool",
       "fusion; before autodiff, whose gradients of the swapped pair are the same bits; "
       "before fuse_conv_relu, which then leaves such a convolution alone",
       Fusion, &Make<ReluAfterMaxPool>},
      {"autodiff",
       "always: the backward of the live forward graph, the loss the mean over every term "
       "of the global batch",
       Always, nullptr},
      {"mixed_precision",
       "precision = bf16; after autodiff (it casts forward and backward values); before "
       "the fusions, which read its dtypes",
       Bf16, &Make<MixedPrecision>},
      {"fuse_classifier", "fusion; after autodiff (the loss and its gradient node)", Fusion,
       &Make<FuseClassifier>},
      {"fuse_linear_gelu",
       "fusion; after mixed_precision (the fused node reads and writes the bf16 values "
       "the two did); before recompute, which copies the fused node",
       Fusion, &Make<FuseLinearGelu>},
      {"fuse_linear_activation",
       "fusion; after mixed_precision, whose bf16 pairs it leaves apart (the activation "
       "would read the rounded output); before recompute, which copies the fused node",
       Fusion, &Make<FuseLinearActivation>},
      {"fuse_conv_relu", "fusion; as fuse_linear_activation, for conv2d and relu", Fusion,
       &Make<FuseConvRelu>},
      {"fuse_linear_gelu_grad",
       "fusion; after mixed_precision (dh's dtype) and fuse_linear_gelu (its test of pre's "
       "readers takes gelu_tanh_grad, not the fused node); before recompute, which gives "
       "the fused backward node the copies the two would read",
       Fusion, &Make<FuseLinearGeluGrad>},
      {"fuse_swiglu",
       "fusion; after autodiff (silu * up and its three gradient nodes become two: the "
       "backward's mul_grad reads silu's output, so both or neither) and mixed_precision "
       "(it fuses pairs of one dtype); before recompute, which copies the fused forward node",
       Fusion, &Make<FuseSwiGlu>},
      {"recompute",
       "recompute blocks; after the forward fusions (it copies forward nodes, fused ones "
       "included) and before fuse_add_layernorm",
       Recomputes, &MakeRecompute},
      {"fuse_add_layernorm",
       "fusion; after recompute: a block's output is its checkpoint, and the next block's "
       "layernorm of it is recomputed from it",
       Fusion, &Make<FuseAddLayerNorm>},
  };
  return *steps;
}

PassPipeline TrainPipeline(const PipelineOptions& options, std::unique_ptr<GraphPass> autodiff) {
  PassPipeline pipeline("train");
  for (const PipelineStep& step : TrainPipelineSteps()) {
    if (!step.runs(options)) continue;
    pipeline.Add(step.make != nullptr ? step.make(options) : std::move(autodiff));
  }
  return pipeline;
}

}  // namespace trainc
