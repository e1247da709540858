#include "compiler/graph/fuse_swiglu.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "compiler/graph/recompute.h"
#include "compiler/graph/testing/graph_test_util.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// Llama's MLP at toy sizes in a block; MLP (the statements making down
// from gate and up) and REPEAT are replaced per test.
constexpr char kModel[] = R"(
model m {
  input  tokens: i32[4]
  label  next:   i32[4]
  block mlp(x) {
    gate = linear(x, 12, bias = false)
    up   = linear(x, 12, bias = false)
    MLP
    return down
  }
  wte    = embedding(tokens, 16, 8)
  h      = REPEAT
  logits = linear(h, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

constexpr char kSwiGlu[] = "down = linear(silu(gate) * up, 8, bias = false)";

TrainSpec Spec(const std::string& mlp = kSwiGlu, const std::string& repeat = "repeat(mlp, 1, wte)") {
  return CompiledSpec(absl::StrReplaceAll(kModel, {{"MLP", mlp}, {"REPEAT", repeat}}));
}

// The gradient of the value named `name`.
int GradOf(const Graph& g, const std::string& name) {
  const int v = ValueNamed(g, name);
  for (const Value& grad : g.values()) {
    if (grad.grad_of == v && v >= 0) return grad.id;
  }
  return -1;
}

// Runs the pass; verifies the graph; whether it changed it.
bool Fuse(Graph* g) {
  absl::StatusOr<bool> changed = FuseSwiGlu().Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(g->Verify().ok()) << g->Verify();
  return changed.ok() && *changed;
}

TEST(FuseSwiGlu, TheFiveInstructionsBecomeTwo) {
  for (const char* mlp : {kSwiGlu, "down = linear(up * silu(gate), 8, bias = false)"}) {
    SCOPED_TRACE(mlp);
    Graph g = Differentiated(Spec(mlp));
    const size_t nodes = g.nodes().size();
    ASSERT_EQ(CountOps(g, "mul_grad"), 2) << g.ToText();
    const int gate = ValueNamed(g, "h.0.gate"), up = ValueNamed(g, "h.0.up");
    const Node* mul = FirstNode(g, "mul");
    ASSERT_NE(mul, nullptr);
    const int y = mul->outputs[0];
    const std::string y_name = g.value(y).name;
    const int dy = GradOf(g, y_name), dgate = GradOf(g, "h.0.gate"), dup = GradOf(g, "h.0.up");
    ASSERT_GE(dy, 0);
    ASSERT_TRUE(Fuse(&g));
    EXPECT_EQ(g.nodes().size(), nodes - 3);
    for (const char* op : {"silu", "mul", "mul_grad", "silu_grad"}) EXPECT_EQ(CountOps(g, op), 0);
    const Node* forward = FirstNode(g, "swiglu");
    ASSERT_NE(forward, nullptr) << g.ToText();
    EXPECT_EQ(forward->role, NodeRole::kForward);
    EXPECT_EQ(forward->inputs, (std::vector<int>{gate, up}));
    EXPECT_EQ(forward->outputs, (std::vector<int>{y}));
    EXPECT_EQ(forward->label, y_name + " = swiglu");
    const Node* backward = FirstNode(g, "swiglu_grad");
    ASSERT_NE(backward, nullptr);
    EXPECT_EQ(backward->role, NodeRole::kBackward);
    EXPECT_EQ(backward->inputs, (std::vector<int>{dy, gate, up}));
    EXPECT_EQ(backward->outputs, (std::vector<int>{dgate, dup}));
    EXPECT_EQ(backward->attrs.at("accumulate"), 0);
    EXPECT_EQ(backward->label, "grad/h.0.gate, grad/h.0.up = swiglu_grad");
    // Before the linears' gradients that read dgate and dup.
    for (int v : {dgate, dup}) {
      for (int reader : g.readers(v)) EXPECT_LT(backward->id, reader) << g.node(reader).label;
    }
    EXPECT_FALSE(Fuse(&g));  // nothing left to fuse
  }
}

// silu's output read by another node too: it must still be stored, and the
// five stay apart.
TEST(FuseSwiGlu, LeavesASiluOutputWithAnotherReader) {
  for (const char* mlp : {"s = silu(gate)\n    down = linear(s * up + s, 8, bias = false)",
                          "s = silu(gate)\n    d1 = linear(s * up, 8, bias = false)\n"
                          "    d2 = linear(s, 8, bias = false)\n    down = d1 + d2",
                          "s = silu(gate)\n    down = linear(s * up + s * gate, 8, bias = false)"}) {
    SCOPED_TRACE(mlp);
    Graph g = Differentiated(Spec(mlp));
    EXPECT_FALSE(Fuse(&g)) << g.ToText();
    EXPECT_EQ(CountOps(g, "silu"), 1);
    EXPECT_EQ(CountOps(g, "swiglu"), 0);
    EXPECT_EQ(CountOps(g, "swiglu_grad"), 0);
  }
}

// silu(gate) * gate: both gradients go to one value; and a relu, not a
// silu: nothing to fuse.
TEST(FuseSwiGlu, LeavesOtherProducts) {
  for (const char* mlp : {"down = linear(silu(gate) * gate, 8, bias = false)",
                          "down = linear(relu(gate) * up, 8, bias = false)",
                          "down = linear(silu(gate) + up, 8, bias = false)"}) {
    SCOPED_TRACE(mlp);
    Graph g = Differentiated(Spec(mlp));
    EXPECT_FALSE(Fuse(&g)) << g.ToText();
    EXPECT_EQ(CountOps(g, "swiglu"), 0);
  }
}

// up read by a second node too: its gradient has two writers. The fused
// node has one accumulate flag: where silu_grad writes dgate and mul_grad
// adds to dup, the five stay apart; where both add (gate read by a third
// node too), the fused node adds.
TEST(FuseSwiGlu, AccumulatesWhereBothGradientsDid) {
  Graph apart = Differentiated(Spec("down = linear(silu(gate) * up + up, 8, bias = false)"));
  ASSERT_EQ(apart.writers(GradOf(apart, "h.0.up")).size(), 2u);
  EXPECT_FALSE(Fuse(&apart)) << apart.ToText();
  Graph g = Differentiated(Spec("down = linear(silu(gate) * up + up + gate, 8, bias = false)"));
  const int dgate = GradOf(g, "h.0.gate"), dup = GradOf(g, "h.0.up");
  ASSERT_TRUE(Fuse(&g)) << g.ToText();
  const Node* backward = FirstNode(g, "swiglu_grad");
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->outputs, (std::vector<int>{dgate, dup}));
  EXPECT_EQ(backward->attrs.at("accumulate"), 1);
  // The first writes (the adds' copy_grad) come before it.
  for (int v : {dgate, dup}) EXPECT_LT(g.writers(v)[0], backward->id);
}

// Under bf16 every value of the pattern is bf16 (MixedPrecision): fused,
// the kernels round silu's output and ds as the unfused plan stored them.
TEST(FuseSwiGlu, Bf16PairsFuse) {
  Graph g = Differentiated(Spec(), /*bf16=*/true);
  const Node* silu = FirstNode(g, "silu");
  ASSERT_NE(silu, nullptr);
  EXPECT_EQ(g.value(silu->outputs[0]).dtype, DType::kBF16);
  ASSERT_TRUE(Fuse(&g));
  for (const char* op : {"swiglu", "swiglu_grad"}) {
    const Node* node = FirstNode(g, op);
    ASSERT_NE(node, nullptr) << op;
    for (int v : node->inputs) EXPECT_EQ(g.value(v).dtype, DType::kBF16) << g.value(v).name;
    for (int v : node->outputs) EXPECT_EQ(g.value(v).dtype, DType::kBF16) << g.value(v).name;
  }
}

// up the model's input, whose gradient is not needed: no mul_grad(dy, s),
// so the forward pair alone becomes swiglu; mul_grad(dy, x) and silu_grad
// stay.
TEST(FuseSwiGlu, FusesTheForwardAloneWithoutAGradientOfUp) {
  Graph g = Differentiated(CompiledSpec(R"(
model m {
  input  x: f32[8]
  label  y: i32[3]
  gate   = linear(x, 8)
  logits = linear(silu(gate) * x, 3)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)"));
  ASSERT_EQ(CountOps(g, "mul_grad"), 1) << g.ToText();
  ASSERT_TRUE(Fuse(&g));
  EXPECT_EQ(CountOps(g, "swiglu"), 1);
  EXPECT_EQ(CountOps(g, "silu"), 0);
  EXPECT_EQ(CountOps(g, "swiglu_grad"), 0);
  EXPECT_EQ(CountOps(g, "mul_grad"), 1);
  EXPECT_EQ(CountOps(g, "silu_grad"), 1);
}

// With the block recomputed, the backward's swiglu_grad reads the
// recomputed gate and up (Recompute runs after the fusion and copies the
// fused forward node).
TEST(FuseSwiGlu, RecomputeCopiesTheFusedNode) {
  TrainSpec spec = Spec(kSwiGlu, "repeat(mlp, 2, wte, recompute = true)");
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int forward = 0, recomputed = 0, grads = 0;
  for (const Instruction& in : plan->instructions) {
    EXPECT_NE(in.op, "silu") << in.label;
    EXPECT_NE(in.op, "silu_grad") << in.label;
    if (in.op == "swiglu") {
      (in.phase == Phase::kForward ? forward : recomputed) += 1;
    }
    if (in.op != "swiglu_grad") continue;
    ++grads;
    for (int j : {1, 2}) {
      EXPECT_NE(plan->buffers[in.inputs[j]].name.find(".recompute"), std::string::npos)
          << in.label << " reads " << plan->buffers[in.inputs[j]].name;
    }
  }
  EXPECT_EQ(forward, 2);
  EXPECT_EQ(recomputed, 2);
  EXPECT_EQ(grads, 2);
}

// The planner runs the pass under fusion = true (the default) only.
TEST(FuseSwiGlu, ThePlannerFusesUnderFusionTrueOnly) {
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(fusion);
    TrainSpec spec = Spec();
    spec.train.fusion = fusion;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int fused = 0, unfused = 0;
    for (const Instruction& in : plan->instructions) {
      fused += in.op == "swiglu" || in.op == "swiglu_grad";
      unfused += in.op == "silu" || in.op == "silu_grad" || in.op == "mul" || in.op == "mul_grad";
    }
    EXPECT_EQ(fused, fusion ? 2 : 0);
    EXPECT_EQ(unfused, fusion ? 0 : 5);
  }
}

}  // namespace
}  // namespace trainc
