#include "compiler/graph/relu_after_max_pool.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

bool IsForward(const Node& node, const char* op, size_t inputs) {
  return node.op == op && node.role == NodeRole::kForward && node.inputs.size() == inputs &&
         !node.outputs.empty();
}

// The max pooling that is the only reader of relu node `id`'s output, all
// f32; -1 when there is none.
int PoolingOfRelu(const Graph& graph, int id) {
  const Node& relu = graph.node(id);
  if (!IsForward(relu, "relu", 1) || relu.outputs.size() != 1) return -1;
  const std::vector<int>& readers = graph.readers(relu.outputs[0]);
  if (readers.size() != 1) return -1;
  const Node& pool = graph.node(readers[0]);
  if (!IsForward(pool, "max_pool2d", 1)) return -1;
  for (int v : {relu.inputs[0], relu.outputs[0], pool.outputs[0]}) {
    if (graph.value(v).dtype != DType::kF32) return -1;
  }
  return readers[0];
}

}  // namespace

absl::StatusOr<bool> ReluAfterMaxPool::Run(Graph* graph) {
  bool changed = false;
  for (int id = 0; id < static_cast<int>(graph->nodes().size()); ++id) {
    const int pool_id = PoolingOfRelu(*graph, id);
    if (pool_id < 0) continue;
    Node relu = graph->node(id), pool = graph->node(pool_id);
    const int x = relu.inputs[0], between = relu.outputs[0], pooled = pool.outputs[0];
    Value& v = graph->mutable_value(between);
    v.shape = graph->value(pooled).shape;
    v.name = absl::StrCat(graph->value(pooled).name, ".pre");
    pool.inputs = {x};
    pool.outputs[0] = between;
    pool.label = absl::StrCat(v.name, " = ", pool.op);
    relu.inputs = {between};
    relu.outputs = {pooled};
    relu.label = absl::StrCat(graph->value(pooled).name, " = ", relu.op);
    graph->ReplaceNode(id, std::move(pool));
    graph->ReplaceNode(pool_id, std::move(relu));
    changed = true;
  }
  return changed;
}

}  // namespace trainc
