#include "compiler/graph/recompute.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

bool InBlock(const std::string& name, const std::string& block) {
  return name == block || absl::StartsWith(name, block + ".") ||
         absl::StartsWith(name, block + "/");
}

// One block instance: the forward nodes to run again and where.
absl::StatusOr<bool> RecomputeBlock(Graph& g, const std::string& block) {
  const std::vector<Node>& nodes = g.nodes();
  // The block's forward nodes and the values they make.
  std::set<int> block_values;
  std::vector<int> forward;
  for (const Node& n : nodes) {
    if (n.role != NodeRole::kForward || n.outputs.empty()) continue;
    if (!InBlock(g.value(n.outputs[0]).name, block)) continue;
    forward.push_back(n.id);
    block_values.insert(n.outputs.begin(), n.outputs.end());
  }
  // Checkpoints: values read by a forward node outside the block.
  std::set<int> kept;
  std::set<int> in_block_nodes(forward.begin(), forward.end());
  for (const Node& n : nodes) {
    if (n.role != NodeRole::kForward || in_block_nodes.count(n.id)) continue;
    for (int in : n.inputs) {
      if (block_values.count(in)) kept.insert(in);
    }
  }
  // What the backward reads of the rest, and where it first does.
  std::set<int> needed;
  int first_reader = -1;
  for (const Node& n : nodes) {
    if (n.role != NodeRole::kBackward) continue;
    for (int in : n.inputs) {
      if (block_values.count(in) && !kept.count(in)) {
        needed.insert(in);
        if (first_reader < 0) first_reader = n.id;
      }
    }
  }
  if (needed.empty()) return false;
  // The producers of `needed` and, transitively, of their block inputs
  // (not of checkpoints, which are read as they are).
  std::map<int, int> producer;  // value -> forward node
  for (int id : forward) {
    for (int out : nodes[id].outputs) producer[out] = id;
  }
  std::set<int> rerun;
  std::vector<int> stack(needed.begin(), needed.end());
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    auto p = producer.find(v);
    if (p == producer.end() || !rerun.insert(p->second).second) continue;
    for (int in : nodes[p->second].inputs) {
      if (block_values.count(in) && !kept.count(in)) stack.push_back(in);
    }
  }
  // The copies, in program order, each reading earlier copies.
  std::map<int, int> copy_of;  // original value -> its recomputed copy
  std::vector<Node> copies;
  for (int id : forward) {
    if (!rerun.count(id)) continue;
    Node c = nodes[id];
    for (int& in : c.inputs) {
      if (auto it = copy_of.find(in); it != copy_of.end()) in = it->second;
    }
    for (int& out : c.outputs) {
      Value v = g.value(out);
      v.name = absl::StrCat(v.name, ".recompute");
      const int copy = g.AddValue(std::move(v));
      copy_of[out] = copy;
      out = copy;
    }
    c.role = NodeRole::kBackward;
    c.label = absl::StrCat(c.label, " (recompute)");
    copies.push_back(std::move(c));
  }
  // Splice them in before the first reader; backward nodes read the copies.
  std::vector<Node> rewritten;
  for (Node n : g.nodes()) {
    if (n.id == first_reader) {
      for (Node& c : copies) rewritten.push_back(std::move(c));
    }
    if (n.role == NodeRole::kBackward) {
      for (int& in : n.inputs) {
        if (auto it = copy_of.find(in); it != copy_of.end()) in = it->second;
      }
    }
    rewritten.push_back(std::move(n));
  }
  for (size_t i = 0; i < rewritten.size(); ++i) rewritten[i].id = static_cast<int>(i);
  g.mutable_nodes() = std::move(rewritten);
  return true;
}

}  // namespace

absl::StatusOr<bool> Recompute::Run(Graph* graph) {
  bool changed = false;
  for (const std::string& block : blocks_) {
    absl::StatusOr<bool> done = RecomputeBlock(*graph, block);
    if (!done.ok()) return done.status();
    changed |= *done;
  }
  return changed;
}

}  // namespace trainc
