#include "compiler/graph/fuse_classifier.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {

absl::StatusOr<bool> FuseClassifier::Run(Graph* graph) {
  return FuseEach(graph, KernelOp::kCrossEntropy, [&](int id) {
    const Node& loss = graph->node(id);
    if (loss.outputs.size() != 2) return -1;
    const std::vector<int>& readers = graph->readers(loss.outputs[1]);
    if (readers.size() != 1) return -1;
    const int reader = readers[0];
    const Node& grad = graph->node(reader);
    auto acc = grad.attrs.find("accumulate");
    if (grad.kernel != KernelOp::kCrossEntropyGrad || grad.inputs.size() != 2 ||
        grad.inputs[0] != loss.outputs[1] || grad.inputs[1] != loss.inputs[1] ||
        !grad.attrs.count("scale") || (acc != grad.attrs.end() && acc->second != 0)) {
      return -1;
    }
    const int dlogits = grad.outputs[0];
    Node fused = loss;
    fused.op = "cross_entropy_fused";
    fused.outputs[1] = dlogits;
    fused.attrs = {{"scale", grad.attrs.at("scale")}, {"accumulate", 0}};
    fused.label = absl::StrCat(graph->value(loss.outputs[0]).name, ", ",
                               graph->value(dlogits).name, " = cross_entropy_fused");
    graph->ReplaceNode(id, std::move(fused));
    return reader;
  });
}

}  // namespace trainc
