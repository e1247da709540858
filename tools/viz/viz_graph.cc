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
#include "compiler/ops/kernel_families.h"
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

// Step 1: every micro-step folded onto the drawn one. The k-th op of
// micro-step m is the k-th op of the drawn micro-step (the program is
// unrolled); the drawn one is the last (the one the all-reduces overlap).
struct Folding {
  std::vector<int> canon;        // instruction -> the one drawn for it
  std::vector<int> drawn_micro;  // the drawn micro-step's instructions
};

Folding FoldMicroSteps(const Plan& plan) {
  const auto& instrs = plan.instructions;
  const int n = static_cast<int>(instrs.size());
  std::map<int, std::vector<int>> by_micro;
  for (int i = 0; i < n; ++i) {
    if (InMicroStep(instrs[i])) by_micro[instrs[i].micro_step].push_back(i);
  }
  Folding f;
  f.canon.resize(n);
  for (int i = 0; i < n; ++i) f.canon[i] = i;
  if (by_micro.empty()) return f;
  int rep = by_micro.rbegin()->first;
  if (by_micro.count(plan.accumulate - 1)) rep = plan.accumulate - 1;
  f.drawn_micro = by_micro[rep];
  for (const auto& [m, list] : by_micro) {
    if (m == rep) continue;
    for (size_t k = 0; k < list.size() && k < f.drawn_micro.size(); ++k) {
      f.canon[list[k]] = f.drawn_micro[k];
    }
  }
  return f;
}

// Step 2's result: the collapsed blocks and which drawn instruction each
// stands for.
struct Blocks {
  std::map<int, std::string> block_of;  // drawn instr -> block node id
  std::map<std::string, VizNode> nodes;
  int count = 0;
};

// The node of one repeated block: "h1..h9 (×9)" and the ops of one period.
VizNode BlockNode(const Plan& plan, const std::vector<int>& run,
                  const RepeatedBlock& b, const std::string& id) {
  const auto& instrs = plan.instructions;
  VizNode node;
  node.id = id;
  node.kind = NodeKind::kRepeatedBlock;
  node.group = NodeGroup::kMicroStep;
  node.phase = PhaseName(instrs[run[0]].phase);
  node.repeats = b.repeats;
  const Instruction& first = instrs[run[b.start]];
  const Instruction& last = instrs[run[b.end() - 1]];
  std::vector<std::string> ops;
  for (int k = 0; k < b.period; ++k) ops.push_back(instrs[run[b.start + k]].op);
  std::string from = StatementOf(first), to = StatementOf(last);
  std::string names =
      from.empty() || to.empty() ? std::string("layers") : absl::StrCat(from, "..", to);
  node.label = absl::StrCat(names, " (\xC3\x97", b.repeats, ")\n",
                            absl::StrJoin(ops, " \xE2\x86\x92 "));
  return node;
}

// Collapses the runs of identical layers in `run`, the drawn micro-step's
// instructions of one phase, into `blocks`.
void CollapsePhase(const Plan& plan, const std::vector<int>& run, int min_repeats,
                   Blocks* blocks) {
  std::vector<std::string> sigs, stmts;
  bool have_stmts = true;
  for (int i : run) {
    sigs.push_back(SignatureOf(plan, plan.instructions[i]));
    stmts.push_back(StatementOf(plan.instructions[i]));
    if (stmts.back().empty()) have_stmts = false;
  }
  if (!have_stmts) stmts.clear();
  for (const RepeatedBlock& b : FindRepeatedBlocks(sigs, stmts, min_repeats)) {
    std::string id = absl::StrCat("blk", blocks->count++);
    blocks->nodes[id] = BlockNode(plan, run, b, id);
    for (int k = b.start; k < b.end(); ++k) blocks->block_of[run[k]] = id;
  }
}

// Step 2: runs of identical layers within each phase of the drawn
// micro-step, collapsed.
Blocks CollapseRepeats(const Plan& plan, const std::vector<int>& drawn_micro,
                       int min_repeats) {
  Blocks blocks;
  size_t s = 0;
  while (s < drawn_micro.size()) {
    size_t e = s;
    const Phase phase = plan.instructions[drawn_micro[s]].phase;
    while (e < drawn_micro.size() && plan.instructions[drawn_micro[e]].phase == phase) {
      ++e;
    }
    CollapsePhase(plan, std::vector<int>(drawn_micro.begin() + s, drawn_micro.begin() + e),
                  min_repeats, &blocks);
    s = e;
  }
  return blocks;
}

// The node an instruction is drawn as: its block, or its drawn copy.
class NodeNames {
 public:
  NodeNames(const Folding& folding, const Blocks& blocks)
      : folding_(folding), blocks_(blocks) {}
  std::string operator()(int i) const {
    int c = folding_.canon[i];
    auto it = blocks_.block_of.find(c);
    if (it != blocks_.block_of.end()) return it->second;
    return absl::StrCat("i", c);
  }

 private:
  const Folding& folding_;
  const Blocks& blocks_;
};

// Where the buckets are: which bucket each gradient lives in (by offset),
// which bucket a kBucket buffer is, and each bucket by id.
struct BucketIndex {
  std::map<int, int> of_grad;    // gradient buffer -> bucket id
  std::map<int, int> of_buffer;  // kBucket buffer -> bucket id
  std::map<int, const Bucket*> by_id;
};

BucketIndex IndexBuckets(const Plan& plan) {
  BucketIndex index;
  for (const Bucket& b : plan.buckets) {
    if (b.grad_buffer < 0) continue;
    const Buffer& bb = plan.buffers[b.grad_buffer];
    int64_t slots = plan.deterministic ? std::max<int64_t>(1, plan.accumulate) : 1;
    int64_t lo = bb.offset, hi = bb.offset + std::max(bb.bytes, b.bytes * slots);
    for (const Buffer& buf : plan.buffers) {
      if (buf.kind == BufferKind::kGradient && buf.offset >= lo && buf.offset < hi) {
        index.of_grad[buf.id] = b.id;
      }
    }
  }
  for (const Bucket& b : plan.buckets) index.of_buffer[b.grad_buffer] = b.id;
  for (const Bucket& b : plan.buckets) index.by_id[b.id] = &b;
  return index;
}

// Step 3: the edges, walking the program in order: a buffer's last writer
// (or its parameter, or its bucket) to each reader, a gradient's writer to
// its bucket, and an event's latest earlier recorder to each waiter.
EdgeSet ProgramEdges(const Plan& plan, const NodeNames& node_of,
                     const BucketIndex& buckets) {
  const auto& instrs = plan.instructions;
  const int n = static_cast<int>(instrs.size());
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
      auto bucket = buckets.of_buffer.find(b);
      if (w != last_writer.end()) {
        edges.Add(node_of(w->second), me, EdgeKind::kData);
      } else if (buf.kind == BufferKind::kParameter) {
        edges.Add(absl::StrCat("p", b), me, EdgeKind::kData);
      } else if (buf.kind == BufferKind::kBucket && bucket != buckets.of_buffer.end()) {
        edges.Add(absl::StrCat("b", bucket->second), me, EdgeKind::kData);
      }
    }
    for (int b : in.outputs) {
      last_writer[b] = i;
      auto views = views_of_span.find(b);
      if (views != views_of_span.end()) {
        for (int v : views->second) last_writer[v] = i;
      }
      auto gb = buckets.of_grad.find(b);
      if (gb != buckets.of_grad.end()) {
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
  return edges;
}

// Step 4's result: the parameters read only by collapsed blocks, grouped
// by the first block that reads them.
struct ParamGroups {
  std::map<std::string, std::vector<std::string>> consumers;  // p<id> -> to
  std::map<std::string, std::string> group_of;                 // p<id> -> pg<k>
  std::map<std::string, std::vector<int>> members;             // pg -> buffers
  std::map<std::string, std::string> block;                    // pg -> its first block
};

// Step 4: parameters used only by collapsed blocks become one node per
// block; their edges are rewritten to come from the group.
ParamGroups GroupBlockParameters(const Plan& plan, const Blocks& blocks, EdgeSet* edges) {
  ParamGroups groups;
  for (const VizEdge& e : edges->edges()) {
    if (e.from[0] == 'p') groups.consumers[e.from].push_back(e.to);
  }
  std::map<std::string, std::string> group_key_to_id;
  for (int b : plan.parameter_buffers) {
    std::string pid = absl::StrCat("p", b);
    auto it = groups.consumers.find(pid);
    if (it == groups.consumers.end()) continue;
    std::vector<std::string> to = it->second;
    bool all_blocks = !to.empty();
    for (const std::string& t : to) {
      if (!blocks.nodes.count(t)) all_blocks = false;
    }
    if (!all_blocks) continue;
    // Keyed by the first block that reads them (the forward one), so that
    // a layer's weights and biases land in one group.
    std::sort(to.begin(), to.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    std::string key = to.front();
    auto [gi, inserted] =
        group_key_to_id.insert({key, absl::StrCat("pg", group_key_to_id.size())});
    groups.group_of[pid] = gi->second;
    groups.members[gi->second].push_back(b);
    if (inserted) groups.block[gi->second] = to.front();
  }
  if (!groups.group_of.empty()) {
    EdgeSet rewritten;
    for (const VizEdge& e : edges->edges()) {
      auto f = groups.group_of.find(e.from);
      rewritten.Add(f == groups.group_of.end() ? e.from : f->second, e.to, e.kind);
    }
    *edges = std::move(rewritten);
  }
  return groups;
}

// Step 5a: the parameter nodes (one per group of a collapsed block's
// parameters), skipping parameters nothing reads.
void AddParameterNodes(const Plan& plan, const Blocks& blocks, const ParamGroups& groups,
                       VizGraph* g) {
  std::set<std::string> emitted_groups;
  for (int b : plan.parameter_buffers) {
    std::string pid = absl::StrCat("p", b);
    if (!groups.consumers.count(pid)) continue;  // unused: nothing to connect
    auto pg = groups.group_of.find(pid);
    if (pg != groups.group_of.end()) {
      if (!emitted_groups.insert(pg->second).second) continue;
      VizNode node;
      node.id = pg->second;
      node.kind = NodeKind::kParameterGroup;
      node.group = NodeGroup::kParameters;
      int64_t bytes = 0;
      const auto& members = groups.members.at(pg->second);
      for (int m : members) bytes += plan.buffers[m].bytes;
      std::string first_line = blocks.nodes.at(groups.block.at(pg->second)).label;
      first_line = first_line.substr(0, first_line.find('\n'));
      node.label = absl::StrCat("parameters of ", first_line, "\n", members.size(),
                                " tensors, ", HumanBytes(bytes));
      g->nodes.push_back(node);
      continue;
    }
    const Buffer& buf = plan.buffers[b];
    VizNode node;
    node.id = pid;
    node.kind = NodeKind::kParameter;
    node.group = NodeGroup::kParameters;
    node.label = absl::StrCat(buf.name, "\n[", ShapeText(buf.shape), "]");
    g->nodes.push_back(node);
  }
}

// The node of one drawn instruction; a collective's and the optimizer's
// carry their bucket's colour, a collective's label its bucket's size.
VizNode OpNode(const Plan& plan, int i, const BucketIndex& buckets) {
  const Instruction& in = plan.instructions[i];
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
  const bool collective = IsCollectiveOp(StepOpOfInstruction(in.op));
  if (collective || FamilyOf(KernelOpOfInstruction(in.op)) == KernelFamily::kOptimizer) {
    node.bucket = bucket;
  }
  auto b = buckets.by_id.find(bucket);
  if (collective && b != buckets.by_id.end()) {
    absl::StrAppend(&node.label, "\n", HumanBytes(b->second->bytes));
  }
  return node;
}

// Step 5b: the program's nodes, in order: each drawn instruction, or its
// block where it is the block's first.
void AddProgramNodes(const Plan& plan, const Folding& folding, const Blocks& blocks,
                     const BucketIndex& buckets, VizGraph* g) {
  std::set<std::string> emitted_blocks;
  for (int i = 0; i < static_cast<int>(plan.instructions.size()); ++i) {
    if (folding.canon[i] != i) continue;
    auto blk = blocks.block_of.find(i);
    if (blk == blocks.block_of.end()) {
      g->nodes.push_back(OpNode(plan, i, buckets));
    } else if (emitted_blocks.insert(blk->second).second) {
      g->nodes.push_back(blocks.nodes.at(blk->second));
    }
  }
}

// Step 5c: one node per bucket, and the buckets' table.
void AddBucketNodes(const Plan& plan, VizGraph* g) {
  for (const Bucket& b : plan.buckets) {
    VizNode node;
    node.id = absl::StrCat("b", b.id);
    node.kind = NodeKind::kBucket;
    node.group = NodeGroup::kStep;
    node.bucket = b.id;
    node.label = absl::StrCat("bucket ", b.id, "\n", HumanBytes(b.bytes), ", ",
                              b.parameters.size(), " params");
    g->nodes.push_back(node);
    g->buckets.push_back({b.id, b.bytes, b.parameters});
  }
}

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

absl::StatusOr<VizGraph> BuildVizGraph(const Plan& plan, const VizOptions& options) {
  if (absl::Status s = CheckIds(plan); !s.ok()) return s;
  VizGraph g;
  g.model = plan.model;
  g.accumulate = plan.accumulate;
  g.world_size = plan.world_size;
  g.instructions = static_cast<int>(plan.instructions.size());

  const Folding folding = FoldMicroSteps(plan);
  const Blocks blocks = options.collapse_repeats
                            ? CollapseRepeats(plan, folding.drawn_micro, options.min_repeats)
                            : Blocks();
  g.collapsed_blocks = blocks.count;
  const BucketIndex buckets = IndexBuckets(plan);
  EdgeSet edges = ProgramEdges(plan, NodeNames(folding, blocks), buckets);
  const ParamGroups groups = GroupBlockParameters(plan, blocks, &edges);

  // Nodes, in drawing order: parameters, then the program, then buckets.
  AddParameterNodes(plan, blocks, groups, &g);
  AddProgramNodes(plan, folding, blocks, buckets, &g);
  AddBucketNodes(plan, &g);

  // Drop edges to nodes that were not drawn (e.g. a bucket with no buffer).
  std::set<std::string> ids;
  for (const VizNode& node : g.nodes) ids.insert(node.id);
  for (const VizEdge& e : edges.edges()) {
    if (ids.count(e.from) && ids.count(e.to)) g.edges.push_back(e);
  }
  return g;
}

}  // namespace trainc::viz
