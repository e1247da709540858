#include "compiler/ops/op_table.h"

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "gtest/gtest.h"

namespace trainc::ops {
namespace {

TEST(OpTable, NamesAreUnique) {
  std::set<std::string> names;
  for (const OpDef& op : AllOps()) {
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
  }
  std::set<std::string> model_names;
  for (const ModelOpDef& op : AllModelOps()) {
    EXPECT_TRUE(model_names.insert(op.name).second) << op.name;
  }
}

// Every ModelOp has its definition, at its place, found by its name.
TEST(OpTable, EveryModelOpIsDefined) {
  const std::vector<ModelOpDef>& defs = AllModelOps();
  for (size_t i = 0; i < defs.size(); ++i) {
    const ModelOp op = static_cast<ModelOp>(i);
    EXPECT_EQ(defs[i].op, op) << ModelOpName(op);
    EXPECT_NE(defs[i].rule, nullptr) << ModelOpName(op) << " has no definition";
    EXPECT_EQ(FindModelOp(ModelOpName(op)), &DefOf(op)) << ModelOpName(op);
  }
  EXPECT_EQ(ModelOpName(ModelOp::kCausalAttention), std::string("causal_attention"));
  EXPECT_EQ(FindModelOp("conv"), nullptr);
}

// Every gradient rule names a backward op whose operand counts fit the rule.
TEST(OpTable, GradientRulesAreWellFormed) {
  for (const OpDef& op : AllOps()) {
    for (const GradRule& rule : op.grads) {
      const OpDef* grad = FindOp(rule.op);
      ASSERT_NE(grad, nullptr) << op.name << " -> " << rule.op;
      const int n = static_cast<int>(rule.operands.size());
      EXPECT_GE(n, grad->min_inputs) << rule.op;
      EXPECT_TRUE(grad->max_inputs < 0 || n <= grad->max_inputs) << rule.op;
      const int outputs = static_cast<int>(rule.targets.size()) +
                          (rule.workspace_like >= 0 ? 1 : 0);
      EXPECT_TRUE(grad->max_outputs < 0 || outputs <= grad->max_outputs)
          << rule.op;
      for (const Operand& o : rule.operands) {
        if (o.kind == Operand::Kind::kInput) {
          EXPECT_LT(o.index, op.max_inputs) << op.name;
        }
        if (o.kind == Operand::Kind::kOutput) {
          EXPECT_LT(o.index, op.max_outputs) << op.name;
        }
      }
      for (int t : rule.targets) {
        EXPECT_LT(t, op.max_inputs) << op.name;
        for (int c : op.constant_inputs) EXPECT_NE(t, c) << op.name;
      }
      EXPECT_TRUE(grad->grads.empty()) << rule.op << ": no second order";
    }
    if (op.is_loss && !op.fused) {
      EXPECT_FALSE(op.grads.empty()) << op.name;
    }
  }
}

OpCall Call(std::vector<Shape> values, std::map<std::string, ArgValue> c) {
  OpCall call;
  call.values = std::move(values);
  call.constants = std::move(c);
  return call;
}
ArgValue Int(int64_t v) { return ArgValue::Int(v); }
ArgValue Bool(bool v) { return ArgValue::Bool(v); }

TEST(OpTable, LinearActsOnTheLastAxisWithPyTorchLayout) {
  auto r = FindModelOp("linear")->rule(
      Call({{128, 64}}, {{"out_features", Int(32)}, {"bias", Bool(true)}}));
  ASSERT_TRUE(std::holds_alternative<Lowering>(r));
  const Lowering& l = std::get<Lowering>(r);
  EXPECT_EQ(l.instruction, "linear");
  EXPECT_EQ(l.shape, (Shape{128, 32}));
  ASSERT_EQ(l.params.size(), 2u);
  EXPECT_EQ(l.params[0].suffix, "weight");
  EXPECT_EQ(l.params[0].shape, (Shape{32, 64}));
  EXPECT_EQ(l.params[1].shape, (Shape{32}));
}

TEST(OpTable, TiedWeightMustMatch) {
  OpCall call = Call({{128, 64}}, {{"out_features", Int(256)}, {"bias", Bool(false)}});
  call.shared_parameters["weight"] = {256, 64};
  auto ok = FindModelOp("linear")->rule(call);
  ASSERT_TRUE(std::holds_alternative<Lowering>(ok));
  EXPECT_EQ(std::get<Lowering>(ok).params.size(), 1u);
  EXPECT_EQ(std::get<Lowering>(ok).params[0].shared_arg, "weight");
  call.shared_parameters["weight"] = {64, 256};
  auto bad = FindModelOp("linear")->rule(call);
  ASSERT_TRUE(std::holds_alternative<ShapeError>(bad));
  EXPECT_NE(std::get<ShapeError>(bad).message.find("[256, 64]"),
            std::string::npos);
}

OpCall AttentionCall(Shape qkv, int64_t heads, int64_t kv_heads, bool rope = false) {
  return Call({qkv}, {{"heads", Int(heads)},
                      {"kv_heads", Int(kv_heads)},
                      {"rope", Bool(rope)},
                      {"rope_theta", ArgValue::Float(10000)}});
}

TEST(OpTable, AttentionChecksHeadsDivideTheWidth) {
  auto ok = FindModelOp("causal_attention")->rule(AttentionCall({16, 3 * 24}, 4, 0));
  ASSERT_TRUE(std::holds_alternative<Lowering>(ok));
  EXPECT_EQ(std::get<Lowering>(ok).shape, (Shape{16, 24}));
  // What the backward needs besides y: one log-sum-exp per row, never [T, T].
  EXPECT_EQ(std::get<Lowering>(ok).saved[0].suffix, "lse");
  EXPECT_EQ(std::get<Lowering>(ok).saved[0].shape, (Shape{4, 16}));
  auto bad = FindModelOp("causal_attention")->rule(AttentionCall({16, 3 * 24}, 5, 0));
  ASSERT_TRUE(std::holds_alternative<ShapeError>(bad));
  EXPECT_EQ(std::get<ShapeError>(bad).arg, 1);  // heads
  // Not three equal parts at all: the layout is wrong, named at qkv.
  auto parts = FindModelOp("causal_attention")->rule(AttentionCall({16, 3 * 24 + 1}, 4, 0));
  ASSERT_TRUE(std::holds_alternative<ShapeError>(parts));
  EXPECT_EQ(std::get<ShapeError>(parts).arg, 0);
  EXPECT_NE(std::get<ShapeError>(parts).message.find("[T, 12 d]"), std::string::npos)
      << std::get<ShapeError>(parts).message;
}

TEST(OpTable, GroupedQueryAttentionAndRope) {
  // 8 query heads of 32 and 2 key/value heads: q|k|v is (8 + 4) 32 wide.
  auto ok = FindModelOp("causal_attention")->rule(AttentionCall({64, 12 * 32}, 8, 2, true));
  ASSERT_TRUE(std::holds_alternative<Lowering>(ok));
  const Lowering& l = std::get<Lowering>(ok);
  EXPECT_EQ(l.shape, (Shape{64, 256}));
  EXPECT_EQ(l.attrs.at("kv_heads"), 2);
  EXPECT_EQ(l.attrs.at("rope"), 1);
  EXPECT_EQ(l.attrs.at("rope_theta"), 10000);
  // kv_heads must divide heads; rope needs an even head size.
  auto groups = FindModelOp("causal_attention")->rule(AttentionCall({64, 11 * 32}, 8, 3));
  ASSERT_TRUE(std::holds_alternative<ShapeError>(groups));
  EXPECT_EQ(std::get<ShapeError>(groups).arg, 2);
  auto odd = FindModelOp("causal_attention")->rule(AttentionCall({64, 6 * 3}, 2, 2, true));
  ASSERT_TRUE(std::holds_alternative<ShapeError>(odd));
  EXPECT_EQ(std::get<ShapeError>(odd).arg, 3);
}

TEST(OpTable, CrossEntropyCountsOneTermPerToken) {
  auto r = FindModelOp("cross_entropy")->rule(Call({{64, 256}, {64}}, {}));
  ASSERT_TRUE(std::holds_alternative<Lowering>(r));
  EXPECT_EQ(std::get<Lowering>(r).loss_terms, 64);
  auto v1 = FindModelOp("cross_entropy")->rule(Call({{10}, {}}, {}));
  EXPECT_EQ(std::get<Lowering>(v1).loss_terms, 1);
}

TEST(OpTable, EveryModelOpLowersToAKnownInstruction) {
  for (const ModelOpDef& def : AllModelOps()) {
    EXPECT_NE(def.summary, nullptr);
    EXPECT_FALSE(def.Signature().empty());
  }
  for (const char* name : {"linear", "relu", "gelu", "gelu_tanh", "tanh",
                           "softmax", "layernorm", "add", "embedding",
                           "position_embedding", "attention", "cross_entropy",
                           "mse"}) {
    EXPECT_NE(FindOp(name), nullptr) << name;
  }
}

TEST(OpTable, DefaultsParse) {
  const ModelOpDef& ln = *FindModelOp("layernorm");
  EXPECT_EQ(DefaultValue(ln.args[1])->f, 1e-5);
  const ModelOpDef& gelu = *FindModelOp("gelu");
  EXPECT_EQ(DefaultValue(gelu.args[1])->s, "none");
  EXPECT_TRUE(DefaultValue(FindModelOp("linear")->args[2])->b);
  EXPECT_FALSE(DefaultValue(FindModelOp("linear")->args[0]).has_value());
}

TEST(OpTable, CostOfALinearIsTwiceTheMultiplyAdds) {
  const Cost c = EstimateCost(*FindOp("linear"), {{8, 4}, {3, 4}, {3}}, {{8, 3}});
  EXPECT_EQ(c.flops, 2.0 * 8 * 4 * 3);
  EXPECT_EQ(c.bytes, 4.0 * (32 + 12 + 3 + 24));
}

}  // namespace
}  // namespace trainc::ops
