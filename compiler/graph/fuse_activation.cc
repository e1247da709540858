#include "compiler/graph/fuse_activation.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {
namespace {

bool AllF32(const Graph& graph, const std::vector<int>& values) {
  for (int id : values) {
    if (graph.value(id).dtype != DType::kF32) return false;
  }
  return true;
}

// The forward activation reading `producer`'s output 0 that can join it:
// op in `ops` (index into it in *which), one input and one output, every
// value of both f32 (not bf16: the activation would read the rounded
// output); -1 when none. `sole`: the activation must be the output's only
// reader.
int JoiningActivation(const Graph& graph, const Node& producer,
                      const std::vector<KernelOp>& ops, bool sole, int* which) {
  const int out = producer.outputs[0];
  const std::vector<int>& readers = graph.readers(out);
  if (sole && readers.size() != 1) return -1;
  std::vector<int> values = producer.inputs;
  values.push_back(out);
  if (!AllF32(graph, values)) return -1;
  for (int id : readers) {
    const Node& act = graph.node(id);
    if (act.role != NodeRole::kForward || act.inputs.size() != 1 || act.outputs.size() != 1 ||
        !AllF32(graph, act.outputs)) {
      continue;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (act.kernel != ops[i]) continue;
      *which = static_cast<int>(i);
      return id;
    }
  }
  return -1;
}

// `producer` replaced by `op` writing `outputs` (labelled by the first
// `named`: "pre, y = linear_gelu_erf"); returns the activation, absorbed.
int Fuse(Graph* graph, int producer, int activation, const std::string& op,
         std::vector<int> outputs, size_t named) {
  Node fused = graph->node(producer);
  std::vector<std::string> names;
  for (size_t j = 0; j < named; ++j) names.push_back(graph->value(outputs[j]).name);
  fused.op = op;
  fused.label = absl::StrCat(absl::StrJoin(names, ", "), " = ", op);
  fused.outputs = std::move(outputs);
  graph->ReplaceNode(producer, std::move(fused));
  return activation;
}

}  // namespace

absl::StatusOr<bool> FuseLinearActivation::Run(Graph* graph) {
  static const std::vector<KernelOp> kActivations = {KernelOp::kRelu, KernelOp::kTanh,
                                                      KernelOp::kGelu};
  static const std::vector<std::string> kFused = {"linear_relu", "linear_tanh",
                                                  "linear_gelu_erf"};
  return FuseEach(graph, KernelOp::kLinear, [&](int id) {
    const Node& linear = graph->node(id);
    if (linear.role != NodeRole::kForward || linear.outputs.size() != 1) return -1;
    int which = 0;
    const int act = JoiningActivation(*graph, linear, kActivations, /*sole=*/false, &which);
    if (act < 0) return -1;
    // pre stays in the plan only for a reader besides the activation.
    const int pre = linear.outputs[0];
    const int y = graph->node(act).outputs[0];
    std::vector<int> outputs = {y};
    if (graph->readers(pre).size() > 1) outputs.insert(outputs.begin(), pre);
    return Fuse(graph, id, act, kFused[which], outputs, outputs.size());
  });
}

absl::StatusOr<bool> FuseConvRelu::Run(Graph* graph) {
  static const std::vector<KernelOp> kRelu = {KernelOp::kRelu};
  return FuseEach(graph, KernelOp::kConv2d, [&](int id) {
    const Node& conv = graph->node(id);
    if (conv.role != NodeRole::kForward || conv.outputs.size() != 2) return -1;
    int which = 0;
    const int relu = JoiningActivation(*graph, conv, kRelu, /*sole=*/true, &which);
    if (relu < 0) return -1;
    // The workspace stays the convolution's.
    return Fuse(graph, id, relu, "conv2d_relu", {graph->node(relu).outputs[0], conv.outputs[1]},
                1);
  });
}

}  // namespace trainc
