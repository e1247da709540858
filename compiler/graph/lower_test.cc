#include "compiler/graph/lower.h"

#include "compiler/graph/dce.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

TEST(LowerModel, FashionMlpShapesIncludeTheBatch) {
  absl::StatusOr<Graph> g = LowerModel(testing::FashionMlpSpec().model, 64);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(g->Verify().ok());
  const std::string text = g->ToText();
  EXPECT_THAT(text, HasSubstr("value image: input f32[64,784]"));
  EXPECT_THAT(text, HasSubstr("value class: label i32[64]"));
  EXPECT_THAT(text, HasSubstr("value h1.weight: parameter f32[256,784] init=uniform"));
  EXPECT_THAT(text, HasSubstr("value loss: loss f32[1]"));
  EXPECT_THAT(text, HasSubstr("forward  h1.0 = linear(image, h1.weight, h1.bias)"));
  EXPECT_THAT(text, HasSubstr("forward  loss, loss/probs = cross_entropy(logits, class)"));
  EXPECT_EQ(g->nodes().size(), 6u);
}

TEST(LowerModel, LayerNormSavesMeanAndRstd) {
  absl::StatusOr<Graph> g = LowerModel(testing::ResidualSpec(5, 4, 3, 1, 2, 1).model, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->ToText(), HasSubstr("r, r/mean, r/rstd = layernorm(h, r.weight, r.bias) {eps=1e-05}"));
}

TEST(LowerModel, ReportsBadSpecs) {
  TrainSpec spec = testing::FashionMlpSpec();
  spec.model.ops[0].inputs = {"nope"};
  EXPECT_THAT(LowerModel(spec.model, 8).status().message(), HasSubstr("unknown value nope"));
  spec = testing::FashionMlpSpec();
  spec.model.loss = "h1";
  EXPECT_THAT(LowerModel(spec.model, 8).status().message(), HasSubstr("loss 'h1'"));
}

TEST(DeadCodeElimination, RemovesWhatTheLossDoesNotNeed) {
  testing::SpecBuilder b("dead");
  b.Input("x", {4});
  b.Label("y", ElementType::kI32, {3});
  b.LinearAct("side", "tanh", "x", 5);
  b.Linear("logits", "x", 3);
  b.CrossEntropy("loss", "logits", "y");
  absl::StatusOr<Graph> g = LowerModel(b.Build(1, 2, 1).model, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<bool> changed = DeadCodeElimination().Run(&*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(g->nodes().size(), 2u);
  EXPECT_FALSE(*DeadCodeElimination().Run(&*g));
}

}  // namespace
}  // namespace trainc
