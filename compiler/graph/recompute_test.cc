#include "compiler/graph/recompute.h"

#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "compiler/autodiff/autodiff.h"
#include "compiler/frontend/frontend.h"
#include "compiler/graph/dce.h"
#include "compiler/graph/fuse_linear_gelu.h"
#include "compiler/graph/lower.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// Two layers with dropout inside, the second read by a layernorm outside.
constexpr char kModel[] = R"(
model m {
  input  tokens: i32[8]
  label  next:   i32[8]
  block layer(x) {
    n = layernorm(x)
    f = linear(n, 16)
    d = dropout(gelu(f), p = 0.1)
    o = linear(d, 8)
    return x + o
  }
  wte    = embedding(tokens, 16, 8)
  h      = repeat(layer, 2, wte, recompute = RECOMPUTE)
  out    = layernorm(h)
  logits = linear(out, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

Graph Differentiated(bool recompute) {
  std::string source = kModel;
  source.replace(source.find("RECOMPUTE"), 9, recompute ? "true" : "false");
  const FrontendResult r = CompileSource(source, "m.train", {}, {/*read_data=*/false});
  EXPECT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  absl::StatusOr<Graph> g = LowerModel(r.spec->model, 2);
  EXPECT_TRUE(g.ok()) << g.status();
  PassPipeline pipeline("test");
  pipeline.Add(std::make_unique<DeadCodeElimination>());
  pipeline.Add(std::make_unique<Autodiff>(1.0));
  if (recompute) {
    EXPECT_EQ(r.spec->model.recompute_blocks, (std::vector<std::string>{"h.0", "h.1"}));
    pipeline.Add(std::make_unique<Recompute>(r.spec->model.recompute_blocks));
  }
  absl::StatusOr<bool> ran = pipeline.Run(&*g);
  EXPECT_TRUE(ran.ok()) << ran.status();
  return std::move(*g);
}

bool InBlock(const std::string& name) {
  return absl::StartsWith(name, "h.0.") || absl::StartsWith(name, "h.1.");
}

TEST(Recompute, TheBackwardReadsCopiesNotTheForwardsActivations) {
  const Graph plain = Differentiated(false);
  const Graph g = Differentiated(true);
  std::set<int> forward_values;
  for (const Node& n : g.nodes()) {
    if (n.role == NodeRole::kForward) forward_values.insert(n.outputs.begin(), n.outputs.end());
  }
  int copies = 0;
  for (const Node& n : g.nodes()) {
    if (absl::EndsWith(n.label, "(recompute)")) {
      ++copies;
      EXPECT_EQ(n.role, NodeRole::kBackward) << n.label;
      for (int out : n.outputs) EXPECT_TRUE(absl::EndsWith(g.value(out).name, ".recompute"));
      continue;
    }
    if (n.role != NodeRole::kBackward) continue;
    for (int in : n.inputs) {
      const std::string& name = g.value(in).name;
      // Inside a block, the backward reads only copies, or a block's
      // output (h.0's, the next block's input; h.1's, read by `out`).
      if (forward_values.count(in) && InBlock(name)) {
        EXPECT_TRUE(absl::StrContains(name, ".return")) << n.label << " reads " << name;
      }
    }
  }
  EXPECT_GT(copies, 0);
  // Without recompute, the backward read the forward's values themselves.
  int plain_reads = 0;
  for (const Node& n : plain.nodes()) {
    if (n.role != NodeRole::kBackward) continue;
    for (int in : n.inputs) plain_reads += InBlock(plain.value(in).name);
  }
  EXPECT_GT(plain_reads, 0);
}

// train { recompute = true } lists every repeat instance, which the
// planner then recomputes (the same list repeat(..., recompute = true)
// makes).
TEST(Recompute, EveryRepeatInstanceIsListed) {
  std::string source = kModel;
  source.replace(source.find("RECOMPUTE"), 9, "false");
  source.replace(source.find("steps = 1 }"), 11, "steps = 1  recompute = true }");
  const FrontendResult r = CompileSource(source, "m.train", {}, {/*read_data=*/false});
  ASSERT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  EXPECT_TRUE(r.spec->train.recompute);
  EXPECT_TRUE(r.spec->model.recompute_blocks.empty());
  EXPECT_EQ(r.spec->model.repeat_blocks, (std::vector<std::string>{"h.0", "h.1"}));
}

// A copied dropout draws the original's mask: the same statement key.
TEST(Recompute, ACopiedDropoutKeepsItsKey) {
  const Graph g = Differentiated(true);
  double original = -1, copy = -2;
  for (const Node& n : g.nodes()) {
    if (n.op != "dropout" || !absl::StartsWith(n.label, "h.0.")) continue;
    (absl::EndsWith(n.label, "(recompute)") ? copy : original) = n.attrs.at("key");
  }
  EXPECT_EQ(original, copy);
}

// A block ending in a tanh GELU ends, after FuseLinearGelu, in one
// linear_gelu writing pre (which the backward reads) and y (the block's
// output, read by `out`: a checkpoint). The linear_gelu is copied for pre;
// the backward nodes before the block's first reader (out's layernorm's
// gradients) still read the original y, which is kept.
TEST(Recompute, ABackwardReaderBeforeTheCopiesKeepsTheCheckpoint) {
  std::string source = kModel;
  source.replace(source.find("RECOMPUTE"), 9, "true");
  const std::string ret = "return x + o";
  source.replace(source.find(ret), ret.size(),
                 "return gelu(linear(x + o, 8), approximate = \"tanh\")");
  const FrontendResult r = CompileSource(source, "m.train", {}, {/*read_data=*/false});
  ASSERT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  absl::StatusOr<Graph> g = LowerModel(r.spec->model, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  PassPipeline pipeline("test");
  pipeline.Add(std::make_unique<DeadCodeElimination>());
  pipeline.Add(std::make_unique<Autodiff>(1.0));
  pipeline.Add(std::make_unique<FuseLinearGelu>());
  pipeline.Add(std::make_unique<Recompute>(r.spec->model.recompute_blocks));
  const absl::StatusOr<bool> ran = pipeline.Run(&*g);
  ASSERT_TRUE(ran.ok()) << ran.status();
  int fused_copies = 0;
  for (const Node& n : g->nodes()) {
    fused_copies += n.op == "linear_gelu" && absl::EndsWith(n.label, "(recompute)");
  }
  EXPECT_EQ(fused_copies, 2);  // h.0's and h.1's
}

}  // namespace
}  // namespace trainc
