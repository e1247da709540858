// What the graph passes' tests share: a model compiled from .train
// source, lowered and differentiated as the planner does before its
// rewriting passes, and a look at the result.
#ifndef TRAINC_COMPILER_GRAPH_TESTING_GRAPH_TEST_UTIL_H_
#define TRAINC_COMPILER_GRAPH_TESTING_GRAPH_TEST_UTIL_H_

#include <string>

#include "compiler/graph/graph.h"
#include "compiler/spec/train_spec.h"

namespace trainc {

// `source` through the front end, without reading its data; a test
// failure (and an empty spec) when it does not check.
TrainSpec CompiledSpec(const std::string& source);

// The spec's model at micro-batch 2: lowered, dead code removed,
// differentiated with `loss_scale`, and under `bf16` MixedPrecision after.
Graph DifferentiatedGraph(const TrainSpec& spec, double loss_scale, bool bf16 = false);
// The same at loss scale 1/8: the fusion passes' tests, whose checks do
// not depend on the scale.
Graph Differentiated(const TrainSpec& spec, bool bf16 = false);

// How many nodes run `op`; the first that does (null: none).
int CountOps(const Graph& graph, const std::string& op);
const Node* FirstNode(const Graph& graph, const std::string& op);
// The node writing the value named `value` (null: none).
const Node* WriterOf(const Graph& graph, const std::string& value);
// The id of the value named `name` (-1: none).
int ValueNamed(const Graph& graph, const std::string& name);

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_TESTING_GRAPH_TEST_UTIL_H_
