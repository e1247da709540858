#include "compiler/graph/recompute.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// The blocks are handled one after another, each seeing the graph as the
// ones before left it, in time linear in the block's nodes and their
// values' readers (the graph's index), not in the graph: the copies are
// appended to the graph and threaded into a linked program order at their
// place, and the program is rebuilt in that order once, at the end.
class Recomputer {
 public:
  Recomputer(Graph& g, const std::vector<std::string>& blocks) : g_(g), blocks_(blocks) {}

  bool Run() {
    const int n = static_cast<int>(g_.nodes().size());
    for (int id = 0; id < n; ++id) Append(id);
    const std::vector<std::vector<int>> forward = ForwardNodesOfBlocks();
    bool changed = false;
    for (size_t b = 0; b < blocks_.size(); ++b) changed |= RecomputeBlock(forward[b]);
    if (!changed) return false;
    std::vector<Node> program;
    program.reserve(g_.nodes().size());
    for (int id = head_; id >= 0; id = next_[id]) program.push_back(g_.node(id));
    g_.SetNodes(std::move(program));
    return true;
  }

 private:
  // Each block's forward nodes (role forward, with outputs) in program
  // order: those whose first output's name is the block's name or starts
  // with it and a '.' or '/' ("h.3", "h.3.ln_1", "h.3/...").
  std::vector<std::vector<int>> ForwardNodesOfBlocks() const {
    std::unordered_map<std::string, std::vector<int>> index;  // name -> blocks
    for (size_t b = 0; b < blocks_.size(); ++b) index[blocks_[b]].push_back(b);
    std::vector<std::vector<int>> forward(blocks_.size());
    for (const Node& node : g_.nodes()) {
      if (node.role != NodeRole::kForward || node.outputs.empty()) continue;
      const std::string& name = g_.value(node.outputs[0]).name;
      for (size_t end = 0; end <= name.size(); ++end) {
        if (end < name.size() && name[end] != '.' && name[end] != '/') continue;
        auto it = index.find(name.substr(0, end));
        if (it == index.end()) continue;
        for (int b : it->second) forward[b].push_back(node.id);
      }
    }
    return forward;
  }

  // One block: the values the backward reads of it that are not kept,
  // the forward nodes making them run again before the first reader.
  bool RecomputeBlock(const std::vector<int>& forward) {
    ++stamp_;
    Grow();
    for (int id : forward) {
      in_block_[id] = stamp_;
      for (int out : g_.node(id).outputs) {
        block_value_[out] = stamp_;
        producer_[out] = id;
      }
    }
    std::vector<int> needed;
    int first_reader = -1;
    for (int id : forward) {
      for (int out : g_.node(id).outputs) {
        if (kept_[out] == stamp_ || needed_[out] == stamp_) continue;
        if (IsCheckpoint(out)) {
          kept_[out] = stamp_;
          continue;
        }
        for (int reader : g_.readers(out)) {
          if (g_.node(reader).role != NodeRole::kBackward) continue;
          if (needed_[out] != stamp_) needed.push_back(out);
          needed_[out] = stamp_;
          if (first_reader < 0 || key_[reader] < key_[first_reader]) first_reader = reader;
        }
      }
    }
    if (needed.empty()) return false;
    MarkReruns(needed);
    EmitCopies(forward, first_reader);
    return true;
  }

  // Read by a forward node outside the block: kept as it is.
  bool IsCheckpoint(int value) const {
    for (int reader : g_.readers(value)) {
      if (g_.node(reader).role == NodeRole::kForward && in_block_[reader] != stamp_) {
        return true;
      }
    }
    return false;
  }

  // The producers of `needed` and, transitively, of their block inputs
  // (not of checkpoints, which are read as they are).
  void MarkReruns(std::vector<int> stack) {
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      if (block_value_[v] != stamp_) continue;
      const int p = producer_[v];
      if (rerun_[p] == stamp_) continue;
      rerun_[p] = stamp_;
      for (int in : g_.node(p).inputs) {
        if (block_value_[in] == stamp_ && kept_[in] != stamp_) stack.push_back(in);
      }
    }
  }

  // The copies, in program order, each reading earlier copies, before
  // `first_reader`.
  void EmitCopies(const std::vector<int>& forward, int first_reader) {
    const int first_copy = static_cast<int>(g_.nodes().size());
    std::vector<std::pair<int, int>> copied;  // original value, its copy
    for (int id : forward) {
      if (rerun_[id] != stamp_) continue;
      Node c = g_.node(id);
      for (int& in : c.inputs) {
        if (in < static_cast<int>(copy_stamp_.size()) && copy_stamp_[in] == stamp_) {
          in = copy_of_[in];
        }
      }
      for (int& out : c.outputs) {
        Value v = g_.value(out);
        v.name = absl::StrCat(v.name, ".recompute");
        const int copy = g_.AddValue(std::move(v));
        Grow();
        copy_of_[out] = copy;
        copy_stamp_[out] = stamp_;
        copied.emplace_back(out, copy);
        out = copy;
      }
      c.role = NodeRole::kBackward;
      c.label = absl::StrCat(c.label, " (recompute)");
      Append(g_.AddNode(std::move(c)));
    }
    MoveBefore(first_copy, static_cast<int>(g_.nodes().size()), first_reader);
    // The backward nodes from the first reader on (not the copies) read
    // the copies. One before it reads a checkpoint that a copied node also
    // writes (a linear_gelu's y, read outside the block): the original,
    // which is kept.
    std::vector<int> rewrite;
    for (const auto& [original, copy] : copied) {
      for (int reader : g_.readers(original)) {
        if (reader < first_copy && g_.node(reader).role == NodeRole::kBackward &&
            key_[reader] >= key_[first_reader]) {
          rewrite.push_back(reader);
        }
      }
    }
    std::sort(rewrite.begin(), rewrite.end());
    rewrite.erase(std::unique(rewrite.begin(), rewrite.end()), rewrite.end());
    for (int id : rewrite) {
      Node n = g_.node(id);
      for (int& in : n.inputs) {
        if (copy_stamp_[in] == stamp_) in = copy_of_[in];
      }
      g_.ReplaceNode(id, std::move(n));
    }
  }

  // The per-value and per-node arrays, as long as the graph's.
  void Grow() {
    const size_t values = g_.values().size(), nodes = g_.nodes().size();
    for (std::vector<int>* a : {&block_value_, &producer_, &kept_, &needed_, &copy_of_,
                                &copy_stamp_}) {
      a->resize(values, -1);
    }
    in_block_.resize(nodes, -1);
    rerun_.resize(nodes, -1);
  }

  // The program order: a linked list over node ids, with increasing keys
  // to compare two nodes' places.
  void Append(int id) {
    next_.resize(id + 1, -1);
    prev_.resize(id + 1, -1);
    key_.resize(id + 1, 0);
    in_block_.resize(id + 1, -1);
    rerun_.resize(id + 1, -1);
    prev_[id] = tail_;
    if (tail_ >= 0) {
      next_[tail_] = id;
      key_[id] = key_[tail_] + kGap;
    } else {
      head_ = id;
      key_[id] = kGap;
    }
    tail_ = id;
  }

  // Moves the nodes [first, last) (the tail of the list) before `anchor`.
  void MoveBefore(int first, int last, int anchor) {
    if (first >= last) return;
    tail_ = prev_[first];
    next_[tail_] = -1;
    const int before = prev_[anchor];
    prev_[first] = before;
    if (before >= 0) {
      next_[before] = first;
    } else {
      head_ = first;
    }
    next_[last - 1] = anchor;
    prev_[anchor] = last - 1;
    const int64_t low = before >= 0 ? key_[before] : 0, high = key_[anchor];
    const int64_t count = last - first;
    if (high - low <= count) {
      Relabel();
      return;
    }
    for (int id = first; id < last; ++id) {
      key_[id] = low + (high - low) * (id - first + 1) / (count + 1);
    }
  }

  void Relabel() {
    int64_t key = 0;
    for (int id = head_; id >= 0; id = next_[id]) key_[id] = key += kGap;
  }

  static constexpr int64_t kGap = int64_t{1} << 24;

  Graph& g_;
  const std::vector<std::string>& blocks_;
  int stamp_ = 0;  // the block being handled: arrays hold it where they apply
  std::vector<int> block_value_, producer_, kept_, needed_, copy_of_, copy_stamp_;
  std::vector<int> in_block_, rerun_;
  std::vector<int> next_, prev_;
  std::vector<int64_t> key_;
  int head_ = -1, tail_ = -1;
};

}  // namespace

absl::StatusOr<bool> Recompute::Run(Graph* graph) {
  return Recomputer(*graph, blocks_).Run();
}

}  // namespace trainc
