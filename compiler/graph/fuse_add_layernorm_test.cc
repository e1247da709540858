#include "compiler/graph/fuse_add_layernorm.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "compiler/graph/recompute.h"
#include "compiler/graph/testing/graph_test_util.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// Two pre-norm blocks at toy sizes: each residual sum is read by a
// layernorm (ln_2, the next block's ln_1, ln_f) and by the next add.
// BLOCK (the block's body) and REPEAT are replaced per test.
constexpr char kModel[] = R"(
model m {
  input  tokens: i32[4]
  label  next:   i32[4]
  block layer(x) {
    BLOCK
  }
  wte    = embedding(tokens, 16, 8)
  h      = REPEAT
  ln_f   = layernorm(h)
  logits = linear(ln_f, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

constexpr char kPreNorm[] = R"(
    ln_1 = layernorm(x)
    attn = linear(ln_1, 8)
    r    = x + attn
    ln_2 = layernorm(r)
    mlp  = linear(ln_2, 8)
    return r + mlp)";

TrainSpec Spec(const std::string& block = kPreNorm,
               const std::string& repeat = "repeat(layer, 2, wte)") {
  return CompiledSpec(absl::StrReplaceAll(kModel, {{"BLOCK", block}, {"REPEAT", repeat}}));
}

TEST(FuseAddLayerNorm, EachResidualSumAndItsLayerNormBecomeOneInstruction) {
  Graph g = Differentiated(Spec());
  const size_t nodes = g.nodes().size();
  // h.0.r and ln_2 before: what the fused node must read and write.
  const Node* add = WriterOf(g, "h.0.r");
  const Node* norm = WriterOf(g, "h.0.ln_2");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(norm, nullptr);
  const std::vector<int> a_b = add->inputs;
  const int sum = add->outputs[0];
  const std::vector<int> norm_inputs = norm->inputs, norm_outputs = norm->outputs;

  absl::StatusOr<bool> changed = FuseAddLayerNorm().Run(&g);
  ASSERT_TRUE(changed.ok() && *changed);
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  // h.0.r + ln_2, h.0's output + h.1.ln_1, h.1.r + ln_2, h.1's output +
  // ln_f; h.0.ln_1 reads the embedding, not a sum.
  EXPECT_EQ(g.nodes().size(), nodes - 4);
  EXPECT_EQ(CountOps(g, "add_layernorm"), 4);
  EXPECT_EQ(CountOps(g, "add"), 0);
  EXPECT_EQ(CountOps(g, "layernorm"), 1);
  const Node* fused = WriterOf(g, "h.0.r");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->op, "add_layernorm");
  EXPECT_EQ(fused->role, NodeRole::kForward);
  EXPECT_EQ(fused->inputs, (std::vector<int>{a_b[0], a_b[1], norm_inputs[1], norm_inputs[2]}));
  EXPECT_EQ(fused->outputs,
            (std::vector<int>{sum, norm_outputs[0], norm_outputs[1], norm_outputs[2]}));
  EXPECT_EQ(fused->attrs.at("eps"), 1e-5);
  EXPECT_EQ(fused->label, "h.0.r, h.0.ln_2 = add_layernorm");
  EXPECT_EQ(WriterOf(g, "h.1.ln_1")->label, "h.0.return.0, h.1.ln_1 = add_layernorm");
  EXPECT_EQ(WriterOf(g, "ln_f")->label, "h.1.return.0, ln_f = add_layernorm");
  // The backward reads the sum (the layernorm's x), mean and rstd as
  // before, and the next add reads the sum.
  int grads = 0;
  for (const Node& node : g.nodes()) {
    if (node.op != "layernorm_grad_input" && node.op != "layernorm_grad_params") continue;
    if (node.inputs[1] != sum) continue;
    ++grads;
    EXPECT_EQ(node.inputs.back(), norm_outputs[2]) << node.label;
    EXPECT_LT(fused->id, node.id);
  }
  EXPECT_EQ(grads, 2);
  EXPECT_EQ(WriterOf(g, "h.0.return.0")->inputs[0], sum);
  EXPECT_FALSE(*FuseAddLayerNorm().Run(&g));  // nothing left to fuse
}

TEST(FuseAddLayerNorm, LeavesASumWithoutOneLayerNorm) {
  // Two layernorms of one sum: which would it take? Neither.
  Graph two = Differentiated(Spec(R"(
    r  = x + linear(x, 8)
    n1 = layernorm(r)
    n2 = layernorm(r)
    return n1 + n2)", "repeat(layer, 1, wte)"));
  EXPECT_TRUE(*FuseAddLayerNorm().Run(&two));  // only the block output and ln_f
  ASSERT_NE(WriterOf(two, "h.0.r"), nullptr);
  EXPECT_EQ(WriterOf(two, "h.0.r")->op, "add");
  EXPECT_EQ(CountOps(two, "layernorm"), 2);
  EXPECT_EQ(CountOps(two, "add_layernorm"), 1);
  // A sum read by no layernorm (relu, then the model's ln_f of another
  // value): nothing to fuse.
  Graph none = Differentiated(Spec(R"(
    r = x + linear(x, 8)
    return relu(r))", "repeat(layer, 1, wte)"));
  EXPECT_FALSE(*FuseAddLayerNorm().Run(&none));
  // RMSNorm is not LayerNorm.
  Graph rms = Differentiated(Spec(R"(
    r = x + linear(x, 8)
    return rmsnorm(r))", "repeat(layer, 1, wte)"));
  EXPECT_EQ(CountOps(rms, "rmsnorm"), 1);
  FuseAddLayerNorm().Run(&rms).IgnoreError();
  EXPECT_EQ(CountOps(rms, "rmsnorm"), 1);
  EXPECT_EQ(WriterOf(rms, "h.0.r")->op, "add");
}

// Under bf16 the fused node keeps every value's dtype: the residual sum
// of an f32 stream and a bf16 linear is f32, and a sum of two bf16
// linears is bf16 (rounded before it is normalized); y, mean, rstd f32.
TEST(FuseAddLayerNorm, UnderBf16KeepsTheDtypes) {
  Graph g = Differentiated(Spec(R"(
    p = linear(x, 8)
    q = linear(x, 8)
    s = p + q
    ln = layernorm(s)
    r = x + linear(ln, 8)
    return layernorm(r))", "repeat(layer, 1, wte)"), /*bf16=*/true);
  ASSERT_TRUE(*FuseAddLayerNorm().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  const Node* both_bf16 = WriterOf(g, "h.0.s");
  const Node* residual = WriterOf(g, "h.0.r");
  ASSERT_NE(both_bf16, nullptr);
  ASSERT_NE(residual, nullptr);
  for (const Node* fused : {both_bf16, residual}) {
    ASSERT_EQ(fused->op, "add_layernorm") << fused->label;
    for (size_t j = 1; j < 4; ++j) {
      EXPECT_EQ(g.value(fused->outputs[j]).dtype, DType::kF32) << fused->label << " " << j;
    }
  }
  EXPECT_EQ(g.value(both_bf16->outputs[0]).dtype, DType::kBF16);
  EXPECT_EQ(g.value(both_bf16->inputs[0]).dtype, DType::kBF16);
  EXPECT_EQ(g.value(residual->outputs[0]).dtype, DType::kF32);
  EXPECT_EQ(g.value(residual->inputs[0]).dtype, DType::kF32);
  EXPECT_EQ(g.value(residual->inputs[1]).dtype, DType::kBF16);
}

// After Recompute (as the planner runs it): the forward pairs fuse, and so
// do the recomputed copies of h.i.r and ln_2; the recomputed ln_1 of h.1
// stays a layernorm reading h.0's output, its checkpoint.
TEST(FuseAddLayerNorm, AfterRecomputeFusesTheCopiesInsideABlock) {
  const TrainSpec spec = Spec(kPreNorm, "repeat(layer, 2, wte, recompute = true)");
  Graph g = Differentiated(spec);
  ASSERT_TRUE(*Recompute(spec.model.recompute_blocks).Run(&g));
  const Node* copy = WriterOf(g, "h.1.ln_1.recompute");
  ASSERT_NE(copy, nullptr);
  const int checkpoint = copy->inputs[0];
  ASSERT_TRUE(*FuseAddLayerNorm().Run(&g));
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  int forward = 0, recomputed = 0;
  for (const Node& node : g.nodes()) {
    if (node.op != "add_layernorm") continue;
    (node.role == NodeRole::kForward ? forward : recomputed)++;
    EXPECT_EQ(absl::EndsWith(node.label, " (recompute)"), node.role == NodeRole::kBackward)
        << node.label;
  }
  EXPECT_EQ(forward, 4);
  EXPECT_EQ(recomputed, 2);  // h.0 and h.1: r and ln_2
  EXPECT_EQ(WriterOf(g, "h.1.r.recompute")->label, "h.1.r, h.1.ln_2 = add_layernorm (recompute)");
  copy = WriterOf(g, "h.1.ln_1.recompute");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->op, "layernorm");
  EXPECT_EQ(copy->inputs[0], checkpoint);
  EXPECT_EQ(g.value(checkpoint).name, "h.0.return.0");
}

// The planner runs the pass under fusion = true (the default), not under
// fusion = false.
TEST(FuseAddLayerNorm, ThePlannerFusesUnderFusionTrueOnly) {
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(fusion);
    TrainSpec spec = Spec();
    spec.train.fusion = fusion;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int fused = 0, add = 0, norm = 0, in_place = 0;
    for (const Instruction& in : plan->instructions) {
      fused += in.op == "add_layernorm";
      add += in.op == "add";
      norm += in.op == "layernorm";
      // y over b (OpDef::in_place) where the fused node is b's last
      // reader: every sum's b is a linear's output read by nothing else.
      if (in.op == "add_layernorm") {
        in_place += plan->buffers[in.outputs[1]].offset == plan->buffers[in.inputs[1]].offset;
      }
    }
    EXPECT_EQ(fused, fusion ? 4 : 0);
    EXPECT_EQ(add, fusion ? 0 : 4);
    EXPECT_EQ(norm, fusion ? 1 : 5);
    EXPECT_EQ(in_place, fusion ? 4 : 0);  // (BuildPlan validated the pairs)
  }
}

}  // namespace
}  // namespace trainc
