#include "compiler/graph/testing/graph_test_util.h"

#include <memory>
#include <utility>

#include "compiler/autodiff/autodiff.h"
#include "compiler/frontend/frontend.h"
#include "compiler/graph/dce.h"
#include "compiler/graph/lower.h"
#include "compiler/graph/precision.h"
#include "gtest/gtest.h"

namespace trainc {

TrainSpec CompiledSpec(const std::string& source) {
  const FrontendResult r = CompileSource(source, "m.train", {}, {/*read_data=*/false});
  EXPECT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  return r.spec.value_or(TrainSpec());
}

Graph Differentiated(const TrainSpec& spec, bool bf16) {
  return DifferentiatedGraph(spec, 0.125, bf16);
}

Graph DifferentiatedGraph(const TrainSpec& spec, double loss_scale, bool bf16) {
  absl::StatusOr<Graph> g = LowerModel(spec.model, 2);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Graph();
  PassPipeline pipeline("test");
  pipeline.Add(std::make_unique<DeadCodeElimination>());
  pipeline.Add(std::make_unique<Autodiff>(loss_scale));
  if (bf16) pipeline.Add(std::make_unique<MixedPrecision>());
  const absl::StatusOr<bool> ran = pipeline.Run(&*g);
  EXPECT_TRUE(ran.ok()) << ran.status();
  return std::move(*g);
}

int CountOps(const Graph& graph, const std::string& op) {
  int n = 0;
  for (const Node& node : graph.nodes()) n += node.op == op;
  return n;
}

const Node* FirstNode(const Graph& graph, const std::string& op) {
  for (const Node& node : graph.nodes()) {
    if (node.op == op) return &node;
  }
  return nullptr;
}

const Node* WriterOf(const Graph& graph, const std::string& value) {
  for (const Node& node : graph.nodes()) {
    for (int out : node.outputs) {
      if (graph.value(out).name == value) return &node;
    }
  }
  return nullptr;
}

int ValueNamed(const Graph& graph, const std::string& name) {
  for (const Value& v : graph.values()) {
    if (v.name == name) return v.id;
  }
  return -1;
}

}  // namespace trainc
