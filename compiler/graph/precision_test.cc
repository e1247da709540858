#include "compiler/graph/precision.h"

#include <memory>
#include <string>

#include "compiler/autodiff/autodiff.h"
#include "compiler/graph/dce.h"
#include "compiler/frontend/frontend.h"
#include "compiler/graph/lower.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// The spec's graph of one micro-step, differentiated, then `passes` runs
// of MixedPrecision.
Graph MixedGraph(const TrainSpec& spec, int passes = 1) {
  absl::StatusOr<Graph> g = LowerModel(spec.model, spec.train.micro_batch);
  EXPECT_TRUE(g.ok()) << g.status();
  PassPipeline pipeline("test");
  pipeline.Add(std::make_unique<DeadCodeElimination>());
  pipeline.Add(std::make_unique<Autodiff>(1.0));
  for (int i = 0; i < passes; ++i) pipeline.Add(std::make_unique<MixedPrecision>());
  absl::StatusOr<bool> ran = pipeline.Run(&*g);
  EXPECT_TRUE(ran.ok()) << ran.status();
  return std::move(*g);
}

const Value& ValueNamed(const Graph& g, const std::string& name) {
  for (const Value& v : g.values()) {
    if (v.name == name) return v;
  }
  ADD_FAILURE() << "no value " << name << " in\n" << g.ToText();
  static const Value none;
  return none;
}

const Node* NodeWithOp(const Graph& g, const std::string& op, int nth = 0) {
  for (const Node& n : g.nodes()) {
    if (n.op == op && nth-- == 0) return &n;
  }
  return nullptr;
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(MixedPrecision, MlpProductsReadBf16CopiesAndKeepF32Masters) {
  const Graph g = MixedGraph(testing::MlpSpec(6, {5}, 3, 1, 4, 1));
  // Products and the activations after them are bf16; the loss is f32.
  EXPECT_EQ(ValueNamed(g, "h1.0").dtype, DType::kBF16) << g.ToText();
  EXPECT_EQ(ValueNamed(g, "h1").dtype, DType::kBF16);  // relu follows
  EXPECT_EQ(ValueNamed(g, "logits").dtype, DType::kBF16);
  EXPECT_EQ(ValueNamed(g, "loss").dtype, DType::kF32);
  EXPECT_EQ(ValueNamed(g, "loss/probs").dtype, DType::kF32);  // the loss's own
  // Masters and their gradients stay f32; each gets one bf16 copy.
  for (const char* p : {"h1.weight", "h1.bias", "logits.weight", "logits.bias"}) {
    EXPECT_EQ(ValueNamed(g, p).dtype, DType::kF32) << p;
    EXPECT_EQ(ValueNamed(g, std::string("grad/") + p).dtype, DType::kF32) << p;
    EXPECT_EQ(ValueNamed(g, std::string(p) + ".bf16").dtype, DType::kBF16) << p;
  }
  // Casts: the input and the four parameters. The loss gradient has its
  // value's dtype (cross_entropy_grad rounds it), so needs none.
  EXPECT_EQ(Count(g, "cast"), 5) << g.ToText();
  EXPECT_EQ(ValueNamed(g, "grad/logits").dtype, DType::kBF16);
  // The first linear's weight gradient reads the bf16 copy of the input
  // that the forward product read (saved once, in bf16).
  const Node* first = NodeWithOp(g, "linear");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(g.value(first->inputs[0]).name, "x.bf16");
  const Node* grad_params = NodeWithOp(g, "linear_grad_params", 1);
  ASSERT_NE(grad_params, nullptr);
  EXPECT_EQ(grad_params->inputs[1], first->inputs[0]);
  // Every product reads bf16 only.
  for (const Node& n : g.nodes()) {
    if (ops::PrecisionOf(*ops::FindOp(n.op)) != ops::Precision::kLowPrecision) continue;
    for (int in : n.inputs) EXPECT_EQ(g.value(in).dtype, DType::kBF16) << n.label;
  }
}

TEST(MixedPrecision, NormalizationIsF32AndMixedOperandsPromote) {
  // h = linear(x) (bf16); r = layernorm(h) (f32); g = gelu(linear(r))
  // (bf16); s = add(h, g) (bf16 + bf16: bf16).
  const Graph g = MixedGraph(testing::ResidualSpec(5, 4, 3, 1, 2, 1));
  EXPECT_EQ(ValueNamed(g, "r").dtype, DType::kF32) << g.ToText();
  EXPECT_EQ(ValueNamed(g, "r/mean").dtype, DType::kF32);
  EXPECT_EQ(ValueNamed(g, "r.bf16").dtype, DType::kBF16);
  EXPECT_EQ(ValueNamed(g, "s").dtype, DType::kBF16);
  EXPECT_EQ(ValueNamed(g, "grad/r").dtype, DType::kF32);
  EXPECT_EQ(ValueNamed(g, "grad/h").dtype, DType::kBF16);

  testing::SpecBuilder b("promote");
  b.Input("x", {4});
  b.Label("y", ElementType::kI32, {3});
  b.Linear("h", "x", 4);
  b.LayerNorm("n", "h");
  b.Add("s", "n", "h");  // f32 + bf16
  b.Linear("logits", "s", 3);
  b.CrossEntropy("loss", "logits", "y");
  const Graph p = MixedGraph(b.Build(1, 2, 1));
  EXPECT_EQ(ValueNamed(p, "s").dtype, DType::kF32) << p.ToText();
  EXPECT_EQ(ValueNamed(p, "grad/s").dtype, DType::kF32);
  EXPECT_EQ(ValueNamed(p, "grad/h").dtype, DType::kBF16);
  EXPECT_EQ(ValueNamed(p, "s.bf16").dtype, DType::kBF16);
}

// Attention's log-sum-exp stays f32 (OpDef::f32_outputs): bf16's 8 bits
// would shift every probability the backward recomputes from it. Its
// gradient op reads that f32 value, not a bf16 copy.
TEST(MixedPrecision, AttentionKeepsItsLogSumExpInF32) {
  const FrontendResult r = CompileSource(R"(
model m {
  input  tokens: i32[8]
  label  next:   i32[8]
  wte    = embedding(tokens, 16, 8)
  qkv    = linear(wte, 16)
  att    = causal_attention(qkv, 2, kv_heads = 1, rope = true)
  logits = linear(att, 16)
  loss   = cross_entropy(logits, next)
}
data { train = text("none.txt") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)",
                                         "m.train", {}, {/*read_data=*/false});
  ASSERT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  const Graph g = MixedGraph(*r.spec);
  EXPECT_EQ(ValueNamed(g, "att").dtype, DType::kBF16) << g.ToText();
  EXPECT_EQ(ValueNamed(g, "att/lse").dtype, DType::kF32);
  const Node* grad = NodeWithOp(g, "attention_grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(g.value(grad->inputs[3]).name, "att/lse") << g.ToText();
  EXPECT_EQ(g.value(grad->inputs[1]).dtype, DType::kBF16);  // qkv, as the forward read it
}

TEST(MixedPrecision, RunningTwiceChangesNothingMore) {
  const TrainSpec spec = testing::ResidualSpec(5, 4, 3, 1, 2, 1);
  const Graph once = MixedGraph(spec, 1);
  const Graph twice = MixedGraph(spec, 2);
  EXPECT_EQ(once.ToText(), twice.ToText());
}

}  // namespace
}  // namespace trainc
