#include "compiler/autodiff/autodiff.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"

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
    if (const ops::OpDef* def = ops::FindOp(node.op)) {
      for (int c : def->constant_inputs) {
        if (c < static_cast<int>(d.size())) d[c] = false;
      }
    }
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

  // Emits `op(inputs) -> grads of targets` (+ a scratch output shaped like
  // `workspace_like` when >= 0). accumulate is 0 on the first contribution
  // to the targets, 1 after; one instruction writes all its targets with
  // one flag, so they must agree.
  absl::Status Emit(const std::string& op, std::vector<int> inputs,
                    const std::vector<int>& targets,
                    std::map<std::string, double> attrs, int workspace_like) {
    Node n;
    n.op = op;
    n.role = NodeRole::kBackward;
    n.inputs = std::move(inputs);
    std::vector<std::string> names;
    for (int t : targets) {
      if (contributions_[t] != contributions_[targets[0]]) {
        return absl::UnimplementedError(absl::StrCat(
            "autodiff: ", op, " writes ", g_.value(targets[0]).name, " and ",
            g_.value(t).name,
            " with one accumulate flag, but only one of them already has a "
            "gradient (a shared weight beside a bias of its own: use "
            "bias = false with a shared weight)"));
      }
      n.outputs.push_back(GradOf(t));
      names.push_back(g_.value(GradOf(t)).name);
    }
    if (workspace_like >= 0) {
      const Value& like = g_.value(workspace_like);
      Value w;
      w.name = absl::StrCat("grad/", like.name, "/scratch");
      w.kind = ValueKind::kActivationGrad;
      w.shape = like.shape;
      n.outputs.push_back(g_.AddValue(w));
    }
    if (const ops::OpDef* def = ops::FindOp(op); def && def->workspace) {
      // Sized by the planner for the backend (ops::OpDef::workspace).
      // Written once, by this node: a temporary, not a gradient (a value
      // with two gradient contributions gets one workspace per writer).
      Value w;
      w.name = absl::StrCat(names.empty() ? op : names[0], "/workspace.", g_.nodes().size());
      w.kind = ValueKind::kActivation;
      w.shape = {0};
      n.outputs.push_back(g_.AddValue(w));
    }
    n.attrs = std::move(attrs);
    n.attrs["accumulate"] = contributions_[targets[0]] > 0 ? 1 : 0;
    for (int t : targets) ++contributions_[t];
    n.label = absl::StrCat(absl::StrJoin(names, ", "), " = ", op);
    g_.AddNode(std::move(n));
    return absl::OkStatus();
  }

  // The op table's gradient rules for `node` (compiler/ops/op_table.h).
  absl::Status EmitBackward(const Node& node, bool is_loss) {
    const ops::OpDef* def = ops::FindOp(node.op);
    if (def == nullptr || def->grads.empty()) {
      return absl::UnimplementedError(absl::StrCat("autodiff: no gradient for ", node.op));
    }
    if (is_loss != def->is_loss) {
      return absl::InvalidArgumentError(absl::StrCat(
          "autodiff: ", node.op, is_loss ? " is not a loss op" : " is a loss op but not the loss"));
    }
    const int dy = is_loss ? -1 : grad_[node.outputs[0]];
    for (const ops::GradRule& rule : def->grads) {
      std::vector<int> targets;
      for (int t : rule.targets) {
        if (t < static_cast<int>(node.inputs.size()) && Needs(node.inputs[t])) {
          targets.push_back(node.inputs[t]);
        }
      }
      if (targets.empty()) continue;
      std::vector<int> operands;
      for (const ops::Operand& o : rule.operands) {
        switch (o.kind) {
          case ops::Operand::Kind::kGrad:
            if (dy < 0) return absl::InternalError(absl::StrCat("autodiff: ", node.op, ": no dy"));
            operands.push_back(dy);
            break;
          case ops::Operand::Kind::kInput:
            operands.push_back(node.inputs.at(o.index));
            break;
          case ops::Operand::Kind::kOutput:
            operands.push_back(node.outputs.at(o.index));
            break;
        }
      }
      std::map<std::string, double> attrs = node.attrs;
      if (rule.scaled) attrs["scale"] = scale_;
      RETURN_IF_ERROR(Emit(rule.op, std::move(operands), targets, std::move(attrs),
                           rule.workspace_like >= 0 ? node.outputs.at(rule.workspace_like) : -1));
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
