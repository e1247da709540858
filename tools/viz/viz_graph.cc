#include "tools/viz/viz_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/plan/plan_io.h"
#include "tools/viz/repeat_finder.h"

namespace trainc::viz {
namespace {

bool InMicroStep(const Instruction& in) {
  return in.micro_step >= 0 && in.stream == Stream::kCompute &&
         (in.phase == Phase::kData || in.phase == Phase::kForward ||
          in.phase == Phase::kBackward);
}

// The statement an instruction belongs to, from its label "h1.0 = linear"
// or "grad/h1.weight = linear_grad_params": the left-hand side without any
// path prefix, cut at the first '.', so that all ops of one layer share it
// (statement names are identifiers; nested calls and parameters add ".x"),
// or after the layer index of a repeat(...) ("h.3.attn.c_attn": "h.3").
std::string StatementOf(const Instruction& in) {
  std::string s = in.label;
  size_t eq = s.find(" = ");
  if (eq != std::string::npos) s = s.substr(0, eq);
  size_t space = s.find_last_of(' ');
  if (space != std::string::npos) s = s.substr(space + 1);
  size_t slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  size_t dot = s.find('.');
  if (dot == std::string::npos) return s;
  // A layer of repeat(...): "h.3.attn.c_attn" belongs to statement "h.3",
  // so that layers are the boundaries repeated blocks fold at. ("h1.0", a
  // nested call's value, stays in statement "h1".)
  const size_t next = s.find('.', dot + 1);
  const std::string index =
      next == std::string::npos ? std::string() : s.substr(dot + 1, next - dot - 1);
  if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos) {
    return s.substr(0, dot + 1 + index.size());
  }
  return s.substr(0, dot);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrJoin(shape, "x");
}

// Two instructions with the same signature do the same work on the same
// shapes; buffer ids and the micro index do not count.
std::string SignatureOf(const Plan& plan, const Instruction& in) {
  std::string sig = in.op;
  for (int b : in.inputs) {
    absl::StrAppend(&sig, "|i", BufferKindName(plan.buffers[b].kind), ":",
                    ShapeText(plan.buffers[b].shape));
  }
  for (int b : in.outputs) {
    absl::StrAppend(&sig, "|o", BufferKindName(plan.buffers[b].kind), ":",
                    ShapeText(plan.buffers[b].shape));
  }
  for (const auto& [k, v] : in.attrs) {
    if (k != "micro") absl::StrAppend(&sig, "|", k, "=", v);
  }
  return sig;
}

int BucketAttr(const Instruction& in) {
  auto it = in.attrs.find("bucket");
  return it == in.attrs.end() ? -1 : static_cast<int>(it->second);
}

absl::Status CheckIds(const Plan& plan) {
  const int nb = static_cast<int>(plan.buffers.size());
  for (const Instruction& in : plan.instructions) {
    for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
      for (int b : *ids) {
        if (b < 0 || b >= nb) {
          return absl::InvalidArgumentError(absl::StrCat(
              "plan: instr ", in.id, " refers to buffer ", b,
              " out of range [0, ", nb, ")"));
        }
      }
    }
  }
  const int ni = static_cast<int>(plan.instructions.size());
  for (const Bucket& b : plan.buckets) {
    if (b.grad_buffer < -1 || b.grad_buffer >= nb || b.all_reduce < -1 ||
        b.all_reduce >= ni) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: bucket ", b.id, " refers to ids out of range"));
    }
  }
  return absl::OkStatus();
}

class EdgeSet {
 public:
  void Add(const std::string& from, const std::string& to, EdgeKind kind) {
    if (from == to) return;
    if (seen_.insert({from, to, static_cast<int>(kind)}).second) {
      edges_.push_back({from, to, kind});
    }
  }
  std::vector<VizEdge>& edges() { return edges_; }

 private:
  std::set<std::tuple<std::string, std::string, int>> seen_;
  std::vector<VizEdge> edges_;
};

}  // namespace

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

absl::StatusOr<VizGraph> BuildVizGraph(const Plan& plan,
                                       const VizOptions& options) {
  if (absl::Status s = CheckIds(plan); !s.ok()) return s;
  const auto& instrs = plan.instructions;
  const int n = static_cast<int>(instrs.size());

  VizGraph g;
  g.model = plan.model;
  g.accumulate = plan.accumulate;
  g.world_size = plan.world_size;
  g.instructions = n;

  // 1. Fold every micro-step onto the drawn one: the k-th op of micro-step m
  //    is the k-th op of the drawn micro-step (the program is unrolled).
  std::map<int, std::vector<int>> by_micro;
  for (int i = 0; i < n; ++i) {
    if (InMicroStep(instrs[i])) by_micro[instrs[i].micro_step].push_back(i);
  }
  std::vector<int> canon(n);
  for (int i = 0; i < n; ++i) canon[i] = i;
  std::vector<int> drawn_micro;
  if (!by_micro.empty()) {
    int rep = by_micro.rbegin()->first;
    if (by_micro.count(plan.accumulate - 1)) rep = plan.accumulate - 1;
    drawn_micro = by_micro[rep];
    for (const auto& [m, list] : by_micro) {
      if (m == rep) continue;
      for (size_t k = 0; k < list.size() && k < drawn_micro.size(); ++k) {
        canon[list[k]] = drawn_micro[k];
      }
    }
  }

  // 2. Collapse runs of identical layers within each phase of the drawn
  //    micro-step.
  std::map<int, std::string> block_of;  // drawn instr -> block node id
  std::map<std::string, VizNode> block_nodes;
  if (options.collapse_repeats) {
    size_t s = 0;
    while (s < drawn_micro.size()) {
      size_t e = s;
      while (e < drawn_micro.size() &&
             instrs[drawn_micro[e]].phase == instrs[drawn_micro[s]].phase) {
        ++e;
      }
      std::vector<std::string> sigs, stmts;
      bool have_stmts = true;
      for (size_t k = s; k < e; ++k) {
        sigs.push_back(SignatureOf(plan, instrs[drawn_micro[k]]));
        stmts.push_back(StatementOf(instrs[drawn_micro[k]]));
        if (stmts.back().empty()) have_stmts = false;
      }
      if (!have_stmts) stmts.clear();
      for (const RepeatedBlock& b :
           FindRepeatedBlocks(sigs, stmts, options.min_repeats)) {
        std::string id = absl::StrCat("blk", g.collapsed_blocks++);
        VizNode node;
        node.id = id;
        node.kind = NodeKind::kRepeatedBlock;
        node.group = NodeGroup::kMicroStep;
        node.phase = PhaseName(instrs[drawn_micro[s]].phase);
        node.repeats = b.repeats;
        const Instruction& first = instrs[drawn_micro[s + b.start]];
        const Instruction& last = instrs[drawn_micro[s + b.end() - 1]];
        std::vector<std::string> ops;
        for (int k = 0; k < b.period; ++k) {
          ops.push_back(instrs[drawn_micro[s + b.start + k]].op);
        }
        std::string from = StatementOf(first), to = StatementOf(last);
        std::string names = from.empty() || to.empty()
                                ? std::string("layers")
                                : absl::StrCat(from, "..", to);
        node.label = absl::StrCat(names, " (\xC3\x97", b.repeats, ")\n",
                                  absl::StrJoin(ops, " \xE2\x86\x92 "));
        block_nodes[id] = node;
        for (int k = b.start; k < b.end(); ++k) {
          block_of[drawn_micro[s + k]] = id;
        }
      }
      s = e;
    }
  }
  auto node_of = [&](int i) -> std::string {
    int c = canon[i];
    auto it = block_of.find(c);
    if (it != block_of.end()) return it->second;
    return absl::StrCat("i", c);
  };

  // Gradients live inside their bucket: find each one's bucket by offset.
  std::map<int, int> bucket_of_grad;
  for (const Bucket& b : plan.buckets) {
    if (b.grad_buffer < 0) continue;
    const Buffer& bb = plan.buffers[b.grad_buffer];
    int64_t slots = plan.deterministic ? std::max<int64_t>(1, plan.accumulate) : 1;
    int64_t lo = bb.offset, hi = bb.offset + std::max(bb.bytes, b.bytes * slots);
    for (const Buffer& buf : plan.buffers) {
      if (buf.kind == BufferKind::kGradient && buf.offset >= lo &&
          buf.offset < hi) {
        bucket_of_grad[buf.id] = b.id;
      }
    }
  }
  std::map<int, int> bucket_of_buffer;  // kBucket buffer -> bucket id
  for (const Bucket& b : plan.buckets) bucket_of_buffer[b.grad_buffer] = b.id;
  std::map<int, const Bucket*> bucket_by_id;
  for (const Bucket& b : plan.buckets) bucket_by_id[b.id] = &b;

  // 3. Edges, walking the program in order.
  EdgeSet edges;
  std::map<int, int> last_writer;            // buffer -> instr
  std::map<int, std::vector<int>> recorders;  // event -> instrs, in order
  for (int i = 0; i < n; ++i) {
    for (int e : instrs[i].record_events) recorders[e].push_back(i);
  }
  // ZeRO-3: the parameter views inside each gathered span (live within it),
  // so that a reader's edge comes from the all_gather that filled it.
  const std::map<int, std::vector<int>> views_of_span = GatheredSpanViews(plan);
  for (int i = 0; i < n; ++i) {
    const Instruction& in = instrs[i];
    std::string me = node_of(i);
    for (int b : in.inputs) {
      const Buffer& buf = plan.buffers[b];
      auto w = last_writer.find(b);
      if (w != last_writer.end()) {
        edges.Add(node_of(w->second), me, EdgeKind::kData);
      } else if (buf.kind == BufferKind::kParameter) {
        edges.Add(absl::StrCat("p", b), me, EdgeKind::kData);
      } else if (buf.kind == BufferKind::kBucket && bucket_of_buffer.count(b)) {
        edges.Add(absl::StrCat("b", bucket_of_buffer[b]), me, EdgeKind::kData);
      }
    }
    for (int b : in.outputs) {
      last_writer[b] = i;
      auto views = views_of_span.find(b);
      if (views != views_of_span.end()) {
        for (int v : views->second) last_writer[v] = i;
      }
      auto gb = bucket_of_grad.find(b);
      if (gb != bucket_of_grad.end()) {
        edges.Add(me, absl::StrCat("b", gb->second), EdgeKind::kData);
      }
    }
    for (int e : in.wait_events) {
      auto r = recorders.find(e);
      if (r == recorders.end()) continue;
      // Events are per step: the wait is met by the latest earlier record.
      int from = -1;
      for (int cand : r->second) {
        if (cand < i) from = cand;
      }
      if (from >= 0) edges.Add(node_of(from), me, EdgeKind::kEvent);
    }
  }

  // 4. Parameters used only by collapsed blocks become one node per block.
  std::map<std::string, std::vector<std::string>> consumers;  // p<id> -> to
  for (const VizEdge& e : edges.edges()) {
    if (e.from[0] == 'p') consumers[e.from].push_back(e.to);
  }
  std::map<std::string, std::string> param_group;  // p<id> -> pg<k>
  std::map<std::string, std::vector<int>> group_members;  // pg -> buffers
  std::map<std::string, std::string> group_key_to_id;
  std::map<std::string, std::string> group_block;  // pg -> its first block
  for (int b : plan.parameter_buffers) {
    std::string pid = absl::StrCat("p", b);
    auto it = consumers.find(pid);
    if (it == consumers.end()) continue;
    std::vector<std::string> to = it->second;
    bool all_blocks = !to.empty();
    for (const std::string& t : to) {
      if (!block_nodes.count(t)) all_blocks = false;
    }
    if (!all_blocks) continue;
    // Keyed by the first block that reads them (the forward one), so that
    // a layer's weights and biases land in one group.
    std::sort(to.begin(), to.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    std::string key = to.front();
    auto [gi, inserted] = group_key_to_id.insert(
        {key, absl::StrCat("pg", group_key_to_id.size())});
    param_group[pid] = gi->second;
    group_members[gi->second].push_back(b);
    if (inserted) group_block[gi->second] = to.front();
  }
  if (!param_group.empty()) {
    EdgeSet rewritten;
    for (const VizEdge& e : edges.edges()) {
      auto f = param_group.find(e.from);
      rewritten.Add(f == param_group.end() ? e.from : f->second, e.to, e.kind);
    }
    edges = std::move(rewritten);
  }

  // 5. Nodes, in drawing order: parameters, then the program, then buckets.
  std::set<std::string> emitted_groups;
  for (int b : plan.parameter_buffers) {
    std::string pid = absl::StrCat("p", b);
    if (!consumers.count(pid)) continue;  // unused: nothing to connect
    auto pg = param_group.find(pid);
    if (pg != param_group.end()) {
      if (!emitted_groups.insert(pg->second).second) continue;
      VizNode node;
      node.id = pg->second;
      node.kind = NodeKind::kParameterGroup;
      node.group = NodeGroup::kParameters;
      int64_t bytes = 0;
      const auto& members = group_members[pg->second];
      for (int m : members) bytes += plan.buffers[m].bytes;
      std::string first_line = block_nodes[group_block[pg->second]].label;
      first_line = first_line.substr(0, first_line.find('\n'));
      node.label = absl::StrCat("parameters of ", first_line, "\n",
                                members.size(), " tensors, ", HumanBytes(bytes));
      g.nodes.push_back(node);
      continue;
    }
    const Buffer& buf = plan.buffers[b];
    VizNode node;
    node.id = pid;
    node.kind = NodeKind::kParameter;
    node.group = NodeGroup::kParameters;
    node.label = absl::StrCat(buf.name, "\n[", ShapeText(buf.shape), "]");
    g.nodes.push_back(node);
  }
  std::set<std::string> emitted_blocks;
  for (int i = 0; i < n; ++i) {
    if (canon[i] != i) continue;
    const Instruction& in = instrs[i];
    auto blk = block_of.find(i);
    if (blk != block_of.end()) {
      if (emitted_blocks.insert(blk->second).second) {
        g.nodes.push_back(block_nodes[blk->second]);
      }
      continue;
    }
    VizNode node;
    node.id = absl::StrCat("i", i);
    node.kind = NodeKind::kOp;
    node.phase = PhaseName(in.phase);
    node.comm = in.stream == Stream::kComm;
    node.group = InMicroStep(in) ? NodeGroup::kMicroStep
                 : node.comm    ? NodeGroup::kComm
                                : NodeGroup::kStep;
    node.label = in.label.empty() ? in.op : in.label;
    int bucket = BucketAttr(in);
    if (bucket < 0) {
      for (const Bucket& b : plan.buckets) {
        if (b.all_reduce == i) bucket = b.id;
      }
    }
    const bool collective = in.op == "all_reduce" ||
                            in.op == "reduce_scatter" || in.op == "all_gather";
    if (collective || in.op == "optimizer") node.bucket = bucket;
    if (collective && bucket_by_id.count(bucket)) {
      absl::StrAppend(&node.label, "\n", HumanBytes(bucket_by_id[bucket]->bytes));
    }
    g.nodes.push_back(node);
  }
  for (const Bucket& b : plan.buckets) {
    VizNode node;
    node.id = absl::StrCat("b", b.id);
    node.kind = NodeKind::kBucket;
    node.group = NodeGroup::kStep;
    node.bucket = b.id;
    node.label = absl::StrCat("bucket ", b.id, "\n", HumanBytes(b.bytes), ", ",
                              b.parameters.size(), " params");
    g.nodes.push_back(node);
    g.buckets.push_back({b.id, b.bytes, b.parameters});
  }

  // Drop edges to nodes that were not drawn (e.g. a bucket with no buffer).
  std::set<std::string> ids;
  for (const VizNode& node : g.nodes) ids.insert(node.id);
  for (const VizEdge& e : edges.edges()) {
    if (ids.count(e.from) && ids.count(e.to)) g.edges.push_back(e);
  }
  return g;
}

}  // namespace trainc::viz
