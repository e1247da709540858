#include "tools/viz/viz_graph.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "tools/viz/dot_writer.h"
#include "tools/viz/graphviz.h"
#include "tools/viz/synthetic.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;

const VizNode* FindNode(const VizGraph& g, const std::string& id) {
  for (const VizNode& n : g.nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

int CountOps(const VizGraph& g, const std::string& label_part) {
  int n = 0;
  for (const VizNode& node : g.nodes) {
    if (node.kind == NodeKind::kOp && absl::StrContains(node.label, label_part)) ++n;
  }
  return n;
}

bool HasEdge(const VizGraph& g, const std::string& from, const std::string& to,
             EdgeKind kind) {
  for (const VizEdge& e : g.edges) {
    if (e.from == from && e.to == to && e.kind == kind) return true;
  }
  return false;
}

TEST(VizGraphTest, DrawsOneMicroStepOnce) {
  MlpPlanOptions o;
  o.accumulate = 4;
  Plan plan = MakeSyntheticPlan(o);
  auto g = BuildVizGraph(plan);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->accumulate, 4);
  EXPECT_EQ(CountOps(*g, "h1.0 = linear"), 1);
  EXPECT_EQ(CountOps(*g, "load_batch"), 1);
  EXPECT_EQ(CountOps(*g, "all_reduce"), static_cast<int>(plan.buckets.size()));
  EXPECT_EQ(CountOps(*g, "adamw"), static_cast<int>(plan.buckets.size()));
  for (const VizNode& n : g->nodes) {
    if (n.kind != NodeKind::kOp) continue;
    if (n.comm) {
      EXPECT_EQ(n.group, NodeGroup::kComm) << n.label;
    }
    if (absl::StrContains(n.label, "adamw")) {
      EXPECT_EQ(n.group, NodeGroup::kStep);
    }
    if (absl::StrContains(n.label, "= linear")) {
      EXPECT_EQ(n.group, NodeGroup::kMicroStep);
    }
  }
}

TEST(VizGraphTest, DataEventAndBucketEdges) {
  Plan plan = MakeSyntheticPlan({});
  auto g = BuildVizGraph(plan);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const Bucket& b : plan.buckets) {
    std::string bucket = absl::StrCat("b", b.id);
    std::string ar = absl::StrCat("i", b.all_reduce);
    const VizNode* node = FindNode(*g, bucket);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->bucket, b.id);
    EXPECT_EQ(FindNode(*g, ar)->bucket, b.id);
    // gradients flow into the bucket, the bucket into its all-reduce ...
    EXPECT_TRUE(HasEdge(*g, absl::StrCat("i", b.ready_after), bucket,
                        EdgeKind::kData));
    EXPECT_TRUE(HasEdge(*g, bucket, ar, EdgeKind::kData));
    // ... which waits for the event its last gradient's writer records.
    EXPECT_TRUE(HasEdge(*g, absl::StrCat("i", b.ready_after), ar,
                        EdgeKind::kEvent));
  }
  // A parameter feeds its forward op.
  std::string h1;
  for (const VizNode& n : g->nodes) {
    if (n.label == "h1.0 = linear") h1 = n.id;
  }
  EXPECT_TRUE(HasEdge(*g, absl::StrCat("p", plan.parameter_buffers[0]), h1,
                      EdgeKind::kData));
  ASSERT_EQ(g->buckets.size(), plan.buckets.size());
  EXPECT_EQ(g->buckets[0].bytes, plan.buckets[0].bytes);
}

TEST(VizGraphTest, HundredLayersCollapseAndDraw) {
  MlpPlanOptions o;
  o.hidden_layers = 100;
  o.accumulate = 2;
  o.bucket_bytes = 25 << 20;  // the default bucket_mb: a few buckets
  Plan plan = MakeSyntheticPlan(o);
  auto g = BuildVizGraph(plan);
  ASSERT_TRUE(g.ok()) << g.status();
  // h1 reads the 784-wide input and stays; h2..h100 are identical.
  EXPECT_EQ(g->collapsed_blocks, 2);  // one forward, one backward
  bool forward_block = false;
  for (const VizNode& n : g->nodes) {
    if (n.kind == NodeKind::kRepeatedBlock && n.phase == "forward") {
      forward_block = true;
      EXPECT_EQ(n.repeats, 99);
      EXPECT_THAT(n.label, HasSubstr("h2..h100 (\xC3\x97" "99)"));
    }
  }
  EXPECT_TRUE(forward_block);
  EXPECT_LT(g->nodes.size(), 80u) << "not collapsed";
  std::string dot = WriteDot(*g, plan);
  if (FindDot().ok()) {
    auto svg = RenderDot(dot, "svg");
    ASSERT_TRUE(svg.ok()) << svg.status();
    EXPECT_THAT(*svg, HasSubstr("h2..h100"));
  }
}

// The same through the real front end and planner, whose labels and
// buffer layout are what users will see.
TEST(VizGraphTest, HundredLayerTrainFileCollapsesAndDraws) {
  std::string src =
      "model deep {\n  input image: f32[784]\n  label class: i32[10]\n"
      "  h1 = relu(linear(image, 64))\n";
  for (int l = 2; l <= 100; ++l) {
    absl::StrAppend(&src, "  h", l, " = relu(linear(h", l - 1, ", 64))\n");
  }
  absl::StrAppend(
      &src,
      "  logits = linear(h100, 10)\n  loss = cross_entropy(logits, class)\n}\n"
      "data {\n  train = idx(\"/usr/share/datasets/fashion-mnist/"
      "train-images-idx3-ubyte.gz\",\n"
      "              \"/usr/share/datasets/fashion-mnist/"
      "train-labels-idx1-ubyte.gz\")\n  scale = 1/255\n}\n"
      "train {\n  gpus = 2\n  micro_batch = 32\n  accumulate = 2\n"
      "  epochs = 1\n  optimizer = sgd(lr = 0.1)\n  bucket_mb = 25\n}\n");
  FrontendResult fe = CompileSource(src, "deep.train");
  ASSERT_TRUE(fe.spec.has_value())
      << FormatDiagnostics(fe.diagnostics, fe.source);
  auto plan = BuildPlan(*fe.spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto g = BuildVizGraph(*plan);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GE(g->collapsed_blocks, 2);
  EXPECT_LT(g->nodes.size(), 80u) << "not collapsed";
  bool forward_block = false;
  for (const VizNode& n : g->nodes) {
    if (n.kind == NodeKind::kRepeatedBlock && n.phase == "forward") {
      forward_block = true;
      EXPECT_GE(n.repeats, 98);
      EXPECT_THAT(n.label, HasSubstr("h2..h100"));
    }
  }
  EXPECT_TRUE(forward_block);
  if (FindDot().ok()) {
    auto svg = RenderDot(WriteDot(*g, *plan), "svg");
    ASSERT_TRUE(svg.ok()) << svg.status();
  }
}

// A repeat(...) block's layers ("h.0.ln_1" ... "h.3.mlp") fold at the
// layer index: tiny_gpt draws its four layers once.
TEST(VizGraphTest, RepeatLayersOfTinyGptCollapse) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult fe = CompileFile("dsl_examples/tiny_gpt.train", {}, model_only);
  ASSERT_TRUE(fe.spec.has_value()) << FormatDiagnostics(fe.diagnostics, fe.source);
  auto plan = BuildPlan(*fe.spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto g = BuildVizGraph(*plan);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->collapsed_blocks, 2);  // one forward, one backward
  EXPECT_LT(g->nodes.size(), 80u) << "not collapsed";
  bool forward = false;
  for (const VizNode& n : g->nodes) {
    if (n.kind != NodeKind::kRepeatedBlock || n.phase != "forward") continue;
    forward = true;
    EXPECT_EQ(n.repeats, 4);
    EXPECT_THAT(n.label, HasSubstr("h.0..h.3"));
    EXPECT_THAT(n.label, HasSubstr("attention"));
  }
  EXPECT_TRUE(forward);
}

TEST(VizGraphTest, NoCollapseDrawsEveryLayer) {
  MlpPlanOptions o;
  o.hidden_layers = 10;
  Plan plan = MakeSyntheticPlan(o);
  VizOptions options;
  options.collapse_repeats = false;
  auto g = BuildVizGraph(plan, options);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->collapsed_blocks, 0);
  EXPECT_EQ(CountOps(*g, "= relu") - CountOps(*g, "= relu_grad"), 10);
}

TEST(VizGraphTest, RejectsOutOfRangeBuffer) {
  Plan plan = MakeSyntheticPlan({});
  plan.instructions[1].inputs.push_back(9999);
  auto g = BuildVizGraph(plan);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainc::viz
