// TrainSpec: a checked, fully resolved .train file.
//
// The front end (compiler/frontend) produces it from source text after name
// resolution, shape inference and the batch arithmetic; everything after it
// (lowering, autodiff, planning) trusts it and never re-reports user errors.
//
// Shapes here are per sample: the batch dimension is implicit and added when
// the graph is lowered (a value of shape [784] is [micro_batch, 784] there).
#ifndef TRAINC_COMPILER_SPEC_TRAIN_SPEC_H_
#define TRAINC_COMPILER_SPEC_TRAIN_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainc {

// Where something was written: 1-based line and column.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
};

enum class ElementType { kF32, kI32 };

// A value declared with `input` or `label`, or computed by a statement.
struct ValueSpec {
  std::string name;
  ElementType type = ElementType::kF32;
  // Per-sample shape. For an i32 class label `label c: i32[10]` the shape is
  // [10]: the number of classes; each sample stores one index in [0, 10).
  std::vector<int64_t> shape;
  SourceLocation location;
};

// One parameter, named after its statement: "h1.weight", "h1.bias",
// "n1.gamma", "n1.beta". Layout matches PyTorch (nn.Linear weight [out, in]).
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
  enum class Init {
    kUniformFanIn,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), like nn.Linear
    kOnes,
    kZeros,
  } init = Init::kZeros;
  int64_t fan_in = 0;  // for kUniformFanIn
};

// One statement `name = op(args...)`, after checking.
//
// Ops (v1), with their arguments:
//   linear(x, out_features)  params: <name>.weight [out, in], <name>.bias [out]
//   relu(x) gelu(x) tanh(x)
//   layernorm(x)             params: <name>.gamma [d], <name>.beta [d]; eps 1e-5
//   add(a, b)                same shapes
//   cross_entropy(logits, label)   logits [C], label i32[C]; scalar loss
//   mse(prediction, target)        same shapes; scalar loss
// Nested calls are flattened into statements named "<name>.<k>" before
// checking, e.g. `h1 = relu(linear(image, 256))` gives "h1.0 = linear(...)"
// and "h1 = relu(h1.0)". A statement holds at most one op with parameters
// (more is an error), and that op's parameters take the statement's name:
// h1.weight and h1.bias above.
struct OpSpec {
  std::string name;                 // the value it defines
  std::string op;                   // "linear", "relu", ...
  std::vector<std::string> inputs;  // value names, in argument order
  int64_t out_features = 0;         // linear only
  std::vector<std::string> parameters;  // names into ModelSpec::parameters
  ValueSpec output;
  SourceLocation location;
};

struct ModelSpec {
  std::string name;
  std::vector<ValueSpec> inputs;  // `input` declarations, in order
  std::vector<ValueSpec> labels;  // `label` declarations, in order
  std::vector<OpSpec> ops;        // topological (source) order
  std::vector<ParameterSpec> parameters;  // in creation (forward) order
  std::string loss;               // the value named `loss`
  int64_t parameter_count = 0;
};

// One data source: `idx(images, labels)`.
struct DatasetSpec {
  std::string format;  // "idx"
  std::vector<std::string> paths;
};

struct DataSpec {
  DatasetSpec train;
  DatasetSpec eval;     // format empty when absent
  double scale = 1.0;   // applied to every input feature
  bool shuffle = true;
};

struct OptimizerSpec {
  enum class Kind { kSgd, kAdamW } kind = Kind::kAdamW;
  double lr = 1e-3;
  double momentum = 0.0;   // sgd
  bool nesterov = false;   // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9;      // adamw
  double beta2 = 0.999;    // adamw
  double eps = 1e-8;       // adamw
};

struct ScheduleSpec {
  enum class Kind { kConstant, kCosine } kind = Kind::kConstant;
  int64_t warmup_steps = 0;  // cosine: linear warm-up, then cosine to 0
};

struct TrainConfig {
  // global_batch == gpus * micro_batch * accumulate, always, after checking.
  int64_t gpus = 1;
  int64_t micro_batch = 0;
  int64_t accumulate = 1;
  int64_t global_batch = 0;
  int64_t epochs = 0;  // exactly one of epochs / steps is > 0
  int64_t steps = 0;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  double bucket_mb = 25.0;       // 0: one bucket per parameter
  double first_bucket_mb = 0.0;  // 0: same as bucket_mb (DDP's smaller first bucket when > 0)
  int64_t seed = 0;
  bool deterministic = false;
  bool tf32 = false;
};

struct TrainSpec {
  std::string source_path;
  ModelSpec model;
  DataSpec data;
  TrainConfig train;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_SPEC_TRAIN_SPEC_H_
