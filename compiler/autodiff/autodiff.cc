#include "compiler/autodiff/autodiff.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {
namespace {

// Builds the backward nodes for one graph; all state of one Run.
class Differentiator {
 public:
  Differentiator(Graph* graph, double loss_scale)
      : g_(*graph),
        scale_(loss_scale),
        requires_grad_(graph->values().size(), false),
        grad_(graph->values().size(), -1),
        contributions_(graph->values().size(), 0) {}

  absl::StatusOr<bool> Run() {
    for (const Node& node : g_.nodes()) {
      if (node.role == NodeRole::kBackward) {
        return absl::FailedPreconditionError("autodiff: graph already has backward nodes");
      }
    }
    PropagateRequiresGrad();
    const std::vector<Node> forward = g_.nodes();  // copy: AddNode appends
    const int loss = g_.loss();
    bool changed = false;
    for (int i = static_cast<int>(forward.size()) - 1; i >= 0; --i) {
      const Node& node = forward[i];
      const bool is_loss = !node.outputs.empty() && node.outputs[0] == loss;
      if (!is_loss && (node.outputs.empty() || grad_[node.outputs[0]] < 0)) continue;
      absl::Status s = EmitBackward(node, is_loss);
      if (!s.ok()) return s;
      changed = true;
    }
    return changed;
  }

 private:
  // Which inputs of `node` a gradient flows to.
  static std::vector<bool> Differentiable(const Node& node) {
    std::vector<bool> d(node.inputs.size(), true);
    if (node.op == "cross_entropy" || node.op == "mse") d[1] = false;  // label / target
    return d;
  }

  void PropagateRequiresGrad() {
    for (int p : g_.parameters()) requires_grad_[p] = true;
    for (const Node& node : g_.nodes()) {
      const std::vector<bool> d = Differentiable(node);
      bool any = false;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        any = any || (d[i] && requires_grad_[node.inputs[i]]);
      }
      // Only the first output (y, loss_sum) is differentiated; saved
      // tensors (mean, rstd, probs) are not.
      if (!node.outputs.empty()) requires_grad_[node.outputs[0]] = any;
    }
  }

  bool Needs(int value) const { return requires_grad_[value]; }

  // The gradient value of `v`, created on first use.
  int GradOf(int v) {
    if (grad_[v] >= 0) return grad_[v];
    const Value& x = g_.value(v);
    Value gv;
    gv.name = absl::StrCat("grad/", x.name);
    gv.kind = x.kind == ValueKind::kParameter ? ValueKind::kParameterGrad
                                              : ValueKind::kActivationGrad;
    gv.shape = x.shape;
    gv.grad_of = v;
    grad_[v] = g_.AddValue(gv);
    return grad_[v];
  }

  // Emits `op(inputs) -> grads of targets`; accumulate is 0 on the first
  // contribution to each target, 1 after (all targets of one node are
  // either all fresh or all accumulated: they are distinct parameters, or a
  // single activation).
  void Emit(const std::string& op, std::vector<int> inputs, const std::vector<int>& targets,
            std::map<std::string, double> attrs = {}) {
    Node n;
    n.op = op;
    n.role = NodeRole::kBackward;
    n.inputs = std::move(inputs);
    std::vector<std::string> names;
    for (int t : targets) {
      n.outputs.push_back(GradOf(t));
      names.push_back(g_.value(GradOf(t)).name);
    }
    n.attrs = std::move(attrs);
    n.attrs["accumulate"] = contributions_[targets[0]] > 0 ? 1 : 0;
    for (int t : targets) ++contributions_[t];
    n.label = absl::StrCat(absl::StrJoin(names, ", "), " = ", op);
    g_.AddNode(std::move(n));
  }

  absl::Status EmitBackward(const Node& node, bool is_loss) {
    const std::vector<int>& in = node.inputs;
    const std::string& op = node.op;
    if (is_loss) {
      if (!Needs(in[0])) return absl::OkStatus();  // the loss depends on no parameter
      if (op == "cross_entropy") {
        Emit("cross_entropy_grad", {node.outputs[1], in[1]}, {in[0]}, {{"scale", scale_}});
      } else if (op == "mse") {
        Emit("mse_grad", {in[0], in[1]}, {in[0]}, {{"scale", scale_}});
      } else {
        return absl::UnimplementedError(absl::StrCat("autodiff: loss op ", op));
      }
      return absl::OkStatus();
    }
    const int dy = grad_[node.outputs[0]];
    if (op == "linear") {
      Emit("linear_grad_params", {dy, in[0]}, {in[1], in[2]});
      if (Needs(in[0])) Emit("linear_grad_input", {dy, in[1]}, {in[0]});
    } else if (op == "relu" || op == "tanh") {
      Emit(op + "_grad", {dy, node.outputs[0]}, {in[0]});  // uses y
    } else if (op == "gelu") {
      Emit("gelu_grad", {dy, in[0]}, {in[0]});  // uses x
    } else if (op == "layernorm") {
      const int mean = node.outputs[1], rstd = node.outputs[2];
      Emit("layernorm_grad_params", {dy, in[0], mean, rstd}, {in[1], in[2]});
      if (Needs(in[0])) {
        Emit("layernorm_grad_input", {dy, in[0], in[1], mean, rstd}, {in[0]});
      }
    } else if (op == "add") {
      for (int x : in) {
        if (Needs(x)) Emit("copy_grad", {dy}, {x});
      }
    } else {
      return absl::UnimplementedError(absl::StrCat("autodiff: no gradient for ", op));
    }
    return absl::OkStatus();
  }

  Graph& g_;
  const double scale_;
  std::vector<bool> requires_grad_;
  std::vector<int> grad_;           // value -> its gradient value, or -1
  std::vector<int> contributions_;  // value -> gradient writes so far
};

}  // namespace

absl::StatusOr<bool> Autodiff::Run(Graph* graph) {
  return Differentiator(graph, loss_scale_).Run();
}

}  // namespace trainc
