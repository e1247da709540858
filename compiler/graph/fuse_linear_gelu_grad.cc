#include "compiler/graph/fuse_linear_gelu_grad.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/graph/rewrite.h"

namespace trainc {
namespace {

// The linear_grad_input writing `dh` when it is dh's only writer, writes
// it whole (accumulate 0) and `grad` is dh's only reader; -1 otherwise.
int SoleProduct(const std::vector<Node>& nodes, int dh, const Node& grad) {
  int product = -1;
  for (const Node& node : nodes) {
    for (int out : node.outputs) {
      if (out != dh) continue;
      if (product >= 0) return -1;  // a second writer
      product = node.id;
    }
  }
  if (product < 0) return -1;
  const Node& linear = nodes[product];
  const auto acc = linear.attrs.find("accumulate");
  if (linear.op != "linear_grad_input" || linear.role != grad.role ||
      linear.inputs.size() != 2 || linear.outputs.size() != 1 ||
      (acc != linear.attrs.end() && acc->second != 0)) {
    return -1;
  }
  const std::vector<int> readers = ReadersOf(nodes, dh);
  if (readers.size() != 1 || readers[0] != grad.id) return -1;  // another reader
  return product;
}

}  // namespace

absl::StatusOr<bool> FuseLinearGeluGrad::Run(Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  std::vector<bool> drop(nodes.size(), false);
  for (Node& grad : nodes) {
    if (grad.op != "gelu_tanh_grad" || grad.inputs.size() != 2 || grad.outputs.size() != 1) {
      continue;
    }
    const int dh = grad.inputs[0], pre = grad.inputs[1], dpre = grad.outputs[0];
    if (dh == pre || graph->value(dh).dtype != graph->value(dpre).dtype) continue;
    const int product = SoleProduct(nodes, dh, grad);
    if (product < 0) continue;
    // At the gelu's gradient's place: dy and w exist since the product's.
    Value workspace;
    workspace.name = absl::StrCat(graph->value(dpre).name, "/workspace.", grad.id);
    workspace.kind = ValueKind::kActivation;
    workspace.shape = {0};  // sized by the planner for the backend
    grad.op = "linear_grad_input_gelu";
    grad.inputs = {nodes[product].inputs[0], nodes[product].inputs[1], pre};
    grad.outputs = {dpre, graph->AddValue(workspace)};
    grad.label = absl::StrCat(graph->value(dpre).name, " = linear_grad_input_gelu");
    drop[product] = true;  // grad keeps its accumulate
  }
  return DropNodes(drop, graph);
}

}  // namespace trainc
