#include "compiler/graph/fuse_swiglu.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// One silu(gate) * up and, when it has them, its three gradient nodes.
struct SwiGlu {
  int silu = -1, mul = -1;
  int gate = -1, up = -1, s = -1, y = -1;
  int grad_up = -1;    // mul_grad(dy, s) -> dup; -1: no backward
  int grad_s = -1;     // mul_grad(dy, up) -> ds
  int grad_gate = -1;  // silu_grad(ds, gate) -> dgate
  int dy = -1, dgate = -1, dup = -1;
};

bool OneDType(const Graph& graph, std::initializer_list<int> values) {
  const DType dtype = graph.value(*values.begin()).dtype;
  for (int id : values) {
    if (graph.value(id).dtype != dtype) return false;
  }
  return true;
}

double Accumulate(const Node& node) {
  const auto it = node.attrs.find("accumulate");
  return it == node.attrs.end() ? 0 : it->second;
}

// The forward pair at silu `id` (and the mul_grad reading s, if any):
// false when it does not fit.
bool MatchForward(const Graph& graph, int id, SwiGlu* m) {
  const Node& silu = graph.node(id);
  if (silu.role != NodeRole::kForward || silu.inputs.size() != 1 || silu.outputs.size() != 1) {
    return false;
  }
  m->silu = id;
  m->gate = silu.inputs[0];
  m->s = silu.outputs[0];
  if (graph.writers(m->s).size() != 1) return false;
  for (int reader : graph.readers(m->s)) {
    const Node& node = graph.node(reader);
    int* slot = node.kernel == KernelOp::kMul && node.role == NodeRole::kForward ? &m->mul
                : node.kernel == KernelOp::kMulGrad && node.role == NodeRole::kBackward
                    ? &m->grad_up
                    : nullptr;
    if (slot == nullptr || *slot >= 0) return false;  // another reader of s
    *slot = reader;
  }
  if (m->mul < 0) return false;
  const Node& mul = graph.node(m->mul);
  if (mul.inputs.size() != 2 || mul.outputs.size() != 1) return false;
  m->up = mul.inputs[0] == m->s ? mul.inputs[1] : mul.inputs[0];
  m->y = mul.outputs[0];
  if (m->up == m->s || m->up == m->gate) return false;
  return OneDType(graph, {m->gate, m->up, m->s, m->y});
}

// The mul_grad(dy, up) -> ds reading dy; -1 when there is none (or two).
int GradOfS(const Graph& graph, const SwiGlu& m) {
  int found = -1;
  for (int reader : graph.readers(m.dy)) {
    const Node& node = graph.node(reader);
    if (node.kernel != KernelOp::kMulGrad || node.inputs != std::vector<int>{m.dy, m.up} ||
        node.outputs.size() != 1 || graph.value(node.outputs[0]).grad_of != m.s) {
      continue;
    }
    if (found >= 0) return -1;
    found = reader;
  }
  return found;
}

// No node strictly between `first` and `last` but the three of `m` writes
// `v` (or, when `reads`, reads it).
bool Untouched(const Graph& graph, const SwiGlu& m, int v, bool reads, int first, int last) {
  auto between = [&](int id) {
    return id > first && id < last && id != m.grad_s && id != m.grad_up && id != m.grad_gate;
  };
  const std::vector<int>& writers = graph.writers(v);
  const std::vector<int>& readers = graph.readers(v);
  return std::none_of(writers.begin(), writers.end(), between) &&
         (!reads || std::none_of(readers.begin(), readers.end(), between));
}

// The three gradient nodes of `m` (grad_up found by MatchForward), when
// they can become one node at the first's place.
bool MatchBackward(const Graph& graph, SwiGlu* m) {
  const Node& grad_up = graph.node(m->grad_up);
  if (grad_up.inputs.size() != 2 || grad_up.outputs.size() != 1 || grad_up.inputs[1] != m->s) {
    return false;
  }
  m->dy = grad_up.inputs[0];
  m->dup = grad_up.outputs[0];
  if (graph.value(m->dy).grad_of != m->y || graph.value(m->dup).grad_of != m->up) return false;
  m->grad_s = GradOfS(graph, *m);
  if (m->grad_s < 0) return false;
  const Node& grad_s = graph.node(m->grad_s);
  const int ds = grad_s.outputs[0];
  if (graph.writers(ds).size() != 1 || graph.readers(ds).size() != 1 || Accumulate(grad_s) != 0) {
    return false;
  }
  m->grad_gate = graph.readers(ds)[0];
  const Node& grad_gate = graph.node(m->grad_gate);
  if (grad_gate.kernel != KernelOp::kSiluGrad || grad_gate.inputs != std::vector<int>{ds, m->gate} ||
      grad_gate.outputs.size() != 1) {
    return false;
  }
  m->dgate = grad_gate.outputs[0];
  const Value& dgate = graph.value(m->dgate);
  if (dgate.grad_of != m->gate || dgate.kind != ValueKind::kActivationGrad ||
      graph.value(m->dup).kind != ValueKind::kActivationGrad ||
      Accumulate(grad_gate) != Accumulate(grad_up) ||
      !OneDType(graph, {m->gate, m->dy, ds, m->dgate, m->dup})) {
    return false;
  }
  for (const Node* node : {&grad_up, &grad_s, &grad_gate}) {
    if (node->role != NodeRole::kBackward) return false;
  }
  const int first = std::min(m->grad_s, m->grad_up);
  const int last = std::max({m->grad_s, m->grad_up, m->grad_gate});
  return Untouched(graph, *m, m->dy, false, first, last) &&
         Untouched(graph, *m, m->dgate, true, first, last) &&
         Untouched(graph, *m, m->dup, true, first, last);
}

// `m`'s nodes replaced: swiglu at the mul's place, swiglu_grad at the
// first mul_grad's; the others marked in `drop`.
void Rewrite(Graph* graph, const SwiGlu& m, std::vector<bool>* drop) {
  Node forward = graph->node(m.mul);
  forward.op = "swiglu";
  forward.inputs = {m.gate, m.up};
  forward.label = absl::StrCat(graph->value(m.y).name, " = swiglu");
  graph->ReplaceNode(m.mul, std::move(forward));
  (*drop)[m.silu] = true;
  if (m.grad_up < 0) return;
  const int first = std::min(m.grad_s, m.grad_up);
  Node backward = graph->node(first);
  backward.op = "swiglu_grad";
  backward.inputs = {m.dy, m.gate, m.up};
  backward.outputs = {m.dgate, m.dup};
  backward.attrs = graph->node(m.grad_gate).attrs;  // accumulate
  backward.label = absl::StrCat(graph->value(m.dgate).name, ", ", graph->value(m.dup).name,
                                " = swiglu_grad");
  graph->ReplaceNode(first, std::move(backward));
  for (int id : {m.grad_s, m.grad_up, m.grad_gate}) {
    if (id != first) (*drop)[id] = true;
  }
}

}  // namespace

absl::StatusOr<bool> FuseSwiGlu::Run(Graph* graph) {
  const int num_nodes = static_cast<int>(graph->nodes().size());
  std::vector<bool> drop(num_nodes, false);
  for (int id = 0; id < num_nodes; ++id) {
    if (graph->node(id).kernel != KernelOp::kSilu) continue;
    SwiGlu m;
    if (!MatchForward(*graph, id, &m)) continue;
    if (m.grad_up >= 0 && !MatchBackward(*graph, &m)) continue;
    Rewrite(graph, m, &drop);
  }
  return graph->RemoveNodes(drop);
}

}  // namespace trainc
