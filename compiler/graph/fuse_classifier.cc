#include "compiler/graph/fuse_classifier.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {

absl::StatusOr<bool> FuseClassifier::Run(Graph* graph) {
  const int num_nodes = static_cast<int>(graph->nodes().size());
  std::vector<bool> drop(num_nodes, false);
  for (int id = 0; id < num_nodes; ++id) {
    const Node& loss = graph->node(id);
    if (loss.kernel != KernelOp::kCrossEntropy || loss.outputs.size() != 2) continue;
    const std::vector<int>& readers = graph->readers(loss.outputs[1]);
    if (readers.size() != 1) continue;
    const int reader = readers[0];
    const Node& grad = graph->node(reader);
    auto acc = grad.attrs.find("accumulate");
    if (grad.kernel != KernelOp::kCrossEntropyGrad || grad.inputs.size() != 2 ||
        grad.inputs[0] != loss.outputs[1] || grad.inputs[1] != loss.inputs[1] ||
        !grad.attrs.count("scale") || (acc != grad.attrs.end() && acc->second != 0)) {
      continue;
    }
    const int dlogits = grad.outputs[0];
    Node fused = loss;
    fused.op = "cross_entropy_fused";
    fused.outputs[1] = dlogits;
    fused.attrs = {{"scale", grad.attrs.at("scale")}, {"accumulate", 0}};
    fused.label = absl::StrCat(graph->value(loss.outputs[0]).name, ", ",
                               graph->value(dlogits).name, " = cross_entropy_fused");
    graph->ReplaceNode(id, std::move(fused));
    drop[reader] = true;
  }
  return graph->RemoveNodes(drop);
}

}  // namespace trainc
