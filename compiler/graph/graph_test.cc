#include "compiler/graph/graph.h"

#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

// x -> a = relu(x) -> b = add(a, a) -> loss = mse(b, x): each edit below
// must leave readers() and writers() as a scan of the nodes finds them.
class GraphIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = Add("x", ValueKind::kInput);
    a_ = Add("a", ValueKind::kActivation);
    b_ = Add("b", ValueKind::kActivation);
    loss_ = Add("loss", ValueKind::kLoss);
    g_.set_loss(loss_);
    relu_ = g_.AddNode(MakeNode("relu", {x_}, {a_}));
    add_ = g_.AddNode(MakeNode("add", {a_, a_}, {b_}));
    mse_ = g_.AddNode(MakeNode("mse", {b_, x_}, {loss_}));
  }

  int Add(const char* name, ValueKind kind) {
    Value v;
    v.name = name;
    v.kind = kind;
    v.shape = {2, 3};
    return g_.AddValue(v);
  }

  static Node MakeNode(const char* op, std::vector<int> in, std::vector<int> out) {
    Node n;
    n.op = op;
    n.label = op;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    return n;
  }

  // The readers and writers a scan finds, against the index, for every
  // value; and Verify, which recomputes the index too.
  void ExpectIndexMatchesScan() {
    ASSERT_TRUE(g_.Verify().ok()) << g_.Verify();
    for (const Value& v : g_.values()) {
      std::vector<int> readers, writers;
      for (const Node& n : g_.nodes()) {
        for (int in : n.inputs) {
          if (in == v.id && (readers.empty() || readers.back() != n.id)) readers.push_back(n.id);
        }
        for (int out : n.outputs) {
          if (out == v.id) writers.push_back(n.id);
        }
      }
      EXPECT_EQ(g_.readers(v.id), readers) << v.name;
      EXPECT_EQ(g_.writers(v.id), writers) << v.name;
    }
  }

  Graph g_{"g"};
  int x_, a_, b_, loss_, relu_, add_, mse_;
};

TEST_F(GraphIndex, ANodeReadingAValueTwiceIsOneReader) {
  EXPECT_EQ(g_.readers(a_), std::vector<int>{add_});
  EXPECT_EQ(g_.readers(x_), (std::vector<int>{relu_, mse_}));
  EXPECT_EQ(g_.writers(b_), std::vector<int>{add_});
  EXPECT_TRUE(g_.writers(x_).empty());
  ExpectIndexMatchesScan();
}

TEST_F(GraphIndex, ReplaceNodeMovesOnlyTheOperandsThatChange) {
  Node n = g_.node(add_);
  n.op = "mul";
  n.inputs = {a_, x_};  // a stays read, x gains a reader between two
  g_.ReplaceNode(add_, n);
  EXPECT_EQ(g_.node(add_).op, "mul");
  EXPECT_EQ(g_.node(add_).kernel, KernelOp::kMul);  // the graph's, from op
  EXPECT_EQ(g_.node(relu_).kernel, KernelOp::kRelu);
  EXPECT_EQ(g_.readers(x_), (std::vector<int>{relu_, add_, mse_}));
  ExpectIndexMatchesScan();
  n.inputs = {x_, x_};  // a loses its only reader
  g_.ReplaceNode(add_, n);
  EXPECT_TRUE(g_.readers(a_).empty());
  ExpectIndexMatchesScan();
}

TEST_F(GraphIndex, RemoveNodesRenumbersTheIndex) {
  // relu's a is read by nothing once add reads x.
  Node n = g_.node(add_);
  n.inputs = {x_, x_};
  g_.ReplaceNode(add_, n);
  std::vector<bool> drop(g_.nodes().size(), false);
  drop[relu_] = true;
  EXPECT_TRUE(g_.RemoveNodes(drop));
  EXPECT_EQ(g_.readers(x_), (std::vector<int>{0, 1}));  // add, mse renumbered
  EXPECT_TRUE(g_.writers(a_).empty());
  ExpectIndexMatchesScan();
  EXPECT_FALSE(g_.RemoveNodes(std::vector<bool>(g_.nodes().size(), false)));
}

TEST_F(GraphIndex, SetNodesRebuildsItInTheNewOrder) {
  const int c = Add("c", ValueKind::kActivation);
  std::vector<Node> program = g_.nodes();
  // A node inserted before add, as a pass splicing a copy in would.
  program.insert(program.begin() + add_, MakeNode("relu", {a_}, {c}));
  program.back().inputs = {c, x_};
  g_.SetNodes(program);
  EXPECT_EQ(g_.node(1).outputs, std::vector<int>{c});
  EXPECT_EQ(g_.readers(a_), (std::vector<int>{1, 2}));
  EXPECT_EQ(g_.readers(c), std::vector<int>{3});
  ExpectIndexMatchesScan();
}

TEST_F(GraphIndex, AddNodeAfterAddValueIsIndexed) {
  const int d = Add("d", ValueKind::kActivation);
  const int node = g_.AddNode(MakeNode("relu", {b_}, {d}));
  EXPECT_EQ(g_.readers(b_), (std::vector<int>{mse_, node}));
  EXPECT_EQ(g_.writers(d), std::vector<int>{node});
  ExpectIndexMatchesScan();
}

}  // namespace
}  // namespace trainc
