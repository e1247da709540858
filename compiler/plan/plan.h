// Plan: the static execution plan of one optimizer step, for every rank.
//
// The compiler (compiler/planner) produces it; the runtime executes it and
// tools/viz draws it. It is the only contract between the two halves: the
// runtime never sees the DSL and never remakes a decision recorded here.
//
// Memory. Each rank owns one arena of `arena_bytes`. A Buffer is a view
// (offset, shape, type) into it; views may overlap only when their live
// ranges do not (the memory planner's job) or when one contains the other by
// construction (a gradient inside its bucket, a parameter inside its
// bucket's parameter span).
//
// Streams and events. Instructions run in program order on their stream
// (`compute` or `comm`). An instruction first waits for every event in
// `wait_events`, then runs, then records every event in `record_events`.
// Events are per step: a wait in step s is satisfied only by a record in
// step s.
//
// One step = `accumulate` micro-steps of load/forward/backward, the bucket
// all-reduces (issued during the last micro-step's backward), then the
// optimizer per bucket. The program is unrolled: `micro_step` tells which
// micro-step an instruction belongs to (-1: once per step).
//
// Ops (inputs -> outputs, attributes). Every instruction op is defined once
// in compiler/ops/op_table.cc, with its operand counts, its operands and
// attributes (OpDef::doc), its gradient rule and its cost; plan validation
// and the runtime's kernel resolver read that table. Activations are
// [micro_batch, ...]. An op that writes a gradient has attr accumulate
// (0: out = v, 1: out += v). The ops the executor runs itself:
//   load_batch          -> all input and label buffers, in declaration order
//                          attrs: micro (index within this rank's step)
//   all_reduce          bucket grads -> the same buffer (in place, sum over
//                       ranks); stream comm; attrs: bucket. Without attr
//                       bucket: its one input (grad_sq under ZeRO).
//   reduce_scatter      (zero >= 1) bucket grads -> the same buffer: this
//                       rank's shard (elements [rank * shard_elems, +
//                       shard_elems) of slot 0) becomes the sum over ranks;
//                       the rest is left undefined; stream comm; attrs: bucket.
//                       ZeRO-2: -> the bucket's grad_shard instead, which
//                       the shard is copied to (attr accumulate 0) or added
//                       to (accumulate 1); the bucket is then dead.
//   all_gather          (zero = 1, 2) params span -> the same buffer: every
//                       rank's shard of it to every rank; stream comm;
//                       attrs: bucket. ZeRO-3: the bucket's param_shard (or
//                       its bf16 cast) -> a parameter span of its own (see
//                       below); attr backward (0: for the forward, 1: for
//                       the backward).
//   optimizer           params span, grads (bucket), state spans -> params,
//                       state; attrs: bucket. Elementwise over the bucket's
//                       flat span, hyper-parameters from `optimizer` (weight
//                       decay only if the bucket's weight_decay) and the
//                       learning rate from `schedule` at the current step.
//                       adamw state: m, v; sgd state: momentum (if > 0).
//                       Under ZeRO-1 (attr shard = 1) over this rank's
//                       shard of params and grads only; the state spans
//                       hold just that shard. Under ZeRO-2 its grads input
//                       is the bucket's grad_shard (as sum_squares').
// Loss ops (cross_entropy, mse) write the micro-batch's loss_sum; their
// gradients carry attr scale = 1 / (global_batch * loss_terms).
// So the loss is the mean over the global batch (every token of it)
// whatever the split, and the all-reduce only sums.
//
// Deterministic mode (`deterministic`): each micro-step's gradient goes to
// its own slot of the bucket (slot k of a bucket of `bytes` at offset
// + k * bytes, grads always written with accumulate 0), and all_reduce
// gathers the world's slots and adds them in global micro-batch order
// (rank 0's slot 0, slot 1, ..., then rank 1's, ...), leaving the sum in
// slot 0 on every rank. The result is bit for bit the same whatever the
// split of the global batch into gpus x accumulate.
//
// ZeRO-1 (`zero` = 1, world_size > 1): every bucket is padded to
// world_size x shard_elems floats (the padding is zero and stays zero);
// reduce_scatter replaces all_reduce, each rank's optimizer updates its
// shard (state spans of shard_elems), and all_gather gives every rank the
// whole updated span (before the step ends, or with zero_gather =
// next_forward at the next step's start). In deterministic mode the
// reduce_scatter is the deterministic all-reduce's gather and ordered sum,
// so the weights are bit for bit those of zero = 0.
//
// ZeRO-2 (`zero` = 2): ZeRO-1, and the reduced gradient is kept only as
// this rank's shard, the bucket's `grad_shard` (kGradShard, persistent,
// shard_elems floats). The bucket itself (kBucket) and its gradient views
// are arena buffers like activations: live from the first gradient written
// into it to the first compute instruction that waits for its
// reduce_scatter (the memory planner extends a comm instruction's operands
// so). With accumulate > 1, `zero_accumulate` says how micro-steps add up:
// local, one bucket across the micro-steps, reduce-scattered once (the
// only choice in deterministic mode); shard, every micro-step's bucket
// reduce-scattered and added into the shard, the next micro-step's
// load_batch waiting for those reduce-scatters. Holes of a bucket (the
// floats no written gradient covers) are zeroed before each
// reduce_scatter, since the arena reuses its memory.
//
// ZeRO-3 (`zero` = 3): ZeRO-2, and the parameters are kept only as this
// rank's shard too, the bucket's `param_shard` (kParamShard, persistent,
// shard_elems floats), which the optimizer updates. In every micro-step a
// bucket's parameters are all-gathered on the comm stream for each pass
// that reads them (forward, backward), into a parameter span of its own
// with a view per parameter, live from its all_gather to its last reader
// in that pass. The first reader waits for the all_gather; the all_gather
// waits for the compute instruction before it (its bytes may be reused
// ones), which is `zero_prefetch` buckets ahead of the first reader, in
// the order the micro-step first reads them. The bucket's `param_span` and
// the `parameter_buffers` are only the layout (offsets from the span's
// start, never live, no arena bytes): a parameter's place in every span
// and shard. Under precision = bf16 a pass that reads a bucket only
// through bf16 copies gathers those: the rank's shard cast to bf16 (a
// kParameterCopy), gathered into a bf16 span whose views are the copies,
// at half the layout's offsets; a pass that reads an f32 parameter of the
// bucket gathers f32 and casts its copies before their first reader.
#ifndef TRAINC_COMPILER_PLAN_PLAN_H_
#define TRAINC_COMPILER_PLAN_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/unit_family.h"
#include "compiler/plan/settings.h"

namespace trainc {

inline constexpr int kPlanFormatVersion = 1;

// kBF16: bfloat16 (the high half of an f32, rounded to nearest even), for
// activations under precision = bf16.
enum class DType { kF32, kI32, kBF16 };
int64_t DTypeBytes(DType t);  // 4, 4, 2

enum class BufferKind {
  kInput,           // filled by load_batch (features)
  kLabel,           // filled by load_batch (targets)
  kParameter,
  kGradient,        // parameter gradient, inside its bucket
  kOptimizerState,
  kActivation,      // forward value (and saved-for-backward tensors)
  kActivationGrad,  // gradient of an activation (backward temporary)
  kLoss,            // loss_sum of one micro-step
  kBucket,          // a whole bucket of gradients (all-reduce operand)
  kParameterSpan,   // a bucket's parameters, contiguous
  kStateSpan,       // a bucket's optimizer state, one per state kind
  kStepScalar,      // computed once per step (the gradient's squared norm)
  kWorkspace,       // a library's scratch for one instruction (its last output)
  kParameterCopy,   // precision = bf16: a parameter's bf16 copy, cast from
                    // the f32 master once per step (micro-step 0)
  kGradShard,       // ZeRO-2: a bucket's reduced gradient, this rank's shard
  kParamShard,      // ZeRO-3: a bucket's parameters, this rank's shard
};

struct Buffer {
  int id = 0;                  // index into Plan::buffers
  std::string name;            // "h1.weight", "grad/h1.weight", "h1", ...
  BufferKind kind = BufferKind::kActivation;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // full shape, batch dimension included
  int64_t offset = 0;          // bytes from the arena start, 64-byte aligned
  int64_t bytes = 0;           // product(shape) * DTypeBytes(dtype)
  // Parameters only: initialisation, as in PyTorch's modules; kNone for
  // every other buffer.
  ParamInit init = ParamInit::kNone;
  double init_bound = 0.0;     // uniform: U(-bound, bound); normal: N(0, bound^2)
  // Live range in program order (first and last instruction index that
  // touches it); -1 for buffers live for the whole run (parameters,
  // gradients, optimizer state, buckets).
  int first_use = -1;
  int last_use = -1;
};

enum class Stream { kCompute, kComm };

enum class Phase { kData, kForward, kBackward, kComm, kOptimizer };

struct Instruction {
  int id = 0;                // index into Plan::instructions
  std::string op;            // an instruction op of compiler/ops/op_table.cc
  std::vector<int> inputs;   // buffer ids
  std::vector<int> outputs;  // buffer ids
  std::map<std::string, double> attrs;
  Stream stream = Stream::kCompute;
  Phase phase = Phase::kForward;
  int micro_step = -1;       // 0..accumulate-1, or -1: once per step
  std::vector<int> wait_events;
  std::vector<int> record_events;
  std::string label;         // what it computes, for people: "h1 = linear"
};

struct Bucket {
  int id = 0;                        // also the all-reduce order
  std::vector<std::string> parameters;  // in backward (ready) order
  int grad_buffer = -1;              // BufferKind::kBucket
  int param_span = -1;               // BufferKind::kParameterSpan
  std::vector<int> state_spans;      // adamw: {m, v}; sgd+momentum: {buf}
  int64_t bytes = 0;                 // one slot
  int ready_after = -1;              // instruction writing its last gradient
  // The optimizer applies weight decay to this bucket (its parameters are
  // all matrices, or the optimizer decays everything).
  bool weight_decay = true;
  int all_reduce = -1;               // its all_reduce (or reduce_scatter)
  // ZeRO-1: the floats of one rank's shard (bytes / 4 = world_size x
  // shard_elems), and the all_gather of the updated parameters (ZeRO-3:
  // its first gather, -1 for a bucket nobody reads). 0 and -1 without
  // ZeRO.
  int64_t shard_elems = 0;
  int all_gather = -1;
  // ZeRO-2: this rank's shard of the reduced gradient (kGradShard,
  // shard_elems floats); -1 otherwise.
  int grad_shard = -1;
  // ZeRO-3: this rank's shard of the parameters (kParamShard, shard_elems
  // floats); -1 otherwise.
  int param_shard = -1;
};

struct MemoryReport {
  int64_t parameter_bytes = 0;
  // Buckets that live the whole run (zero < 2); ZeRO-2 counts its
  // shards here and its buckets among the activations.
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t peak_activation_bytes = 0;  // activations + backward temporaries
  int64_t arena_bytes = 0;            // the planned arena
  int64_t unshared_bytes = 0;         // the same buffers without any reuse
  int64_t workspace_bytes = 0;        // the largest instruction workspace
  // precision = bf16: the parameters' bf16 copies, and the same model
  // planned in fp32, for the saving. 0 otherwise.
  int64_t parameter_copy_bytes = 0;
  // The largest instruction's bf16 operands as f32: the staging a device
  // keeps beside the arena to run kernels in f32 (runtime/device/
  // kernel_args.h, Bf16StagingBytes).
  int64_t bf16_staging_bytes = 0;
  int64_t fp32_peak_activation_bytes = 0;
  int64_t fp32_arena_bytes = 0;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  bool nesterov = false;
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // the cosine's length; 0 when unknown until data
};

// A slice [floor(begin * n), floor(end * n)) of a token stream of n tokens.
struct TokenSplit {
  double begin = 0.0;
  double end = 1.0;
};

// format "idx": train_paths / eval_paths are images, labels.
// format "text" (each byte a token) or "tokens" (llm.c shards): the paths
// are concatenated into one token stream, sliced by the set's split, and
// served as windows of T + 1 tokens (T: the width of the i32 input buffer;
// window i is tokens [i*T, i*T + T]).
struct DataConfig {
  DataFormat format = DataFormat::kNone;  // shared by both sets
  std::vector<std::string> train_paths;
  std::vector<std::string> eval_paths;
  TokenSplit train_split;  // text / tokens only
  TokenSplit eval_split;   // text / tokens only
  // text only: a SentencePiece model encoding each set's split of bytes
  // (both sets alike); empty: one token per byte.
  std::string tokenizer;
  // > 0: every token id must be < token_vocab (the model's vocabulary);
  // loading fails on the first that is not.
  int64_t token_vocab = 0;
  double scale = 1.0;  // idx only
  bool shuffle = true;
  // Augmentation of the training images (idx, an input [B, C, H, W]):
  // example g of the run (step s, place i in the global batch: g =
  // (s - 1) global_batch + i, whatever the split) is shifted by (dy, dx)
  // in [-random_crop, random_crop]^2 with zeros shifted in, then mirrored
  // left-right if random_flip and a coin says so; dy, dx and the coin are
  // one Philox4x32-10 draw of (seed, g) (runtime/data/augment.h).
  int64_t random_crop = 0;
  bool random_flip = false;
};

// Checkpoints during the run (runtime/checkpoint, runtime/train): the full
// training state every `every` steps and at the last, as
// <dir>/step-<8-digit step>.safetensors, written atomically; only the
// newest `keep` stay.
struct CheckpointConfig {
  int64_t every = 0;  // 0: none
  int64_t keep = 3;
  std::string dir;
};

struct Plan {
  int version = kPlanFormatVersion;
  std::string model;
  std::string source;  // the .train file it was compiled from
  // What the model computes (compiler/spec/model_signature.h), saved in
  // checkpoints so that tools/hf_export can tell another model of the same
  // shapes; empty in plans written before it existed.
  std::string model_signature;

  int64_t world_size = 1;
  int64_t micro_batch = 0;
  int64_t accumulate = 1;
  int64_t global_batch = 0;
  int64_t epochs = 0;
  int64_t steps = 0;
  int64_t seed = 0;
  bool deterministic = false;
  bool tf32 = false;
  double bucket_mb = 25.0;
  // bucket_mb = auto: why the planner chose these buckets (the sizes tried,
  // the predicted step and exposed communication, the machine profile);
  // empty for a bucket_mb given as a number.
  std::string bucket_choice;
  // The loss is the mean of global_batch x loss_terms terms: tokens per
  // sequence for a language model, 1 for a class label or mse.
  int64_t loss_terms = 1;
  // > 0: gradient clipping. Each bucket's sum of squares is added into the
  // step scalar `grad_sq` (sum_squares, after its all-reduce, in bucket
  // order) and every optimizer scales its gradients by
  // min(1, clip_grad_norm / (sqrt(grad_sq) + 1e-6)), as
  // torch.nn.utils.clip_grad_norm_: no optimizer runs before every bucket
  // is reduced.
  double clip_grad_norm = 0.0;
  // With clipping or skip_nonfinite the step's grad_sq is computed, and an
  // optimizer whose grad_sq is not finite (inf or NaN anywhere in the
  // reduced gradient) changes nothing. skip_nonfinite: the trainer then
  // goes on with the next step (counting it) instead of stopping.
  bool skip_nonfinite = false;
  // ZeRO stage (0 to 3; > 0 only when world_size > 1), see above.
  int64_t zero = 0;
  // ZeRO-3: how many buckets ahead of its first reader a parameter
  // all-gather is issued (0: just before it).
  int64_t zero_prefetch = 0;
  // Why the planner chose zero_prefetch (zero_prefetch = auto); empty
  // otherwise.
  std::string zero_prefetch_choice;
  // ZeRO-2 with accumulate > 1: local or shard (never auto; see above).
  // local otherwise.
  ZeroAccumulate zero_accumulate = ZeroAccumulate::kLocal;
  // Why the planner chose zero_accumulate (zero_accumulate = auto with
  // accumulate > 1); empty otherwise.
  std::string zero_accumulate_choice;
  // memory = ...: the table of the plans the planner tried and the one it
  // kept (compiler/planner/memory_search.h); empty otherwise.
  std::string memory_choice;
  // ZeRO-1: where the parameter all-gathers run. step_end: each right
  // after its bucket's optimizer. next_forward: at the start of the
  // step, before micro-step 0 (in the order the forward pass reads the
  // buckets), the first instruction reading a bucket's parameters waiting
  // for its all-gather; the step then ends with every rank's own shard
  // updated and the rest stale, and the runtime all-gathers before
  // anything else reads the parameters (Executor::GatherParameters).
  ZeroGather zero_gather = ZeroGather::kStepEnd;
  // The gradient collectives' wire format: fp32, or bf16 (rounded to
  // bf16 for the collective, sums in fp32; the result widened back).
  GradComm grad_comm = GradComm::kFp32;
  // fp32, or bf16: mixed precision (compiler/graph/precision.h). The
  // parameters, their gradients and the optimizer state stay f32; matrix
  // products (linear, attention, convolution) read bf16 operands (cast
  // instructions make them) with f32 accumulation and write bf16; the
  // elementwise ops that follow stay bf16; normalization, softmax, losses
  // and embeddings compute and write f32. An activation's gradient has the
  // activation's dtype. Every kernel computes in f32: a bf16 operand is
  // widened on load and rounded to nearest even on store.
  Precision precision = Precision::kFp32;

  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  DataConfig data;
  CheckpointConfig checkpoints;

  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
  std::vector<Bucket> buckets;
  int num_events = 0;
  int64_t arena_bytes = 0;
  MemoryReport memory;

  // Convenience ids, all into buffers.
  std::vector<int> input_buffers;   // load_batch outputs, in order
  int loss_buffer = -1;             // loss_sum of the current micro-step
  std::vector<int> parameter_buffers;  // in model (forward) order
};

// What `plan` says about `instr` to a unit family's Resolve
// (compiler/ops/unit_family.h): the resolver's and the reference's.
ops::unit::PlanFacts UnitFactsOf(const Plan& plan, const Instruction& instr);

const char* BufferKindName(BufferKind kind);
const char* StreamName(Stream stream);
const char* PhaseName(Phase phase);
const char* DTypeName(DType dtype);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLAN_PLAN_H_
