// Graph: the compiler's IR between TrainSpec and Plan.
//
// Values are typed, shaped tensors (batch dimension included); nodes are
// instruction ops of the op table (compiler/ops) reading and writing values. One graph describes ONE
// micro-step on one rank; the planner unrolls it `accumulate` times.
//
// Invariants (checked by Verify):
//   - an input, label or parameter is never written by a node;
//   - an activation (or loss) is written by exactly one node, before any read;
//   - a gradient may be written by several nodes: the first writes it with
//     attr accumulate=0, later ones with accumulate=1 (a parameter used
//     twice, e.g. a tied embedding, gets two writes; the planner adds the
//     micro-step's accumulation on top).
//
//   Graph g = LowerModel(spec.model, /*micro_batch=*/64).value();
//   std::cout << g.ToText();
#ifndef TRAINC_COMPILER_GRAPH_GRAPH_H_
#define TRAINC_COMPILER_GRAPH_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/plan/plan.h"

namespace trainc {

enum class ValueKind {
  kInput,
  kLabel,
  kParameter,
  kActivation,      // forward values, including saved-for-backward tensors
  kLoss,            // the loss op's loss_sum
  kParameterGrad,
  kActivationGrad,
};
const char* ValueKindName(ValueKind kind);

struct Value {
  int id = -1;
  std::string name;
  ValueKind kind = ValueKind::kActivation;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // batch dimension first for per-sample values
  // Parameters: PyTorch-style initialisation; kNone for other values.
  ParamInit init = ParamInit::kNone;
  double init_bound = 0.0;
  int grad_of = -1;  // gradients: the value this is the gradient of

  int64_t elements() const;
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
};

enum class NodeRole { kForward, kBackward };

struct Node {
  int id = -1;
  std::string op;  // an op of plan.h
  // KernelOpOfInstruction(op), set by the graph when the node is added or
  // replaced: what passes compare (kNotCompute for the collectives; the
  // first kernel of "cast" and "optimizer").
  KernelOp kernel = KernelOp::kNotCompute;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::map<std::string, double> attrs;
  NodeRole role = NodeRole::kForward;
  std::string label;  // "h1 = relu", "grad/h1.0 = relu_grad"
};

// The graph keeps, for every value, the nodes reading it and the nodes
// writing it (each node once, in program order), the way every HLO
// instruction knows its users: a pass asks for a value's readers in
// O(readers), not O(graph). Nodes are edited only through the graph's own
// operations (AddNode, ReplaceNode, RemoveNodes, SetNodes), which keep the
// index up to date; Verify recomputes it and compares.
class Graph {
 public:
  explicit Graph(std::string name = "") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Appends and returns the new id (ids are indices).
  int AddValue(Value value);
  // Appends `node` at the end of the program; returns its id.
  int AddNode(Node node);
  // Replaces node `id` by `node` (its op, operands, attributes, label);
  // the id and the place in the program stay. O(the operands' readers).
  void ReplaceNode(int id, Node node);
  // Removes the nodes with drop[id] set and renumbers the rest in order;
  // returns whether it removed any. O(graph).
  bool RemoveNodes(const std::vector<bool>& drop);
  // Replaces the whole program by `nodes` (renumbered in order): for a pass
  // that inserts nodes inside the program, rebuilding it once. O(graph).
  void SetNodes(std::vector<Node> nodes);

  const Value& value(int id) const { return values_[id]; }
  // A value's kind, dtype, shape or name; not its readers or writers.
  Value& mutable_value(int id) { return values_[id]; }
  const std::vector<Value>& values() const { return values_; }
  const Node& node(int id) const { return nodes_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // The ids of the nodes reading (writing) value `id`, each once, in
  // program order.
  const std::vector<int>& readers(int id) const { return readers_[id]; }
  const std::vector<int>& writers(int id) const { return writers_[id]; }

  // Inputs then labels, in declaration order: what load_batch writes.
  const std::vector<int>& batch_values() const { return batch_values_; }
  void add_batch_value(int id) { batch_values_.push_back(id); }
  // Parameters in creation (forward) order.
  const std::vector<int>& parameters() const { return parameters_; }
  void add_parameter(int id) { parameters_.push_back(id); }

  int loss() const { return loss_; }
  void set_loss(int id) { loss_ = id; }

  // The invariants above, and the readers/writers index against a
  // recomputation from the nodes (linear: the pipeline runs it after every
  // pass, tests after every rewrite).
  absl::Status Verify() const;
  std::string ToText() const;

 private:
  // Adds (removes) node `id` to (from) the index lists of its operands.
  void Link(const Node& node);
  void Unlink(const Node& node);
  absl::Status VerifyIndex() const;

  std::string name_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> readers_;  // value -> reading nodes, sorted
  std::vector<std::vector<int>> writers_;  // value -> writing nodes, sorted
  std::vector<int> batch_values_;
  std::vector<int> parameters_;
  int loss_ = -1;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_GRAPH_H_
