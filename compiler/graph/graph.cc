#include "compiler/graph/graph.h"

#include <algorithm>
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

namespace {

// Calls f(id) for each id of `ids` in [0, n), the first time it occurs.
template <typename F>
void ForEachDistinct(const std::vector<int>& ids, int n, F f) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n) continue;  // Verify names it
    if (std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i) continue;
    f(ids[i]);
  }
}

bool Contains(const std::vector<int>& ids, int id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Adds `node` to a sorted list (at the end when it is the newest).
void Insert(std::vector<int>& list, int node) {
  if (list.empty() || list.back() < node) {
    list.push_back(node);
    return;
  }
  auto it = std::lower_bound(list.begin(), list.end(), node);
  if (it == list.end() || *it != node) list.insert(it, node);
}

void Erase(std::vector<int>& list, int node) {
  auto it = std::lower_bound(list.begin(), list.end(), node);
  if (it != list.end() && *it == node) list.erase(it);
}

// The ids of `lists` after a renumbering (new_id[old] < 0: removed).
void Renumber(const std::vector<int>& new_id, std::vector<std::vector<int>>& lists) {
  for (std::vector<int>& list : lists) {
    size_t kept = 0;
    for (int old : list) {
      if (new_id[old] >= 0) list[kept++] = new_id[old];
    }
    list.resize(kept);
  }
}

}  // namespace

int Graph::AddValue(Value value) {
  value.id = static_cast<int>(values_.size());
  values_.push_back(std::move(value));
  readers_.emplace_back();
  writers_.emplace_back();
  return values_.back().id;
}

int Graph::AddNode(Node node) {
  node.id = static_cast<int>(nodes_.size());
  node.kernel = KernelOpOfInstruction(node.op);
  nodes_.push_back(std::move(node));
  Link(nodes_.back());
  return nodes_.back().id;
}

void Graph::Link(const Node& node) {
  const int n = static_cast<int>(values_.size());
  ForEachDistinct(node.inputs, n, [&](int v) { Insert(readers_[v], node.id); });
  ForEachDistinct(node.outputs, n, [&](int v) { Insert(writers_[v], node.id); });
}

void Graph::Unlink(const Node& node) {
  const int n = static_cast<int>(values_.size());
  ForEachDistinct(node.inputs, n, [&](int v) { Erase(readers_[v], node.id); });
  ForEachDistinct(node.outputs, n, [&](int v) { Erase(writers_[v], node.id); });
}

void Graph::ReplaceNode(int id, Node node) {
  node.id = id;
  node.kernel = KernelOpOfInstruction(node.op);
  Node& old = nodes_[id];
  const int n = static_cast<int>(values_.size());
  // Only the operands that change move in the index: a value read by many
  // nodes is not shifted for a node that keeps reading it.
  ForEachDistinct(old.inputs, n, [&](int v) {
    if (!Contains(node.inputs, v)) Erase(readers_[v], id);
  });
  ForEachDistinct(old.outputs, n, [&](int v) {
    if (!Contains(node.outputs, v)) Erase(writers_[v], id);
  });
  ForEachDistinct(node.inputs, n, [&](int v) { Insert(readers_[v], id); });
  ForEachDistinct(node.outputs, n, [&](int v) { Insert(writers_[v], id); });
  old = std::move(node);
}

bool Graph::RemoveNodes(const std::vector<bool>& drop) {
  std::vector<int> new_id(nodes_.size(), -1);
  size_t kept = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i < drop.size() && drop[i]) continue;
    new_id[i] = static_cast<int>(kept);
    if (kept != i) nodes_[kept] = std::move(nodes_[i]);
    nodes_[kept].id = static_cast<int>(kept);
    ++kept;
  }
  if (kept == nodes_.size()) return false;
  nodes_.resize(kept);
  Renumber(new_id, readers_);
  Renumber(new_id, writers_);
  return true;
}

void Graph::SetNodes(std::vector<Node> nodes) {
  nodes_ = std::move(nodes);
  for (std::vector<int>& list : readers_) list.clear();
  for (std::vector<int>& list : writers_) list.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].id = static_cast<int>(i);
    nodes_[i].kernel = KernelOpOfInstruction(nodes_[i].op);
    Link(nodes_[i]);
  }
}

absl::Status Graph::VerifyIndex() const {
  const int n = static_cast<int>(values_.size());
  if (readers_.size() != values_.size() || writers_.size() != values_.size()) {
    return absl::InternalError(absl::StrCat("graph ", name_, ": the readers index has ",
                                            readers_.size(), " values, the graph ", n));
  }
  // Nodes come in id order, so each value's lists are met front to back.
  std::vector<size_t> next_reader(n, 0), next_writer(n, 0);
  absl::Status status;
  auto check = [&](const Node& node, int v, const std::vector<std::vector<int>>& index,
                   std::vector<size_t>& next, const char* role) {
    const std::vector<int>& list = index[v];
    if (!status.ok()) return;
    if (next[v] >= list.size() || list[next[v]] != node.id) {
      status = absl::InternalError(absl::StrCat(
          "graph ", name_, ": the index's ", role, "s of ", values_[v].name, " lack node ",
          node.id, " (", node.label, ")"));
      return;
    }
    ++next[v];
  };
  for (const Node& node : nodes_) {
    ForEachDistinct(node.inputs, n, [&](int v) { check(node, v, readers_, next_reader, "reader"); });
    ForEachDistinct(node.outputs, n, [&](int v) { check(node, v, writers_, next_writer, "writer"); });
    if (!status.ok()) return status;
  }
  for (int v = 0; v < n; ++v) {
    const bool readers_ok = next_reader[v] == readers_[v].size();
    if (readers_ok && next_writer[v] == writers_[v].size()) continue;
    const int stale = readers_ok ? writers_[v][next_writer[v]] : readers_[v][next_reader[v]];
    return absl::InternalError(absl::StrCat(
        "graph ", name_, ": the index lists node ", stale, " as a ",
        readers_ok ? "writer" : "reader", " of ", values_[v].name, ", which it is not"));
  }
  return absl::OkStatus();
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
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (node.id != static_cast<int>(i)) {
      return absl::InternalError(
          absl::StrCat("graph ", name_, ": node ", i, " (", node.label, ") has id ", node.id));
    }
    // Made only for an error: Verify runs after every pass.
    auto where = [&] { return absl::StrCat("graph ", name_, ": node ", node.id, " (",
                                           node.label, ")"); };
    for (int id : node.inputs) {
      if (id < 0 || id >= n) return absl::InternalError(absl::StrCat(where(), ": input ", id));
      if (!defined(values_[id])) {
        return absl::InternalError(
            absl::StrCat(where(), ": reads ", values_[id].name, " before it is written"));
      }
    }
    for (int id : node.outputs) {
      if (id < 0 || id >= n) return absl::InternalError(absl::StrCat(where(), ": output ", id));
      const Value& v = values_[id];
      if (v.kind == ValueKind::kInput || v.kind == ValueKind::kLabel ||
          v.kind == ValueKind::kParameter) {
        return absl::InternalError(absl::StrCat(where(), ": writes ", v.name));
      }
      if (is_gradient(v)) {
        auto acc = node.attrs.find("accumulate");
        const bool want = writes[id] > 0;
        if (acc == node.attrs.end() || (acc->second != 0) != want) {
          return absl::InternalError(absl::StrCat(where(), ": contribution ", writes[id] + 1,
                                                  " to ", v.name, " needs accumulate=",
                                                  want ? 1 : 0));
        }
      } else if (writes[id] > 0) {
        return absl::InternalError(absl::StrCat(where(), ": second write of ", v.name));
      }
    }
    // Counted after the inputs so that an op never reads its own output.
    for (int id : node.outputs) ++writes[id];
  }
  if (loss_ < 0 || loss_ >= n || values_[loss_].kind != ValueKind::kLoss) {
    return absl::InternalError(absl::StrCat("graph ", name_, ": no loss value"));
  }
  return VerifyIndex();
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
