#include "compiler/graph/fuse_linear_gelu_grad.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// The linear_grad_input writing `dh` when it is dh's only writer, writes
// it whole (accumulate 0) and `grad` is dh's only reader; -1 otherwise.
int SoleProduct(const Graph& graph, int dh, const Node& grad) {
  const std::vector<int>& writers = graph.writers(dh);
  if (writers.size() != 1) return -1;  // none, or a second writer
  const int product = writers[0];
  const Node& linear = graph.node(product);
  const auto acc = linear.attrs.find("accumulate");
  if (linear.kernel != KernelOp::kLinearGradInput || linear.role != grad.role ||
      linear.inputs.size() != 2 || linear.outputs.size() != 1 ||
      (acc != linear.attrs.end() && acc->second != 0)) {
    return -1;
  }
  const std::vector<int>& readers = graph.readers(dh);
  if (readers.size() != 1 || readers[0] != grad.id) return -1;  // another reader
  return product;
}

}  // namespace

absl::StatusOr<bool> FuseLinearGeluGrad::Run(Graph* graph) {
  return FuseEach(graph, KernelOp::kGeluTanhGrad, [&](int id) {
    const Node& grad = graph->node(id);
    if (grad.inputs.size() != 2 || grad.outputs.size() != 1) return -1;
    const int dh = grad.inputs[0], pre = grad.inputs[1], dpre = grad.outputs[0];
    if (dh == pre || graph->value(dh).dtype != graph->value(dpre).dtype) return -1;
    const int product = SoleProduct(*graph, dh, grad);
    if (product < 0) return -1;
    // At the gelu's gradient's place: dy and w exist since the product's.
    Value workspace;
    workspace.name = absl::StrCat(graph->value(dpre).name, "/workspace.", id);
    workspace.kind = ValueKind::kActivation;
    workspace.shape = {0};  // sized by the planner for the backend
    Node fused = grad;
    fused.op = "linear_grad_input_gelu";
    fused.inputs = {graph->node(product).inputs[0], graph->node(product).inputs[1], pre};
    fused.outputs = {dpre, graph->AddValue(workspace)};
    fused.label = absl::StrCat(graph->value(dpre).name, " = linear_grad_input_gelu");
    graph->ReplaceNode(id, std::move(fused));
    return product;  // the fused node keeps grad's accumulate
  });
}

}  // namespace trainc
