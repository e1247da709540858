#include "compiler/graph/fuse_linear_gelu_grad.h"

#include <string>
#include <vector>

#include "compiler/graph/fuse_linear_gelu.h"
#include "compiler/graph/testing/graph_test_util.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// GPT-2's MLP at toy sizes, c_fc, its tanh GELU and the projection c_proj;
// PROJ (the statements making c_proj) is replaced per test.
constexpr char kModel[] = R"(
model m {
  input  tokens: i32[4]
  label  next:   i32[4]
  wte    = embedding(tokens, 16, 8)
  c_fc   = linear(wte, 32)
  g      = gelu(c_fc, approximate = "tanh")
  PROJ
  logits = linear(c_proj, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

constexpr char kProj[] = "c_proj = linear(g, 8)";

TrainSpec Spec(const std::string& proj = kProj) {
  std::string source = kModel;
  source.replace(source.find("PROJ"), 4, proj);
  return CompiledSpec(source);
}

// The two the pass fuses, as autodiff wrote them.
struct Pair {
  int dy = -1, w = -1, dh = -1, pre = -1, dpre = -1;
  double accumulate = -1;
};
Pair FindPair(const Graph& g) {
  Pair p;
  const Node* grad = FirstNode(g, "gelu_tanh_grad");
  if (grad == nullptr) return p;
  p.dh = grad->inputs[0];
  p.pre = grad->inputs[1];
  p.dpre = grad->outputs[0];
  p.accumulate = grad->attrs.at("accumulate");
  const Node* product = WriterOf(g, g.value(p.dh).name);
  if (product == nullptr || product->op != "linear_grad_input") return p;
  p.dy = product->inputs[0];
  p.w = product->inputs[1];
  return p;
}

TEST(FuseLinearGeluGrad, TheProjectionsInputGradientAndTheGelusBecomeOneInstruction) {
  Graph g = Differentiated(Spec());
  const size_t nodes = g.nodes().size();
  const int products = CountOps(g, "linear_grad_input");
  const Pair p = FindPair(g);
  ASSERT_GE(p.dy, 0) << g.ToText();
  EXPECT_EQ(g.value(p.pre).name, "c_fc");
  EXPECT_EQ(p.accumulate, 0);

  absl::StatusOr<bool> changed = FuseLinearGeluGrad().Run(&g);
  ASSERT_TRUE(changed.ok() && *changed) << g.ToText();
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  EXPECT_EQ(g.nodes().size(), nodes - 1);
  EXPECT_EQ(CountOps(g, "gelu_tanh_grad"), 0);
  // The classifier's and c_fc's own input gradients stay.
  EXPECT_EQ(CountOps(g, "linear_grad_input"), products - 1);
  const Node* fused = FirstNode(g, "linear_grad_input_gelu");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->role, NodeRole::kBackward);
  EXPECT_EQ(fused->inputs, (std::vector<int>{p.dy, p.w, p.pre}));
  ASSERT_EQ(fused->outputs.size(), 2u);
  EXPECT_EQ(fused->outputs[0], p.dpre);
  const Value& workspace = g.value(fused->outputs[1]);
  EXPECT_EQ(workspace.kind, ValueKind::kActivation);
  EXPECT_EQ(workspace.shape, (std::vector<int64_t>{0}));
  EXPECT_EQ(fused->attrs.at("accumulate"), 0);
  EXPECT_EQ(fused->label, g.value(p.dpre).name + " = linear_grad_input_gelu");
  // dh is gone: nothing writes or reads it.
  EXPECT_EQ(WriterOf(g, g.value(p.dh).name), nullptr);
  for (const Node& node : g.nodes()) {
    for (int in : node.inputs) EXPECT_NE(in, p.dh) << node.label;
  }
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&g));  // nothing left to fuse
}

// After the forward fusion, as the planner runs the two: both fire.
TEST(FuseLinearGeluGrad, FiresAfterTheForwardFusion) {
  Graph g = Differentiated(Spec());
  ASSERT_TRUE(*FuseLinearGelu().Run(&g));
  ASSERT_TRUE(*FuseLinearGeluGrad().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  EXPECT_EQ(CountOps(g, "linear_gelu"), 1);
  EXPECT_EQ(CountOps(g, "linear_grad_input_gelu"), 1);
}

TEST(FuseLinearGeluGrad, LeavesADhWithAnotherReader) {
  Graph g = Differentiated(Spec());
  const Pair p = FindPair(g);
  ASSERT_GE(p.dy, 0);
  // A node after the gelu's gradient reads dh too.
  Value copy;
  copy.name = "dh_copy";
  copy.kind = ValueKind::kActivationGrad;
  copy.shape = g.value(p.dh).shape;
  Node reader;
  reader.op = "copy_grad";
  reader.role = NodeRole::kBackward;
  reader.inputs = {p.dh};
  reader.outputs = {g.AddValue(copy)};
  reader.attrs["accumulate"] = 0;
  reader.label = "dh_copy = copy_grad";
  g.AddNode(reader);
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&g));
  EXPECT_EQ(CountOps(g, "gelu_tanh_grad"), 1);
  EXPECT_EQ(CountOps(g, "linear_grad_input_gelu"), 0);
}

TEST(FuseLinearGeluGrad, LeavesADhWithAnotherWriter) {
  // g read by two projections: dh is written by both (the second
  // accumulating).
  Graph two = Differentiated(Spec("c_2 = linear(g, 8)\n  c_proj = linear(g, 8) + c_2"));
  ASSERT_GE(FindPair(two).dy, 0) << two.ToText();
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&two));
  EXPECT_EQ(CountOps(two, "gelu_tanh_grad"), 1);
  EXPECT_EQ(CountOps(two, "linear_grad_input_gelu"), 0);
  // g read by a linear and an add: dh written by linear_grad_input and
  // copy_grad.
  Graph mixed = Differentiated(Spec("c_proj = linear(g, 32) + g"));
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&mixed));
  EXPECT_EQ(CountOps(mixed, "linear_grad_input_gelu"), 0);
  // dh written by something else than a linear's input gradient.
  Graph relu = Differentiated(Spec("c_proj = linear(relu(g), 8)"));
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&relu));
  // GELU's erf form has gelu_grad, not the tanh form's gradient.
  std::string erf = kModel;
  erf.replace(erf.find("approximate = \"tanh\""), 20, "approximate = \"none\"");
  erf.replace(erf.find("PROJ"), 4, kProj);
  Graph exact = Differentiated(CompiledSpec(erf));
  EXPECT_FALSE(*FuseLinearGeluGrad().Run(&exact));
}

// dpre has another contribution (c_fc read by the residual add too): the
// fused node accumulates, as the gelu's gradient did.
TEST(FuseLinearGeluGrad, AccumulatesWhereTheGelusGradientDid) {
  Graph g = Differentiated(Spec("c_proj = linear(g, 32) + c_fc"));
  const Pair p = FindPair(g);
  ASSERT_GE(p.dy, 0) << g.ToText();
  ASSERT_EQ(p.accumulate, 1);
  ASSERT_TRUE(*FuseLinearGeluGrad().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  const Node* fused = FirstNode(g, "linear_grad_input_gelu");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->outputs[0], p.dpre);
  EXPECT_EQ(fused->attrs.at("accumulate"), 1);
}

// After MixedPrecision (as the planner runs it): the fused node reads the
// bf16 values the two read (dy, w's cast, pre) and writes bf16 dpre; dh
// was bf16 too.
TEST(FuseLinearGeluGrad, UnderBf16ReadsTheCastsAndWritesBf16) {
  Graph g = Differentiated(Spec(), /*bf16=*/true);
  const Pair p = FindPair(g);
  ASSERT_GE(p.dy, 0) << g.ToText();
  EXPECT_EQ(g.value(p.dh).dtype, DType::kBF16);
  ASSERT_TRUE(*FuseLinearGeluGrad().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  const Node* fused = FirstNode(g, "linear_grad_input_gelu");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->inputs, (std::vector<int>{p.dy, p.w, p.pre}));
  for (int in : fused->inputs) {
    EXPECT_EQ(g.value(in).dtype, DType::kBF16) << g.value(in).name;
  }
  EXPECT_EQ(g.value(fused->outputs[0]).dtype, DType::kBF16);
}

// The planner runs the pass under fusion = true (the default), not under
// fusion = false; the fused instruction's workspace is a workspace buffer.
TEST(FuseLinearGeluGrad, ThePlannerFusesUnderFusionTrueOnly) {
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(fusion);
    TrainSpec spec = Spec();
    spec.train.fusion = fusion;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int fused = 0, grad = 0;
    for (const Instruction& in : plan->instructions) {
      grad += in.op == "gelu_tanh_grad";
      if (in.op != "linear_grad_input_gelu") continue;
      ++fused;
      ASSERT_EQ(in.outputs.size(), 2u);
      EXPECT_EQ(plan->buffers[in.outputs[1]].kind, BufferKind::kWorkspace);
    }
    EXPECT_EQ(fused, fusion ? 1 : 0);
    EXPECT_EQ(grad, fusion ? 0 : 1);
  }
}

}  // namespace
}  // namespace trainc
