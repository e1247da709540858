#include "compiler/graph/lower.h"

#include <cmath>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

absl::Status Bad(const OpSpec& op, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(op.location.file, ":", op.location.line, ":", op.location.column, ": ",
                   op.name, " = ", ops::ModelOpName(op.op), ": ", why));
}

std::vector<int64_t> Batched(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out = {batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// The op rule's initialisation (fan-in or std) as the plan's (a bound).
ParamInit PlanInit(ops::Init init) {
  switch (init) {
    case ops::Init::kUniformFanIn: return ParamInit::kUniform;
    case ops::Init::kNormal: return ParamInit::kNormal;
    case ops::Init::kOnes: return ParamInit::kOnes;
    case ops::Init::kZeros: return ParamInit::kZeros;
  }
  return ParamInit::kZeros;
}

class Lowerer {
 public:
  Lowerer(const ModelSpec& model, int64_t batch)
      : model_(model), batch_(batch), graph_(model.name) {}

  absl::StatusOr<Graph> Run() {
    if (batch_ < 1) return absl::InvalidArgumentError("micro_batch must be >= 1");
    for (const ValueSpec& v : model_.inputs) {
      RETURN_IF_ERROR(AddBatchValue(v, ValueKind::kInput));
    }
    for (const ValueSpec& v : model_.labels) {
      RETURN_IF_ERROR(AddBatchValue(v, ValueKind::kLabel));
    }
    for (const ParameterSpec& p : model_.parameters) {
      Value v;
      v.name = p.name;
      v.kind = ValueKind::kParameter;
      v.shape = p.shape;
      v.init = PlanInit(p.init);
      switch (p.init) {
        case ops::Init::kUniformFanIn:
          v.init_bound = p.init_scale > 0 ? 1.0 / std::sqrt(p.init_scale) : 0.0;
          break;
        case ops::Init::kNormal:
          v.init_bound = p.init_scale;  // the standard deviation
          break;
        default:
          break;
      }
      const int id = graph_.AddValue(v);
      if (!by_name_.emplace(p.name, id).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate parameter ", p.name));
      }
      graph_.add_parameter(id);
    }
    for (const OpSpec& op : model_.ops) RETURN_IF_ERROR(LowerOp(op));
    auto loss = by_name_.find(model_.loss);
    if (loss == by_name_.end() || graph_.value(loss->second).kind != ValueKind::kLoss) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model ", model_.name, ": loss '", model_.loss,
          "' must be the value of a cross_entropy or mse statement"));
    }
    graph_.set_loss(loss->second);
    return std::move(graph_);
  }

 private:
  absl::Status AddBatchValue(const ValueSpec& spec, ValueKind kind) {
    Value v;
    v.name = spec.name;
    v.kind = kind;
    v.dtype = spec.type == ElementType::kI32 ? DType::kI32 : DType::kF32;
    // A v1 class label i32[C] holds one index per sample.
    v.shape = spec.class_index ? std::vector<int64_t>{batch_} : Batched(batch_, spec.shape);
    const int id = graph_.AddValue(v);
    if (!by_name_.emplace(spec.name, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate value ", spec.name));
    }
    graph_.add_batch_value(id);
    return absl::OkStatus();
  }

  absl::StatusOr<int> Lookup(const OpSpec& op, const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return Bad(op, absl::StrCat("unknown value ", name));
    return it->second;
  }

  int NewValue(const std::string& name, ValueKind kind, std::vector<int64_t> shape,
               DType dtype = DType::kF32) {
    Value v;
    v.name = name;
    v.kind = kind;
    v.dtype = dtype;
    v.shape = std::move(shape);
    return graph_.AddValue(v);
  }

  // The call's value inputs (`in`: their ids, `call->values`: their
  // per-sample shapes) and constant arguments, as the op table lists them.
  absl::Status BindArgs(const OpSpec& op, const ops::ModelOpDef& def, std::vector<int>* in,
                        ops::OpCall* call) {
    size_t next_input = 0;
    for (const ops::ArgDef& arg : def.args) {
      switch (arg.kind) {
        case ops::ArgDef::Kind::kValue:
        case ops::ArgDef::Kind::kIndices: {
          if (next_input >= op.inputs.size()) return Bad(op, "too few inputs");
          ASSIGN_OR_RETURN(int id, Lookup(op, op.inputs[next_input++]));
          const Value& v = graph_.value(id);
          const bool want_i32 = arg.kind == ops::ArgDef::Kind::kIndices;
          if ((v.dtype == DType::kI32) != want_i32) {
            return Bad(op, absl::StrCat(v.name, " is not ", want_i32 ? "i32" : "f32"));
          }
          in->push_back(id);
          call->values.emplace_back(v.shape.begin() + 1, v.shape.end());
          break;
        }
        case ops::ArgDef::Kind::kParameter:
          break;  // slots are matched below
        default: {
          auto it = op.args.find(arg.name);
          std::optional<ops::ArgValue> value =
              it != op.args.end() ? std::optional<ops::ArgValue>(it->second)
                                  : ops::DefaultValue(arg);
          if (!value) return Bad(op, absl::StrCat("missing argument ", arg.name));
          call->constants[arg.name] = *value;
        }
      }
    }
    if (next_input != op.inputs.size()) return Bad(op, "too many inputs");
    return absl::OkStatus();
  }

  // The spec's parameters, in slot order, by value id; the shared ones'
  // shapes go to the call.
  absl::StatusOr<std::vector<int>> BindParameters(const OpSpec& op, ops::OpCall* call) {
    std::vector<int> params;
    for (const std::string& name : op.parameters) {
      ASSIGN_OR_RETURN(int id, Lookup(op, name));
      params.push_back(id);
    }
    for (const auto& [arg, name] : op.shared_parameters) {
      ASSIGN_OR_RETURN(int id, Lookup(op, name));
      call->shared_parameters[arg] = graph_.value(id).shape;
    }
    return params;
  }

  // The parameters fill the rule's slots: as many, of the slots' shapes.
  absl::Status CheckParameterSlots(const OpSpec& op, const ops::Lowering& l,
                                   const std::vector<int>& params) {
    if (l.params.size() != params.size()) {
      return Bad(op, absl::StrCat("has ", params.size(), " parameters, the op takes ",
                                  l.params.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (graph_.value(params[i]).shape != l.params[i].shape) {
        return Bad(op, absl::StrCat("parameter ", op.parameters[i], " has the wrong shape"));
      }
    }
    return absl::OkStatus();
  }

  // The node's outputs: its value (the loss, or a batched activation), the
  // outputs it saves for the backward pass and its workspace if it has
  // one. Returns the value's id.
  int AddOutputs(const OpSpec& op, const ops::ModelOpDef& def, const ops::Lowering& l,
                 Node* node) {
    int out;
    if (def.is_loss) {
      out = NewValue(op.name, ValueKind::kLoss, {1});
    } else {
      out = NewValue(op.name, ValueKind::kActivation, Batched(batch_, l.shape));
    }
    node->outputs = {out};
    for (const ops::SavedOutput& saved : l.saved) {
      // A v1 class label's logits are [B, C]; saved shapes are per sample.
      node->outputs.push_back(NewValue(absl::StrCat(op.name, "/", saved.suffix),
                                       ValueKind::kActivation, Batched(batch_, saved.shape),
                                       saved.i32 ? DType::kI32 : DType::kF32));
    }
    if (const ops::OpDef* instr = ops::FindOp(l.instruction); instr && instr->workspace) {
      // Sized by the planner for the backend (ops::OpDef::workspace).
      node->outputs.push_back(
          NewValue(absl::StrCat(op.name, "/workspace"), ValueKind::kActivation, {0}));
    }
    return out;
  }

  // One call through its op-table rule: the rule says which instruction,
  // attributes, parameters and saved outputs; the spec's parameters fill
  // the slots in order.
  absl::Status LowerOp(const OpSpec& op) {
    const ops::ModelOpDef* def = &ops::DefOf(op.op);
    std::vector<int> in;
    ops::OpCall call;
    RETURN_IF_ERROR(BindArgs(op, *def, &in, &call));
    ASSIGN_OR_RETURN(const std::vector<int> params, BindParameters(op, &call));
    call.name = op.name;
    auto rule = def->rule(call);
    if (auto* e = std::get_if<ops::ShapeError>(&rule)) return Bad(op, e->message);
    const ops::Lowering& l = std::get<ops::Lowering>(rule);
    RETURN_IF_ERROR(CheckParameterSlots(op, l, params));
    Node node;
    node.op = l.instruction;
    node.role = NodeRole::kForward;
    node.label = absl::StrCat(op.name, " = ", ops::ModelOpName(op.op));
    node.attrs = l.attrs;
    node.inputs = in;
    node.inputs.insert(node.inputs.end(), params.begin(), params.end());
    const int out = AddOutputs(op, *def, l, &node);
    if (!by_name_.emplace(op.name, out).second) {
      return Bad(op, "value defined twice");
    }
    graph_.AddNode(std::move(node));
    return absl::OkStatus();
  }

  const ModelSpec& model_;
  const int64_t batch_;
  Graph graph_;
  std::map<std::string, int> by_name_;
};

}  // namespace

absl::StatusOr<Graph> LowerModel(const ModelSpec& model, int64_t micro_batch) {
  return Lowerer(model, micro_batch).Run();
}

}  // namespace trainc
