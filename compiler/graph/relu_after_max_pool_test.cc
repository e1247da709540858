#include "compiler/graph/relu_after_max_pool.h"

#include <memory>
#include <string>
#include <vector>

#include "compiler/autodiff/autodiff.h"
#include "compiler/graph/lower.h"
#include "compiler/graph/testing/graph_test_util.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// A model over a [2, 8, 8] image x; BODY defines p, an image, from x.
constexpr char kModel[] = R"(
model m {
  input  x: f32[2, 8, 8]
  label  y: i32[3]
  BODY
  logits = linear(flatten(p), 3)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 2  steps = 1 }
)";

// The model's forward graph with `body`, after the pass (verified).
Graph Swapped(const std::string& body, bool* changed) {
  std::string source = kModel;
  source.replace(source.find("BODY"), 4, body);
  absl::StatusOr<Graph> g = LowerModel(CompiledSpec(source).model, 2);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Graph();
  absl::StatusOr<bool> ran = ReluAfterMaxPool().Run(&*g);
  EXPECT_TRUE(ran.ok()) << ran.status();
  *changed = ran.ok() && *ran;
  EXPECT_TRUE(g->Verify().ok()) << g->Verify();
  return std::move(*g);
}

int IndexOf(const Graph& g, const std::string& op) {
  const Node* node = FirstNode(g, op);
  return node == nullptr ? -1 : node->id;
}

TEST(ReluAfterMaxPool, PoolsFirstThenRectifiesThePooledImage) {
  bool changed = false;
  Graph g = Swapped("c = conv2d(x, 4, kernel = 3, padding = 1)\n  p = max_pool2d(relu(c), 2)",
                    &changed);
  ASSERT_TRUE(changed);
  const Node* pool = FirstNode(g, "max_pool2d");
  const Node* relu = FirstNode(g, "relu");
  ASSERT_NE(pool, nullptr);
  ASSERT_NE(relu, nullptr);
  EXPECT_LT(pool->id, relu->id);
  EXPECT_EQ(g.value(pool->inputs[0]).name, "c");
  EXPECT_EQ(relu->inputs, std::vector<int>{pool->outputs[0]});
  const Value& pre = g.value(pool->outputs[0]);
  const Value& p = g.value(relu->outputs[0]);
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(pre.name, "p.pre");
  EXPECT_EQ(pre.shape, (std::vector<int64_t>{2, 4, 4, 4}));
  EXPECT_EQ(pool->label, "p.pre = max_pool2d");
  EXPECT_EQ(relu->label, "p = relu");
  // The backward follows: relu_grad over the pooled image, then the
  // pooling's gradient into the convolution's output.
  ASSERT_TRUE(Autodiff(0.125).Run(&g).ok());
  ASSERT_TRUE(g.Verify().ok()) << g.Verify();
  const int relu_grad = IndexOf(g, "relu_grad"), pool_grad = IndexOf(g, "max_pool2d_grad");
  ASSERT_GE(relu_grad, 0);
  EXPECT_LT(relu_grad, pool_grad);
  EXPECT_EQ(g.value(g.node(relu_grad).outputs[0]).shape, pre.shape);
}

TEST(ReluAfterMaxPool, LeavesOtherPairs) {
  for (const char* body : {
           // the relu's output read besides the pooling
           "r = relu(x)\n  p = max_pool2d(r, 2) + max_pool2d(r, 2)",
           // average pooling does not commute with relu
           "p = avg_pool2d(relu(x), 2)",
           // pooling first already
           "p = relu(max_pool2d(x, 2))",
       }) {
    SCOPED_TRACE(body);
    bool changed = true;
    Swapped(body, &changed);
    EXPECT_FALSE(changed);
  }
}

}  // namespace
}  // namespace trainc
