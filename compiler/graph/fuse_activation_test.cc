#include "compiler/graph/fuse_activation.h"

#include <string>
#include <vector>

#include "compiler/graph/testing/graph_test_util.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// A small model over a [2, 6, 6] image x; BODY is replaced per test: it
// defines h, a vector, from x (f = flatten(x) is there for the MLPs).
constexpr char kModel[] = R"(
model m {
  input  x: f32[2, 6, 6]
  label  y: i32[3]
  f      = flatten(x)
  BODY
  logits = linear(h, 3)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

TrainSpec Spec(const std::string& body) {
  std::string source = kModel;
  source.replace(source.find("BODY"), 4, body);
  return CompiledSpec(source);
}

// Runs `pass` over the model's differentiated graph (under bf16 after
// MixedPrecision, as the planner does); verifies it.
template <typename Pass>
Graph Fused(const std::string& body, bool bf16 = false, bool* changed = nullptr) {
  Graph g = Differentiated(Spec(body), bf16);
  absl::StatusOr<bool> ran = Pass().Run(&g);
  EXPECT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(g.Verify().ok()) << g.Verify();
  if (changed != nullptr) *changed = ran.ok() && *ran;
  return g;
}

TEST(FuseLinearActivation, ReluAndTanhDropPreWhichNothingElseReads) {
  for (const char* act : {"relu", "tanh"}) {
    SCOPED_TRACE(act);
    Graph before = Differentiated(Spec(std::string("p = linear(f, 5)\n  h = ") + act + "(p)"));
    const Node* linear = WriterOf(before, "p");
    ASSERT_NE(linear, nullptr);
    const std::vector<int> inputs = linear->inputs;
    const size_t nodes = before.nodes().size();
    Graph g = Fused<FuseLinearActivation>(std::string("p = linear(f, 5)\n  h = ") + act + "(p)");
    EXPECT_EQ(g.nodes().size(), nodes - 1);
    EXPECT_EQ(CountOps(g, act), 0);
    const Node* fused = FirstNode(g, std::string("linear_") + act);
    ASSERT_NE(fused, nullptr) << g.ToText();
    EXPECT_EQ(fused->role, NodeRole::kForward);
    EXPECT_EQ(fused->inputs, inputs);  // x, w, b
    // y alone: the activation's gradient reads y, not pre.
    EXPECT_EQ(fused->outputs, (std::vector<int>{ValueNamed(g, "h")}));
    EXPECT_EQ(fused->label, std::string("h = linear_") + act);
    EXPECT_TRUE(g.readers(ValueNamed(g, "p")).empty());
    EXPECT_FALSE(*FuseLinearActivation().Run(&g));  // nothing left to fuse
  }
}

TEST(FuseLinearActivation, GeluKeepsPreForItsGradient) {
  Graph g = Fused<FuseLinearActivation>("p = linear(f, 5)\n  h = gelu(p)");
  const Node* fused = FirstNode(g, "linear_gelu_erf");
  ASSERT_NE(fused, nullptr) << g.ToText();
  const int pre = ValueNamed(g, "p");
  EXPECT_EQ(fused->outputs, (std::vector<int>{pre, ValueNamed(g, "h")}));
  EXPECT_EQ(fused->label, "p, h = linear_gelu_erf");
  const Node* grad = FirstNode(g, "gelu_grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(grad->inputs[1], pre);
  // The tanh form is FuseLinearGelu's.
  bool changed = true;
  Fused<FuseLinearActivation>("p = linear(f, 5)\n  h = gelu(p, approximate = \"tanh\")", false,
                              &changed);
  EXPECT_FALSE(changed);
}

// pre read elsewhere (the add): fused, pre kept as the first output.
TEST(FuseLinearActivation, KeepsPreThatAnotherNodeReads) {
  Graph g = Fused<FuseLinearActivation>("p = linear(f, 5)\n  h = relu(p) + p");
  const Node* fused = FirstNode(g, "linear_relu");
  ASSERT_NE(fused, nullptr) << g.ToText();
  EXPECT_EQ(fused->outputs, (std::vector<int>{ValueNamed(g, "p"), fused->outputs[1]}));
  EXPECT_EQ(CountOps(g, "relu"), 0);
}

// Under bf16 the activation reads the rounded output: nothing is fused.
TEST(FuseLinearActivation, LeavesBf16PairsApart) {
  for (const char* body : {"p = linear(f, 5)\n  h = relu(p)",
                           "c = relu(conv2d(x, 4, kernel = 3, padding = 1))\n  h = flatten(c)"}) {
    SCOPED_TRACE(body);
    bool linear = true, conv = true;
    Graph g = Fused<FuseLinearActivation>(body, /*bf16=*/true, &linear);
    EXPECT_FALSE(linear) << g.ToText();
    Fused<FuseConvRelu>(body, /*bf16=*/true, &conv);
    EXPECT_FALSE(conv);
  }
}

// Not the activation of the linear's output: another op between them.
TEST(FuseLinearActivation, LeavesAnActivationOfAnotherValue) {
  bool changed = true;
  Fused<FuseLinearActivation>("p = linear(f, 5)\n  h = relu(p * p)", false, &changed);
  EXPECT_FALSE(changed);
}

TEST(FuseConvRelu, TheConvolutionWritesTheRelu) {
  Graph before = Differentiated(Spec("c = conv2d(x, 4, kernel = 3, padding = 1)\n  r = relu(c)\n  h = flatten(r)"));
  const Node* conv = FirstNode(before, "conv2d");
  ASSERT_NE(conv, nullptr);
  const std::vector<int> inputs = conv->inputs;
  const int workspace = conv->outputs[1];
  Graph g = Fused<FuseConvRelu>("c = conv2d(x, 4, kernel = 3, padding = 1)\n  r = relu(c)\n  h = flatten(r)");
  const Node* fused = FirstNode(g, "conv2d_relu");
  ASSERT_NE(fused, nullptr) << g.ToText();
  EXPECT_EQ(fused->inputs, inputs);
  EXPECT_EQ(fused->outputs, (std::vector<int>{ValueNamed(g, "r"), workspace}));
  EXPECT_EQ(fused->label, "r = conv2d_relu");
  EXPECT_EQ(CountOps(g, "relu"), 0);
  EXPECT_EQ(CountOps(g, "conv2d"), 0);
}

// The convolution's output read elsewhere: oneDNN's post-op would not
// write it, so the two stay apart.
TEST(FuseConvRelu, LeavesAConvolutionWhoseOutputHasAnotherReader) {
  bool changed = true;
  Graph g = Fused<FuseConvRelu>(
      "c = conv2d(x, 4, kernel = 3, padding = 1)\n  r = relu(c) + c\n  h = flatten(r)", false, &changed);
  EXPECT_FALSE(changed);
  EXPECT_EQ(CountOps(g, "relu"), 1);
}

// The plan: fused ops under fusion = true only, and each fused
// instruction's outputs apart from its inputs in the arena (the kernel
// writes y while it reads x, w and b), also under ZeRO-3, whose gathered
// weights and biases are dynamic buffers with events around their readers.
TEST(FuseActivation, ThePlanHoldsTheFusedOpsUnderFusionTrueOnly) {
  const std::string body = "c = relu(conv2d(x, 4, kernel = 3, padding = 1))\n"
                           "  h = relu(linear(flatten(c), 5))";
  for (bool fusion : {true, false}) {
    for (int zero : {0, 3}) {
      SCOPED_TRACE(::testing::Message() << "fusion " << fusion << " zero " << zero);
      TrainSpec spec = Spec(body);
      spec.train.fusion = fusion;
      if (zero > 0) {
        spec.train.gpus = 2;
        spec.train.global_batch = 4;
        spec.train.zero = zero;
      }
      absl::StatusOr<Plan> plan = BuildPlan(spec);
      ASSERT_TRUE(plan.ok()) << plan.status();
      int fused = 0, activations = 0;
      for (const Instruction& in : plan->instructions) {
        activations += in.op == "relu";
        if (in.op != "linear_relu" && in.op != "conv2d_relu") continue;
        ++fused;
        for (int out : in.outputs) {
          const Buffer& y = plan->buffers[out];
          for (int id : in.inputs) {
            const Buffer& b = plan->buffers[id];
            EXPECT_TRUE(b.offset + b.bytes <= y.offset || y.offset + y.bytes <= b.offset)
                << in.label << ": " << y.name << " overlaps " << b.name;
          }
        }
      }
      EXPECT_EQ(fused, fusion ? 2 : 0);
      EXPECT_EQ(activations, fusion ? 0 : 2);
    }
  }
}

}  // namespace
}  // namespace trainc
