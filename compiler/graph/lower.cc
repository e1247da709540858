#include "compiler/graph/lower.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

constexpr double kLayerNormEps = 1e-5;

absl::Status Bad(const OpSpec& op, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(op.location.file, ":", op.location.line, ":", op.location.column, ": ",
                   op.name, " = ", op.op, ": ", why));
}

std::vector<int64_t> Batched(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out = {batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
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
      switch (p.init) {
        case ParameterSpec::Init::kUniformFanIn:
          v.init = "uniform";
          v.init_bound = p.fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(p.fan_in)) : 0.0;
          break;
        case ParameterSpec::Init::kOnes: v.init = "ones"; break;
        case ParameterSpec::Init::kZeros: v.init = "zeros"; break;
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
    if (spec.type == ElementType::kI32) {
      // A class label: one index per sample; the class count lives on the
      // logits.
      v.dtype = DType::kI32;
      v.shape = {batch_};
    } else {
      v.shape = Batched(batch_, spec.shape);
    }
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
    v.shape = std::move(shape);
    v.dtype = dtype;
    return graph_.AddValue(v);
  }

  absl::Status LowerOp(const OpSpec& op) {
    std::vector<int> in;
    for (const std::string& name : op.inputs) {
      auto id = Lookup(op, name);
      if (!id.ok()) return id.status();
      in.push_back(*id);
    }
    std::vector<int> params;
    for (const std::string& name : op.parameters) {
      auto id = Lookup(op, name);
      if (!id.ok()) return id.status();
      params.push_back(*id);
    }
    auto shape_of = [&](int id) -> const std::vector<int64_t>& {
      return graph_.value(id).shape;
    };
    auto want = [&](size_t n_in, size_t n_params) -> absl::Status {
      if (in.size() != n_in || params.size() != n_params) {
        return Bad(op, absl::StrCat("expects ", n_in, " inputs and ", n_params,
                                    " parameters"));
      }
      for (int id : in) {
        if (graph_.value(id).dtype != DType::kF32 && op.op != "cross_entropy") {
          return Bad(op, absl::StrCat(graph_.value(id).name, " is not f32"));
        }
      }
      return absl::OkStatus();
    };
    Node node;
    node.op = op.op;
    node.role = NodeRole::kForward;
    node.label = absl::StrCat(op.name, " = ", op.op);
    int out = -1;
    if (op.op == "linear") {
      RETURN_IF_ERROR(want(1, 2));
      const auto& x = shape_of(in[0]);
      if (x.size() != 2) return Bad(op, "linear needs a vector per sample");
      const std::vector<int64_t> w = {op.out_features, x[1]};
      if (shape_of(params[0]) != w || shape_of(params[1]) != std::vector<int64_t>{w[0]}) {
        return Bad(op, "parameter shapes do not match [out, in] and [out]");
      }
      out = NewValue(op.name, ValueKind::kActivation, {batch_, op.out_features});
      node.inputs = {in[0], params[0], params[1]};
      node.outputs = {out};
    } else if (op.op == "relu" || op.op == "gelu" || op.op == "tanh") {
      RETURN_IF_ERROR(want(1, 0));
      out = NewValue(op.name, ValueKind::kActivation, shape_of(in[0]));
      node.inputs = {in[0]};
      node.outputs = {out};
    } else if (op.op == "layernorm") {
      RETURN_IF_ERROR(want(1, 2));
      const auto& x = shape_of(in[0]);
      if (x.size() != 2) return Bad(op, "layernorm needs a vector per sample");
      if (shape_of(params[0]) != std::vector<int64_t>{x[1]} ||
          shape_of(params[1]) != std::vector<int64_t>{x[1]}) {
        return Bad(op, "gamma and beta must be [d]");
      }
      out = NewValue(op.name, ValueKind::kActivation, x);
      const int mean = NewValue(op.name + "/mean", ValueKind::kActivation, {batch_});
      const int rstd = NewValue(op.name + "/rstd", ValueKind::kActivation, {batch_});
      node.inputs = {in[0], params[0], params[1]};
      node.outputs = {out, mean, rstd};
      node.attrs["eps"] = kLayerNormEps;
    } else if (op.op == "add") {
      RETURN_IF_ERROR(want(2, 0));
      if (shape_of(in[0]) != shape_of(in[1])) return Bad(op, "shapes differ");
      out = NewValue(op.name, ValueKind::kActivation, shape_of(in[0]));
      node.inputs = in;
      node.outputs = {out};
    } else if (op.op == "cross_entropy") {
      RETURN_IF_ERROR(want(2, 0));
      const auto& logits = shape_of(in[0]);
      if (logits.size() != 2 || graph_.value(in[0]).dtype != DType::kF32 ||
          graph_.value(in[1]).dtype != DType::kI32 || shape_of(in[1]) != std::vector<int64_t>{batch_}) {
        return Bad(op, "needs f32 logits [C] and an i32 class label");
      }
      out = NewValue(op.name, ValueKind::kLoss, {1});
      const int probs = NewValue(op.name + "/probs", ValueKind::kActivation, logits);
      node.inputs = in;
      node.outputs = {out, probs};
    } else if (op.op == "mse") {
      RETURN_IF_ERROR(want(2, 0));
      if (shape_of(in[0]) != shape_of(in[1])) return Bad(op, "shapes differ");
      out = NewValue(op.name, ValueKind::kLoss, {1});
      node.inputs = in;
      node.outputs = {out};
    } else {
      return Bad(op, "unknown op");
    }
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
