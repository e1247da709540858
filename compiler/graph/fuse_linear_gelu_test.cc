#include "compiler/graph/fuse_linear_gelu.h"

#include <string>
#include <vector>

#include "compiler/graph/testing/graph_test_util.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// GPT-2's MLP at toy sizes; MLP and LINEAR are replaced per test.
constexpr char kModel[] = R"(
model m {
  input  tokens: i32[4]
  label  next:   i32[4]
  wte    = embedding(tokens, 16, 8)
  c_fc   = LINEAR
  MLP
  logits = linear(g, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

constexpr char kTanh[] = "g = gelu(c_fc, approximate = \"tanh\")";

TrainSpec Spec(const std::string& mlp, const std::string& linear = "linear(wte, 32)") {
  std::string source = kModel;
  source.replace(source.find("LINEAR"), 6, linear);
  source.replace(source.find("MLP"), 3, mlp);
  return CompiledSpec(source);
}

// The linear writing c_fc.
const Node* Product(const Graph& g) {
  const Node* node = WriterOf(g, "c_fc");
  return node != nullptr && node->op == "linear" ? node : nullptr;
}

TEST(FuseLinearGelu, TheLinearAndItsGeluBecomeOneForwardInstruction) {
  for (const char* linear : {"linear(wte, 32)", "linear(wte, 32, bias = false)"}) {
    SCOPED_TRACE(linear);
    Graph g = Differentiated(Spec(kTanh, linear));
    const size_t nodes = g.nodes().size();
    const Node* product = Product(g);
    ASSERT_NE(product, nullptr) << g.ToText();
    const std::vector<int> inputs = product->inputs;
    const int pre = product->outputs[0];
    const Node* gelu = FirstNode(g, "gelu_tanh");
    ASSERT_NE(gelu, nullptr);
    const int y = gelu->outputs[0];

    absl::StatusOr<bool> changed = FuseLinearGelu().Run(&g);
    ASSERT_TRUE(changed.ok() && *changed);
    ASSERT_TRUE(g.Verify().ok()) << g.Verify();
    EXPECT_EQ(g.nodes().size(), nodes - 1);
    EXPECT_EQ(CountOps(g, "gelu_tanh"), 0);
    EXPECT_EQ(CountOps(g, "linear"), 1);  // the classifier's, untouched
    const Node* fused = FirstNode(g, "linear_gelu");
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(fused->role, NodeRole::kForward);
    EXPECT_EQ(fused->inputs, inputs);  // x, w (and b)
    EXPECT_EQ(fused->outputs, (std::vector<int>{pre, y}));
    EXPECT_EQ(fused->label, "c_fc, g = linear_gelu");
    // The backward reads pre and y as before: the gelu's gradient pre, the
    // next linear's weight gradient y.
    const Node* grad = FirstNode(g, "gelu_tanh_grad");
    ASSERT_NE(grad, nullptr);
    EXPECT_EQ(grad->inputs[1], pre);
    EXPECT_LT(fused->id, grad->id);
    EXPECT_FALSE(*FuseLinearGelu().Run(&g));  // nothing left to fuse
  }
}

TEST(FuseLinearGelu, LeavesALinearWhoseOutputHasAnotherReader) {
  // c_fc read by the add as well: the two stay apart.
  Graph shared = Differentiated(Spec("g = gelu(c_fc, approximate = \"tanh\") + c_fc"));
  EXPECT_FALSE(*FuseLinearGelu().Run(&shared));
  EXPECT_EQ(CountOps(shared, "gelu_tanh"), 1);
  EXPECT_EQ(CountOps(shared, "linear_gelu"), 0);
  // GELU's erf form is not the tanh form (cuBLASLt's epilogue).
  Graph erf = Differentiated(Spec("g = gelu(c_fc)"));
  EXPECT_FALSE(*FuseLinearGelu().Run(&erf));
  // Another op after the linear.
  Graph relu = Differentiated(Spec("g = relu(c_fc)"));
  EXPECT_FALSE(*FuseLinearGelu().Run(&relu));
}

// After MixedPrecision (as the planner runs it): the fused node reads the
// linear's bf16 copies and writes bf16, as the two did.
TEST(FuseLinearGelu, UnderBf16ReadsTheCastsAndWritesBf16) {
  Graph g = Differentiated(Spec(kTanh), /*bf16=*/true);
  const Node* product = Product(g);
  ASSERT_NE(product, nullptr);
  const std::vector<int> inputs = product->inputs;
  ASSERT_TRUE(*FuseLinearGelu().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  const Node* fused = FirstNode(g, "linear_gelu");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->inputs, inputs);
  for (int in : fused->inputs) {
    EXPECT_EQ(g.value(in).dtype, DType::kBF16) << g.value(in).name;
  }
  for (int out : fused->outputs) {
    EXPECT_EQ(g.value(out).dtype, DType::kBF16) << g.value(out).name;
  }
}

// The planner runs the pass under fusion = true (the default), not under
// fusion = false.
TEST(FuseLinearGelu, ThePlannerFusesUnderFusionTrueOnly) {
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(fusion);
    TrainSpec spec = Spec(kTanh);
    spec.train.fusion = fusion;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int fused = 0, gelu = 0;
    for (const Instruction& in : plan->instructions) {
      fused += in.op == "linear_gelu";
      gelu += in.op == "gelu_tanh";
    }
    EXPECT_EQ(fused, fusion ? 1 : 0);
    EXPECT_EQ(gelu, fusion ? 0 : 1);
  }
}

}  // namespace
}  // namespace trainc
