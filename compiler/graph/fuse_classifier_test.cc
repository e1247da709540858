#include "compiler/graph/fuse_classifier.h"

#include <string>

#include "compiler/graph/testing/graph_test_util.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

constexpr char kModel[] = R"(
model m {
  input  tokens: i32[8]
  label  next:   i32[8]
  wte    = embedding(tokens, 16, 8)
  logits = linear(wte, 16)
  loss   = LOSS
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

// The model with `loss`, lowered and differentiated (no fusion yet).
Graph Differentiated(const std::string& loss) {
  std::string source = kModel;
  source.replace(source.find("LOSS"), 4, loss);
  return DifferentiatedGraph(CompiledSpec(source), 0.25);
}

TEST(FuseClassifier, TheLossAndItsGradientBecomeOneForwardInstruction) {
  Graph g = Differentiated("cross_entropy(logits, next)");
  const size_t nodes = g.nodes().size();
  int dlogits = -1;
  for (const Node& node : g.nodes()) {
    if (node.op == "cross_entropy_grad") dlogits = node.outputs[0];
  }
  ASSERT_GE(dlogits, 0);
  absl::StatusOr<bool> changed = FuseClassifier().Run(&g);
  ASSERT_TRUE(changed.ok() && *changed);
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  EXPECT_EQ(g.nodes().size(), nodes - 1);
  EXPECT_EQ(CountOps(g, "cross_entropy") + CountOps(g, "cross_entropy_grad"), 0);
  for (const Node& node : g.nodes()) {
    if (node.op != "cross_entropy_fused") continue;
    EXPECT_EQ(node.role, NodeRole::kForward);
    EXPECT_EQ(node.outputs[0], g.loss());
    EXPECT_EQ(node.outputs[1], dlogits);  // the backward reads it as before
    EXPECT_EQ(node.attrs.at("scale"), 0.25);
    EXPECT_EQ(node.label, "loss, grad/logits = cross_entropy_fused");
  }
  EXPECT_FALSE(*FuseClassifier().Run(&g));  // nothing left to fuse
}

TEST(FuseClassifier, LeavesOtherLossesAndSharedProbabilities) {
  Graph mse = Differentiated("mse(logits, logits)");
  EXPECT_FALSE(*FuseClassifier().Run(&mse));
  // A second reader of the probabilities keeps them.
  Graph g = Differentiated("cross_entropy(logits, next)");
  int probs = -1;
  for (const Node& node : g.nodes()) {
    if (node.op == "cross_entropy") probs = node.outputs[1];
  }
  ASSERT_GE(probs, 0);
  Value copy = g.value(probs);
  copy.name = "probs_copy";
  const int out = g.AddValue(copy);
  Node reader;
  reader.op = "reshape";
  reader.inputs = {probs};
  reader.outputs = {out};
  reader.label = "probs_copy = reshape";
  g.AddNode(reader);
  EXPECT_FALSE(*FuseClassifier().Run(&g));
  EXPECT_EQ(CountOps(g, "cross_entropy_grad"), 1);
}

}  // namespace
}  // namespace trainc
