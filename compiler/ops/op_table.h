// The op table: every op's one definition.
//
// Two kinds of op live here, each defined once:
//
//  - Model ops, what a .train file calls (`linear(x, 256)`, `layernorm(x)`):
//    their arguments (positional or named, with defaults), and one rule that
//    checks a call and says what it becomes: the output shape, the
//    parameters it creates (PyTorch's names and layouts), the instruction op
//    it lowers to with its attributes, and the tensors it saves for the
//    backward pass. The front end's checker reports the rule's errors at the
//    call; lowering (compiler/graph) builds the graph from the same rule.
//
//  - Instruction ops, what graphs and plans hold (`linear`,
//    `linear_grad_params`, `all_reduce`): their operand counts and stream
//    (read by plan I/O and the runtime's kernel resolver), their gradient
//    rule as data, in the manner of PyTorch's derivatives.yaml (read by
//    autodiff), and a cost estimate (flops, bytes moved, workspace) read by
//    the plan summary and tools/viz.
//
// Adding an op: one ModelOpDef (if users call it), one OpDef per
// instruction it lowers to (forward and backward), and one kernel per
// backend (runtime/cpu, runtime/cuda). See docs/adding-an-op.md.
//
// Shapes in model rules are per sample (no batch dimension); instruction
// shapes are full buffer shapes (batch first).
#ifndef TRAINC_COMPILER_OPS_OP_TABLE_H_
#define TRAINC_COMPILER_OPS_OP_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <utility>
#include <vector>

#include "compiler/ops/arg_value.h"

namespace trainc::ops {

using Shape = std::vector<int64_t>;

// A shape as diagnostics show it: "[4, 768]" ("[]" for a scalar).
std::string ShapeText(const Shape& shape);

// ---------------------------------------------------------------------------
// Instruction ops
// ---------------------------------------------------------------------------

enum class OpCategory {
  kData,
  kMatmul,
  kElementwise,
  kNormalization,
  kEmbedding,
  kAttention,
  kConvolution,
  kPooling,
  kLoss,
  kCollective,
  kOptimizer,
};
const char* OpCategoryName(OpCategory category);

// One operand of a backward instruction, named relative to the forward
// instruction it differentiates.
struct Operand {
  enum class Kind { kGrad, kInput, kOutput } kind = Kind::kGrad;
  int index = 0;
};
inline constexpr Operand kDy{Operand::Kind::kGrad, 0};  // d(loss)/d(output 0)
inline constexpr Operand In(int i) { return {Operand::Kind::kInput, i}; }
inline constexpr Operand Out(int i) { return {Operand::Kind::kOutput, i}; }

// "the gradients of inputs `targets` are `op(operands)`". A target index
// past the forward instruction's inputs is dropped (an optional bias), and
// so is a target that needs no gradient, unless it is the rule's first
// target (a parameter-gradient op writes all its parameters or none).
struct GradRule {
  const char* op;
  std::vector<Operand> operands;
  std::vector<int> targets;
  // Loss ops: the instruction gets attr scale = the loss scale.
  bool scaled = false;
  // A backward temporary shaped like forward output `workspace_like` is
  // appended as the last output (attention's dS).
  int workspace_like = -1;
};

// What an instruction costs, for the plan summary, viz and the simulator.
struct Cost {
  double flops = 0;
  double bytes = 0;            // read + written
};

struct OpDef {
  const char* name;
  int min_inputs, max_inputs;    // max -1: any number
  int min_outputs, max_outputs;
  bool comm_stream;              // all_reduce; every other op is compute
  OpCategory category;
  const char* doc;               // operands, attributes
  // Inputs that never receive a gradient (labels, token ids, targets).
  std::vector<int> constant_inputs;
  // Backward rules, in emission order: parameter gradients first so their
  // bucket can start its all-reduce early. Empty: not differentiable.
  std::vector<GradRule> grads;
  bool is_loss = false;          // output 0 is the loss sum
  Cost (*cost)(const std::vector<Shape>& inputs,
               const std::vector<Shape>& outputs) = nullptr;
  // The instruction's last output is a workspace of the library that runs
  // it (oneDNN's scratchpad, cuDNN's workspace, room to accumulate). The
  // graph gives it no shape; the planner asks the backend for its size
  // (PlanOptions::workspace) and reserves it in the arena, so no kernel
  // allocates during a step.
  bool workspace = false;
  // Outputs that stay f32 under any precision policy (attention's
  // log-sum-exp: bf16's 8 bits would shift every recomputed probability).
  std::vector<int> f32_outputs = {};
  // Made by a fusion pass after autodiff from ops that are differentiated
  // (compiler/graph/fuse_classifier.h, fuse_linear_gelu.h,
  // fuse_linear_gelu_grad.h, fuse_add_layernorm.h): has no gradient rule
  // of its own.
  bool fused = false;
  // {output, input}: the kernel may write that output over that input
  // (same size and dtype; each element read before it is written). The
  // planner gives them the same bytes when the instruction is the input's
  // last reader; {-1, -1}: never.
  std::pair<int, int> in_place = {-1, -1};
};

// What an op does under precision = bf16 (compiler/graph/precision.h), as
// PyTorch's autocast lists:
//   kLowPrecision  matrix products (linear, attention, convolution): every
//                  float operand is bf16 (a cast makes it), accumulation in
//                  f32, forward outputs bf16;
//   kFp32          normalization, softmax, losses, embeddings, the
//                  optimizer: outputs f32 (bf16 operands are widened);
//   kFollow        the rest (activations, add, dropout, pooling, reshape):
//                  outputs bf16 when every float operand is, else f32.
// Whatever the policy, the gradient of a value has that value's dtype, and
// parameters, their gradients and optimizer state are f32.
enum class Precision { kLowPrecision, kFp32, kFollow };
Precision PrecisionOf(const OpDef& def);

// nullptr for an unknown op.
const OpDef* FindOp(std::string_view name);
const std::vector<OpDef>& AllOps();

// `def.cost` of the shapes, or bytes only when the op has no cost rule.
// Shapes hold 4-byte elements (f32 / i32).
Cost EstimateCost(const OpDef& def, const std::vector<Shape>& inputs,
                  const std::vector<Shape>& outputs);

// ---------------------------------------------------------------------------
// Model ops
// ---------------------------------------------------------------------------

// M(Name, spelling): every model op, in the order `help` lists them. The
// spelling is what a .train file calls; past the front end a call's op is
// its ModelOp (compiler/spec/train_spec.h), so code compares enums.
#define TRAINC_MODEL_OPS(M)                  \
  M(Linear, linear)                          \
  M(Relu, relu)                              \
  M(Gelu, gelu)                              \
  M(Tanh, tanh)                              \
  M(Silu, silu)                              \
  M(Softmax, softmax)                        \
  M(Dropout, dropout)                        \
  M(LayerNorm, layernorm)                    \
  M(RmsNorm, rmsnorm)                        \
  M(GroupNorm, group_norm)                   \
  M(Add, add)                                \
  M(Mul, mul)                                \
  M(Embedding, embedding)                    \
  M(PositionEmbedding, position_embedding)   \
  M(CausalAttention, causal_attention)       \
  M(Conv2d, conv2d)                          \
  M(MaxPool2d, max_pool2d)                   \
  M(AvgPool2d, avg_pool2d)                   \
  M(GlobalAvgPool, global_avg_pool)          \
  M(Flatten, flatten)                        \
  M(CrossEntropy, cross_entropy)             \
  M(Mse, mse)

#define TRAINC_MODEL_OP_ENUM(Name, spelling) k##Name,
enum class ModelOp : uint8_t { TRAINC_MODEL_OPS(TRAINC_MODEL_OP_ENUM) };
#undef TRAINC_MODEL_OP_ENUM

// "linear" for ModelOp::kLinear.
const char* ModelOpName(ModelOp op);

struct ArgDef {
  enum class Kind {
    kValue,      // an f32 tensor: a name, an op call, `a + b`
    kIndices,    // an i32 tensor of indices (token ids, class labels)
    kInt,        // a positive integer constant
    kCount,      // a non-negative integer constant (padding)
    kFloat,      // a number
    kString,
    kBool,
    kParameter,  // an existing parameter, by name (`weight = wte.weight`)
    // A weight initialisation: `normal(STD)`, N(0, STD^2) (the value is
    // STD); absent, the op's default (0).
    kInit,
  };
  const char* name;
  Kind kind;
  // As it would be written in .train ("1e-5", "true", "\"none\""); nullptr:
  // required. kParameter arguments are always optional (absent: the op
  // creates its own).
  const char* default_value = nullptr;
};

// One call, after its arguments are checked: the per-sample shapes of its
// tensor arguments (kValue and kIndices, in order), every constant argument
// by name (defaults filled in), and the shapes of the parameters passed by
// name.
struct OpCall {
  std::vector<Shape> values;
  std::vector<std::string> value_names;  // for messages; may be empty
  std::string name;  // the value the call defines ("h.2.attn.drop")
  std::map<std::string, ArgValue> constants;
  std::map<std::string, Shape> shared_parameters;

  int64_t Int(const std::string& name) const { return constants.at(name).i; }
  double Float(const std::string& name) const {
    return constants.at(name).AsDouble();
  }
  const std::string& String(const std::string& name) const {
    return constants.at(name).s;
  }
  bool Bool(const std::string& name) const { return constants.at(name).b; }
};

enum class Init { kZeros, kOnes, kUniformFanIn, kNormal };

// One parameter slot of a call, in the instruction's operand order (after
// the value arguments).
struct ParamSlot {
  std::string suffix;        // "weight": the parameter is <statement>.weight
  Shape shape;
  Init init = Init::kZeros;
  double init_scale = 0;     // kUniformFanIn: fan_in; kNormal: std
  // Set when the call passed an existing parameter for this slot (weight
  // tying): its argument name; no new parameter is created.
  std::string shared_arg;
};

// A tensor an instruction writes besides the op's value, saved for the
// backward pass (layernorm's mean and rstd, softmax probabilities).
struct SavedOutput {
  std::string suffix;  // the value <statement>/<suffix>
  Shape shape;         // per sample
  bool i32 = false;    // 4-byte integers (max pooling's argmax), else f32
};

// What a call lowers to: one instruction.
struct Lowering {
  Shape shape;                       // the op's value, per sample
  std::vector<ParamSlot> params;
  std::string instruction;           // an OpDef name
  std::map<std::string, double> attrs;
  std::vector<SavedOutput> saved;
  // Loss ops: the loss is the mean of this many terms per sample (tokens
  // of a sequence; 1 for a class label).
  int64_t loss_terms = 0;
};

// A rule's complaint: `arg` is the index into ModelOpDef::args of the
// argument at fault, or -1 for the whole call.
struct ShapeError {
  int arg = -1;
  std::string message;
  std::string hint;
};

struct ModelOpDef {
  ModelOp op;
  std::vector<ArgDef> args;
  bool is_loss = false;
  const char* summary = nullptr;  // one line: what it computes, its parameters
  std::variant<Lowering, ShapeError> (*rule)(const OpCall& call) = nullptr;
  // Also written `a <infix> b` for two tensors ("+" for add); null: only
  // as a call.
  const char* infix = nullptr;
  // ModelOpName(op), filled in by the table.
  const char* name = nullptr;

  // "linear(x, out_features, bias = true, weight = <parameter>)".
  std::string Signature() const;
  // Index of the argument called `name`, or -1.
  int ArgIndex(std::string_view name) const;
};

// An argument's default as a value (`def.default_value` parsed); nullopt
// when it has none.
std::optional<ArgValue> DefaultValue(const ArgDef& def);

// nullptr for an unknown name: where a call's name becomes a ModelOp.
const ModelOpDef* FindModelOp(std::string_view name);
const ModelOpDef& DefOf(ModelOp op);
// The model op written `a <op> b` ("+": add); nullptr for none.
const ModelOpDef* FindInfixOp(std::string_view op);
const std::vector<ModelOpDef>& AllModelOps();
std::vector<std::string> ModelOpNames();

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_OP_TABLE_H_
