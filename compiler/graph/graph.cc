#include "compiler/graph/graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {

const char* ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kInput: return "input";
    case ValueKind::kLabel: return "label";
    case ValueKind::kParameter: return "parameter";
    case ValueKind::kActivation: return "activation";
    case ValueKind::kLoss: return "loss";
    case ValueKind::kParameterGrad: return "parameter_grad";
    case ValueKind::kActivationGrad: return "activation_grad";
  }
  return "unknown";
}

int64_t Value::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int Graph::AddValue(Value value) {
  value.id = static_cast<int>(values_.size());
  values_.push_back(std::move(value));
  return values_.back().id;
}

int Graph::AddNode(Node node) {
  node.id = static_cast<int>(nodes_.size());
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

absl::Status Graph::Verify() const {
  const int n = static_cast<int>(values_.size());
  std::vector<int> writes(n, 0);
  auto is_gradient = [](const Value& v) {
    return v.kind == ValueKind::kParameterGrad || v.kind == ValueKind::kActivationGrad;
  };
  auto defined = [&](const Value& v) {
    return v.kind == ValueKind::kInput || v.kind == ValueKind::kLabel ||
           v.kind == ValueKind::kParameter || writes[v.id] > 0;
  };
  for (const Node& node : nodes_) {
    const std::string where = absl::StrCat("graph ", name_, ": node ", node.id, " (",
                                           node.label, ")");
    for (int id : node.inputs) {
      if (id < 0 || id >= n) return absl::InternalError(absl::StrCat(where, ": input ", id));
      if (!defined(values_[id])) {
        return absl::InternalError(
            absl::StrCat(where, ": reads ", values_[id].name, " before it is written"));
      }
    }
    for (int id : node.outputs) {
      if (id < 0 || id >= n) return absl::InternalError(absl::StrCat(where, ": output ", id));
      const Value& v = values_[id];
      if (v.kind == ValueKind::kInput || v.kind == ValueKind::kLabel ||
          v.kind == ValueKind::kParameter) {
        return absl::InternalError(absl::StrCat(where, ": writes ", v.name));
      }
      if (is_gradient(v)) {
        auto acc = node.attrs.find("accumulate");
        const bool want = writes[id] > 0;
        if (acc == node.attrs.end() || (acc->second != 0) != want) {
          return absl::InternalError(absl::StrCat(where, ": contribution ", writes[id] + 1,
                                                  " to ", v.name, " needs accumulate=",
                                                  want ? 1 : 0));
        }
      } else if (writes[id] > 0) {
        return absl::InternalError(absl::StrCat(where, ": second write of ", v.name));
      }
    }
    // Counted after the inputs so that an op never reads its own output.
    for (int id : node.outputs) ++writes[id];
  }
  if (loss_ < 0 || loss_ >= n || values_[loss_].kind != ValueKind::kLoss) {
    return absl::InternalError(absl::StrCat("graph ", name_, ": no loss value"));
  }
  return absl::OkStatus();
}

std::string Graph::ToText() const {
  std::string out = absl::StrCat("graph ", name_, " loss=",
                                 loss_ >= 0 ? values_[loss_].name : "?", "\n");
  for (const Value& v : values_) {
    absl::StrAppend(&out, "  value ", v.name, ": ", ValueKindName(v.kind), " ",
                    DTypeName(v.dtype), "[", absl::StrJoin(v.shape, ","), "]");
    if (v.init != ParamInit::kNone) absl::StrAppend(&out, " init=", EnumName(v.init));
    absl::StrAppend(&out, "\n");
  }
  auto names = [&](const std::vector<int>& ids) {
    std::vector<std::string> s;
    for (int id : ids) s.push_back(values_[id].name);
    return absl::StrJoin(s, ", ");
  };
  for (const Node& node : nodes_) {
    absl::StrAppend(&out, "  ", node.role == NodeRole::kForward ? "forward  " : "backward ",
                    names(node.outputs), " = ", node.op, "(", names(node.inputs), ")");
    if (!node.attrs.empty()) {
      std::vector<std::string> a;
      for (const auto& [k, v] : node.attrs) a.push_back(absl::StrCat(k, "=", v));
      absl::StrAppend(&out, " {", absl::StrJoin(a, ", "), "}");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace trainc
