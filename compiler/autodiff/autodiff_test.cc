#include "compiler/autodiff/autodiff.h"

#include <memory>
#include <string>
#include <vector>

#include "compiler/graph/dce.h"
#include "compiler/graph/lower.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Graph Differentiate(const TrainSpec& spec) {
  absl::StatusOr<Graph> g = LowerModel(spec.model, spec.train.micro_batch);
  EXPECT_TRUE(g.ok()) << g.status();
  PassPipeline pipeline("test");
  pipeline.Add(std::make_unique<DeadCodeElimination>());
  pipeline.Add(std::make_unique<Autodiff>(0.25));
  absl::StatusOr<bool> changed = pipeline.Run(&*g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  return *std::move(g);
}

std::vector<std::string> BackwardLabels(const Graph& g) {
  std::vector<std::string> labels;
  for (const Node& n : g.nodes()) {
    if (n.role == NodeRole::kBackward) labels.push_back(n.label);
  }
  return labels;
}

TEST(Autodiff, MlpBackwardIsReverseOrderWithoutFirstInputGrad) {
  const Graph g = Differentiate(testing::MlpSpec(4, {3}, 2, 1, 2, 1));
  EXPECT_THAT(BackwardLabels(g),
              ElementsAre("grad/logits = cross_entropy_grad",
                          "grad/logits.weight, grad/logits.bias = linear_grad_params",
                          "grad/h1 = linear_grad_input", "grad/h1.0 = relu_grad",
                          "grad/h1.weight, grad/h1.bias = linear_grad_params"));
  for (const Node& n : g.nodes()) {
    if (n.op == "cross_entropy_grad") {
      EXPECT_EQ(n.attrs.at("scale"), 0.25);
    }
  }
}

TEST(Autodiff, SavedTensorsFeedTheRightGradients) {
  const Graph g = Differentiate(testing::ResidualSpec(5, 4, 3, 1, 2, 1));
  auto name = [&](int id) { return g.value(id).name; };
  for (const Node& n : g.nodes()) {
    if (n.op == "gelu_grad") {
      EXPECT_EQ(name(n.inputs[1]), "g.0");  // x
    }
    if (n.op == "tanh_grad") {
      EXPECT_EQ(name(n.inputs[1]), "t");    // y
    }
    if (n.op == "layernorm_grad_input") {
      EXPECT_EQ(name(n.inputs[3]), "r/mean");
      EXPECT_EQ(name(n.inputs[4]), "r/rstd");
    }
    if (n.op == "cross_entropy_grad") {
      EXPECT_EQ(name(n.inputs[0]), "loss/probs");
    }
  }
}

TEST(Autodiff, SeveralConsumersAccumulate) {
  const Graph g = Differentiate(testing::ResidualSpec(5, 4, 3, 1, 2, 1));
  std::vector<double> flags;
  for (const Node& n : g.nodes()) {
    if (n.role == NodeRole::kBackward && g.value(n.outputs[0]).name == "grad/h") {
      flags.push_back(n.attrs.at("accumulate"));
    }
  }
  EXPECT_THAT(flags, ElementsAre(0, 1));
}

TEST(Autodiff, AddOfTheSameValueTwice) {
  testing::SpecBuilder b("double");
  b.Input("x", {3});
  b.Linear("h", "x", 3);
  b.Add("d", "h", "h");
  b.Mse("loss", "d", "x");
  const Graph g = Differentiate(b.Build(1, 2, 1));
  std::vector<double> flags;
  for (const Node& n : g.nodes()) {
    if (n.op == "copy_grad") flags.push_back(n.attrs.at("accumulate"));
  }
  EXPECT_THAT(flags, ElementsAre(0, 1));
}

TEST(Autodiff, MseTargetIsConstantEvenWhenComputed) {
  testing::SpecBuilder b("target");
  b.Input("x", {3});
  b.Linear("p", "x", 3);
  b.Linear("t", "x", 3);
  b.Mse("loss", "p", "t");
  const Graph g = Differentiate(b.Build(1, 2, 1));
  for (const Value& v : g.values()) EXPECT_NE(v.name, "grad/t");
  EXPECT_THAT(g.ToText(), HasSubstr("backward grad/p = mse_grad(p, t)"));
}

TEST(Autodiff, RunningTwiceIsAnError) {
  Graph g = Differentiate(testing::MlpSpec(4, {3}, 2, 1, 2, 1));
  EXPECT_FALSE(Autodiff(1.0).Run(&g).ok());
}

}  // namespace
}  // namespace trainc
