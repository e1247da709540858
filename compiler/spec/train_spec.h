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
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/op_table.h"
#include "compiler/plan/settings.h"

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
  // Per-sample shape. For an i32 class label `label c: i32[10]` read by
  // cross_entropy with 1-D logits (the v1 form, class_index) the shape is
  // [10]: the number of classes; each sample stores one index in [0, 10).
  // Otherwise an i32 value holds one index per element (`i32[128]`: 128
  // token ids).
  std::vector<int64_t> shape;
  bool class_index = false;
  SourceLocation location;
};

// One parameter, named by the path of statements that created it, as a
// PyTorch state dict names it: "h1.weight", "n1.bias",
// "h.3.attn.c_attn.weight". Layout matches PyTorch (nn.Linear weight
// [out, in]).
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
  // kUniformFanIn: U(-1/sqrt(init_scale), 1/sqrt(init_scale)) as nn.Linear
  // (init_scale = fan_in); kNormal: N(0, init_scale^2).
  ops::Init init = ops::Init::kZeros;
  double init_scale = 0;
};

// One op call, after checking and flattening: `name = op(args...)`.
//
// The ops, their arguments and rules are in compiler/ops/op_table.h.
// Nested calls are flattened into statements named "<name>.<k>" before
// checking, e.g. `h1 = relu(linear(image, 256))` gives "h1.0 = linear(...)"
// and "h1 = relu(h1.0)". A statement holds at most one op with parameters
// (more is an error), and that op's parameters take the statement's name:
// h1.weight and h1.bias above. Inside a block instance every name is
// prefixed with the instance's path ("h.3.attn.c_attn").
struct OpSpec {
  std::string name;                 // the value it defines
  ops::ModelOp op = ops::ModelOp::kLinear;  // ops::ModelOpName: "linear"
  std::vector<std::string> inputs;  // value names, in argument order
  // Constant arguments by name, defaults filled in ("out_features": 256).
  std::map<std::string, ops::ArgValue> args;
  // Names into ModelSpec::parameters, in the op's parameter-slot order; a
  // tied weight names a parameter created by another statement.
  std::vector<std::string> parameters;
  // Parameters passed by the call (`weight = wte.weight`): argument name ->
  // parameter name (also listed in `parameters`).
  std::map<std::string, std::string> shared_parameters;
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
  // The loss is the mean of loss_terms x global_batch terms (tokens x
  // sequences; 1 x samples for a class label or mse).
  int64_t loss_terms = 1;
  int64_t parameter_count = 0;
  // `const` definitions after command-line overrides, for summaries.
  std::vector<std::pair<std::string, std::string>> constants;
  // Block instances whose activations are recomputed in the backward
  // (`repeat(..., recompute = true)`): value-name prefixes, "h.0" ...
  std::vector<std::string> recompute_blocks;
  // Every repeat(...) instance, for train { recompute = true }.
  std::vector<std::string> repeat_blocks;
  // Where each repeat(...) is written, by the path of its statement ("h"
  // for `h = repeat(layer, layers, x)`): what sets the number of layers.
  std::map<std::string, SourceLocation> repeat_locations;
};

// One data source: `idx(images, labels)`, `text(paths...)` or
// `tokens(paths...)`.
struct DatasetSpec {
  // idx, text (bytes) or tokens (llm.c shards); kNone: no such set.
  DataFormat format = DataFormat::kNone;
  // idx: images, labels. text / tokens: every file, globs expanded (sorted
  // per pattern, patterns in argument order); the token stream is their
  // concatenation.
  std::vector<std::string> paths;
  // text / tokens: the slice [floor(split_begin * n), floor(split_end * n))
  // of the stream's n tokens; 0 <= split_begin < split_end <= 1.
  double split_begin = 0.0;
  double split_end = 1.0;
  // text only: a SentencePiece model (absolute path) that turns the split's
  // bytes into token ids; empty: each byte is a token.
  std::string tokenizer;
};

struct DataSpec {
  DatasetSpec train;
  DatasetSpec eval;     // format kNone when absent
  double scale = 1.0;   // applied to every input feature
  bool shuffle = true;
  // Training images only (idx), each a function of the seed and the
  // example's place in the run, so the split does not change them: shifted
  // by up to random_crop pixels each way (zeros shifted in: a crop of the
  // image padded by random_crop) and mirrored left-right with probability
  // 1/2 when random_flip.
  int64_t random_crop = 0;
  bool random_flip = false;
};

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double momentum = 0.0;   // sgd
  bool nesterov = false;   // sgd
  double weight_decay = 0.0;
  // false: decay only parameters of 2 or more dimensions (weights and
  // embeddings, not biases or LayerNorm), as nanoGPT and llm.c do.
  bool decay_all = false;
  double beta1 = 0.9;      // adamw
  double beta2 = 0.999;    // adamw
  double eps = 1e-8;       // adamw
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::kConstant;
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
  // bucket_mb = auto: the planner picks bucket_mb and first_bucket_mb
  // (both above are then ignored) for the least predicted step time on
  // `machine` (compiler/cost; see PlanOptions in compiler/planner).
  bool bucket_mb_auto = false;
  // memory = "80GiB": each device's budget (0: none). The planner then
  // searches ZeRO stage, recomputation and (micro_batch = auto) the
  // micro-batch and accumulation of the same global batch for the least
  // predicted step that fits (compiler/planner/memory_search.h).
  int64_t memory_bytes = 0;
  bool micro_batch_auto = false;
  // The machine profile bucket_mb = auto is costed on: a bundled name
  // ("h100_nvlink_ib", compiler/cost/profiles) or a .profile file; empty:
  // the device's default (PlanOptions::default_machine).
  std::string machine;
  int64_t seed = 0;
  bool deterministic = false;
  bool tf32 = false;
  // Recompute every repeat(...) block's activations in the backward, as
  // repeat(..., recompute = true) does for one (ModelSpec::repeat_blocks).
  bool recompute = false;
  // The plan's fusion passes (compiler/graph/fuse_classifier.h,
  // fuse_linear_gelu.h, fuse_linear_gelu_grad.h, fuse_activation.h,
  // fuse_swiglu.h, fuse_add_layernorm.h);
  // false plans every op as autodiff wrote it, for comparing.
  bool fusion = true;
  // > 0: scale the step's gradient so that its global L2 norm (over every
  // parameter, after the all-reduce) is at most this, as
  // torch.nn.utils.clip_grad_norm_.
  double clip_grad_norm = 0.0;
  // A step whose gradient norm is not finite leaves the weights and the
  // optimizer state as they were (llm.c's rule) instead of stopping the run.
  bool skip_nonfinite = false;
  // 1: ZeRO stage 1. Each bucket is reduce-scattered, each rank updates
  // its 1/N shard of the parameters (and keeps only that shard's optimizer
  // state), then the shards are all-gathered. 2: ZeRO stage 2, the same
  // with the reduced gradients kept as 1/N shards too (the whole bucket
  // only lives from its first gradient to its reduce-scatter). 3: stage
  // 3, the parameters kept as 1/N shards too, all-gathered before each
  // forward and backward use and freed after. 0: all-reduce, every rank
  // updates everything.
  int64_t zero = 0;
  // ZeRO-2 with accumulate > 1: see ZeroAccumulate.
  ZeroAccumulate zero_accumulate = ZeroAccumulate::kAuto;
  // ZeRO-3: how many buckets ahead of its first reader each parameter
  // all-gather is issued (compiler/plan/plan.h); -1: auto, the planner
  // picks the least predicted step (the smallest depth among equals).
  int64_t zero_prefetch = -1;
  // ZeRO-1's parameter all-gather: step_end (each bucket's right after its
  // shard's update) or next_forward (at the start of the next step, each
  // bucket's forward waiting only for its own).
  ZeroGather zero_gather = ZeroGather::kStepEnd;
  // The gradients' wire format: fp32, or bf16 (each bucket rounded to
  // bf16 for the collective, summed in fp32, as DDP's bf16_compress_hook).
  GradComm grad_comm = GradComm::kFp32;
  // fp32, or bf16: mixed precision, bf16 activations and matrix
  // products over f32 master weights (compiler/graph/precision.h).
  Precision precision = Precision::kFp32;
  // > 0: a checkpoint every this many steps (and at the last) into
  // checkpoint_dir, the newest checkpoint_keep kept.
  int64_t checkpoint_every = 0;
  int64_t checkpoint_keep = 3;
  std::string checkpoint_dir;  // empty: checkpoints/<model name>
};

struct TrainSpec {
  std::string source_path;
  ModelSpec model;
  DataSpec data;
  TrainConfig train;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_SPEC_TRAIN_SPEC_H_
