// What a unit family (compiler/ops/kernel_families.h) may declare beyond
// Args, Resolve and Run, the helpers with which the resolver, both
// backends and the float64 reference treat every unit family alike, and
// the shape arithmetic, attributes and bucket checks the families' Resolve
// share:
//
//   - Run<T> returns void, or std::string: "" or why the operands were
//     refused (a label outside the classes). RunUnit returns the string
//     either way.
//   - Ids: a family whose kernels read an i32 operand (class labels, token
//     ids) declares `static int IdsInput(KernelOp op)` (that input's index,
//     -1 for none) and `static constexpr const int32_t* Args::*kIds`, the
//     field its loops read it through. The resolver checks the input is
//     i32 and points the field at it (the operand's x slot is left null);
//     the reference rounds its float64 values to int32 first.
//   - Training: an Args with a `bool training` member gets the step's
//     (false in evaluation) from the backend before each run (ForStep);
//     the reference runs it as training.
//   - The step: an Args with a `unit::Step step` member gets the whole step
//     (training, step number, rank, learning rate) from the backend before
//     each run (ForStep); the reference runs the step its caller gives
//     (EvalOp's plan overload), by default step 1 of rank 0, training, at
//     learning rate 0. On CUDA the step number and the learning rate come
//     from device memory instead (cuda::UnitLaunch::scalars), so that a
//     captured step replays with the next step's.
//   - bf16 outputs: an Args with a `uint32_t bf16_outputs` mask learns from
//     the resolver which outputs are bf16 tensors (bit j: output j), so a
//     kernel that reads back its own output rounds it first (layer norm's
//     sum), or, for the CPU's attention, may write it as one; the
//     reference leaves it 0.
//   - f32 operands: a family whose kernels read or write some operands as
//     f32 under any precision (attention's log-sum-exp) declares
//     `static bool F32Operand(KernelOp op, bool output, int j)`; the
//     resolver refuses a plan in which such an operand is not f32.
//   - Own CPU kernel: a family whose CPU kernel is not its Run<float>
//     (attention's, which tiles its products over the CPU's GEMM) declares
//     `static constexpr bool kOwnCpuKernel = true`. Its Run<T> is then the
//     float64 reference alone, and the CPU backend runs
//     `cpu::OwnCpuKernel(op, args, x, y, accumulate)` instead: an overload
//     for its Args with Run's signature in f32, returning "" or why not,
//     declared beside that kernel (runtime/cpu/attention.h). Under
//     precision = bf16 attention's Resolve reads the plan's facts (below)
//     for which inputs are bf16 tensors (Args::bf16_inputs; its outputs:
//     bf16_outputs, below), and the CPU asks the family once per plan
//     (cpu::PrepareAttention, through runtime/cpu/prepared.h's
//     ChooseNative) which of them its kernel reads and writes as they are
//     (Args::native_inputs / native_outputs; no f32 staging) with its
//     products on bf16.
//   - Prepared per plan: a family whose backends run library programs
//     built once for the plan (primitives and descriptors bound to the
//     arena, layouts chosen across instructions) is listed in
//     TRAINC_PREPARED_FAMILIES (compiler/ops/kernel_families.h), not
//     TRAINC_STATELESS_FAMILIES. Its Run<T> is then the float64 reference
//     alone. Each backend builds the programs when it prepares the plan
//     and hands them to the family's kernel, an overload on its Args:
//     on the CPU `absl::Status cpu::OwnCpuKernel(op, args, const
//     cpu::Prepared&)` (runtime/cpu/prepared.h: the instruction as
//     resolved, its id, the plan's oneDNN programs and bf16 matmuls,
//     which cpu::PlanPrograms prepares for the whole plan), declared
//     beside those programs (runtime/cpu/linear.h, window.h); on CUDA
//     `CudaDeviceImpl::PreparePrograms(args, kernel, ...)`, once per
//     instruction when the plan is prepared (its limits, scratch and
//     descriptors), and `CudaDeviceImpl::RunPrograms(args, kernel, id)`,
//     which hand the instruction to the family's class, owned by the
//     device (runtime/cuda/cublas_linear.h, cudnn_ops.h).
//   - The plan: a family whose Resolve takes a trailing
//     `const unit::PlanFacts&` learns what the plan says beyond the
//     operands' shapes (the batch's layout and seed, the bucket the
//     instruction names, what each operand is to that bucket): the
//     resolver and the reference's plan interpreter fill it
//     (compiler/plan/plan.h's UnitFactsOf); a reference run without a plan
//     gets the defaults.
//   - Several kernels for one instruction op: a family declares
//     `static KernelOp KernelOf(KernelOp op, const unit::PlanFacts&)`, the
//     kernel that runs (the cast's direction, from its operands' dtypes);
//     the resolver and the reference ask it before Resolve.
// It needs only KernelOp's declaration, so that the families' headers,
// which kernel_families.h includes, may include it.
#ifndef TRAINC_COMPILER_OPS_UNIT_FAMILY_H_
#define TRAINC_COMPILER_OPS_UNIT_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace trainc {
enum class KernelOp : uint8_t;  // compiler/ops/kernel_families.h
}  // namespace trainc

namespace trainc::ops::unit {

// The step a kernel runs in (see above): runtime/device's StepState.
struct Step {
  bool training = true;  // false in evaluation
  int64_t step = 1;      // 1-based optimizer step
  int rank = 0;
  double lr = 0;  // the schedule's learning rate at this step
};

// What an operand is to the bucket its instruction names (attr bucket).
enum class BucketRole : uint8_t {
  kOther,
  kGrads,       // the bucket's gradients (slot 0 holds the reduced sum)
  kGradShard,   // ZeRO-2: this rank's shard of the reduced gradients
  kParams,      // the bucket's parameter span
  kParamShard,  // ZeRO-3: this rank's shard of the parameters
  kState,       // one of its optimizer state spans
  kStepScalar,  // a step scalar (the squared gradient norm)
};

// The plan's optimizer (compiler/plan/plan.h's OptimizerConfig) over the
// bucket an instruction names.
struct OptimizerFacts {
  enum class Kind : uint8_t { kOther, kAdamW, kSgd } kind = Kind::kOther;
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, momentum = 0;
  bool nesterov = false;
  bool bucket_decayed = true;  // the bucket's parameters are decayed
  int64_t param_elems = -1;    // its parameter span; -1: it has none (or no gradients)
};

// What the plan says about one instruction (see above).
struct PlanFacts {
  // Dropout's global examples: micro-batches are rank-major (rank *
  // accumulate + micro_step), micro_batch examples each.
  uint64_t seed = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int64_t accumulate = 1;
  int micro_step = 0;  // the instruction's (0 outside the micro-steps)
  // The operands' element types: bit j set where input (output) j is f32,
  // or bf16.
  uint32_t f32_inputs = 0, bf16_inputs = 0, f32_outputs = 0, bf16_outputs = 0;
  // The bucket of attr bucket (sum_squares, optimizer): its gradient slot
  // in floats, -1 when the instruction names no bucket of the plan; one
  // rank's ZeRO shard in floats (0: none); and what each input is to it.
  int64_t bucket_elems = -1;
  int64_t shard_elems = 0;
  static constexpr int kMaxInputs = 8;
  BucketRole inputs[kMaxInputs] = {};
  OptimizerFacts optimizer;
};

// Elements of a tensor of `shape` (1 for a scalar []).
inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// attrs[name], or `fallback` where the instruction has none.
inline double Attr(const std::map<std::string, double>& attrs, const char* name,
                   double fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : it->second;
}

// A normalization over the last axis: `width` the elements of the
// per-feature operand ([d]: the weight or its gradient), `rows` the rest of
// x. "" or why x is not [rows, width].
inline std::string RowsOf(const std::vector<int64_t>& x, const std::vector<int64_t>& per_feature,
                          int64_t* rows, int64_t* width) {
  *width = Elements(per_feature);
  if (*width == 0 || Elements(x) % *width != 0) return "x is not [B, d]";
  *rows = Elements(x) / *width;
  return "";
}

// A kernel over a bucket (sum_squares, the optimizer) that covers `floats`
// of it: under ZeRO (attr shard) one rank's shard, *shard its floats (0:
// the whole). "" or why not.
inline std::string ShardOfBucket(const std::map<std::string, double>& attrs,
                                 const PlanFacts& plan, int64_t floats, int64_t* shard) {
  *shard = 0;
  if (Attr(attrs, "shard", 0) == 0) return "";
  if (plan.shard_elems <= 0) return "attr shard on a bucket without shards";
  if (plan.shard_elems > floats) return "shard larger than its bucket";
  *shard = plan.shard_elems;
  return "";
}

// Its gradients (`role` to the bucket, `elements` floats): the bucket's,
// holding at least `floats`, or under ZeRO-2 its gradient shard, which
// holds the rank's `shard` alone (*sharded). "" or why not.
inline std::string BucketGrads(BucketRole role, int64_t elements, int64_t floats, int64_t shard,
                               bool* sharded) {
  *sharded = false;
  if (role == BucketRole::kGrads) return floats > elements ? "bucket larger than its buffer" : "";
  if (role != BucketRole::kGradShard) {
    return "the gradients are neither its bucket nor its gradient shard";
  }
  if (shard == 0) return "a gradient shard needs attr shard";
  if (elements != shard) return "gradient shard of the wrong size";
  *sharded = true;
  return "";
}

template <typename Family, typename = void>
struct HasIds : std::false_type {};
template <typename Family>
struct HasIds<Family, std::void_t<decltype(Family::IdsInput(KernelOp{}))>> : std::true_type {};

// The input `op` reads as i32 ids; -1 for none.
template <typename Family>
int IdsInputOf(KernelOp op) {
  if constexpr (HasIds<Family>::value) {
    return Family::IdsInput(op);
  } else {
    return -1;
  }
}

template <typename Args, typename = void>
struct HasTraining : std::false_type {};
template <typename Args>
struct HasTraining<Args, std::void_t<decltype(std::declval<Args&>().training)>> : std::true_type {};

template <typename Args, typename = void>
struct HasBf16Outputs : std::false_type {};
template <typename Args>
struct HasBf16Outputs<Args, std::void_t<decltype(Args::bf16_outputs)>> : std::true_type {};

template <typename Family, typename = void>
struct HasF32Operands : std::false_type {};
template <typename Family>
struct HasF32Operands<Family, std::void_t<decltype(Family::F32Operand(KernelOp{}, false, 0))>>
    : std::true_type {};

// Whether input (output: `output`) j of `op` must be an f32 tensor.
template <typename Family>
bool F32OperandOf(KernelOp op, bool output, int j) {
  if constexpr (HasF32Operands<Family>::value) {
    return Family::F32Operand(op, output, j);
  } else {
    return false;
  }
}

template <typename Family, typename = void>
struct HasOwnCpuKernel : std::false_type {};
template <typename Family>
struct HasOwnCpuKernel<Family, std::void_t<decltype(Family::kOwnCpuKernel)>>
    : std::bool_constant<Family::kOwnCpuKernel> {};

template <typename Args, typename = void>
struct HasStep : std::false_type {};
template <typename Args>
struct HasStep<Args, std::void_t<decltype(std::declval<Args&>().step)>>
    : std::is_same<decltype(std::declval<Args&>().step), Step> {};

template <typename Family, typename = void>
struct HasPlanFacts : std::false_type {};
template <typename Family>
struct HasPlanFacts<Family,
                    std::void_t<decltype(Family::Resolve(
                        KernelOp{}, std::declval<const std::vector<std::vector<int64_t>>&>(),
                        std::declval<const std::vector<std::vector<int64_t>>&>(),
                        std::declval<const std::map<std::string, double>&>(),
                        std::declval<const PlanFacts&>(),
                        static_cast<typename Family::Args*>(nullptr)))>> : std::true_type {};

// `a` for one step: its `training` or `step` set, if it has one.
template <typename Args>
Args ForStep(const Args& a, const Step& step) {
  Args now = a;
  if constexpr (HasTraining<Args>::value) now.training = step.training;
  if constexpr (HasStep<Args>::value) now.step = step;
  return now;
}

template <typename Family, typename = void>
struct HasKernelOf : std::false_type {};
template <typename Family>
struct HasKernelOf<Family, std::void_t<decltype(Family::KernelOf(KernelOp{},
                                                                 std::declval<const PlanFacts&>()))>>
    : std::true_type {};

// The kernel of `Family` that runs instruction op `op` (its first kernel).
template <typename Family>
KernelOp KernelOfUnit(KernelOp op, const PlanFacts& facts) {
  if constexpr (HasKernelOf<Family>::value) {
    return Family::KernelOf(op, facts);
  } else {
    return op;
  }
}

// Family::Resolve, given `facts` where it reads them: "" or why not.
template <typename Family>
std::string ResolveUnit(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                        const std::vector<std::vector<int64_t>>& out,
                        const std::map<std::string, double>& attrs, const PlanFacts& facts,
                        typename Family::Args* a) {
  if constexpr (HasPlanFacts<Family>::value) {
    return Family::Resolve(op, in, out, attrs, facts, a);
  } else {
    return Family::Resolve(op, in, out, attrs, a);
  }
}

// Runs kernel `op` of `Family` on element type T: "" or why not. Always
// inlined, so that a Run<float> inlined here (swiglu's) lands in the CPU's
// SIMD clones (runtime/cpu/kernels.cc), compiled for their ISA.
template <typename Family, typename T>
__attribute__((always_inline)) inline std::string RunUnit(KernelOp op,
                                                          const typename Family::Args& a,
                                                          const T* const* x, T* const* y,
                                                          bool accumulate) {
  using Result = decltype(Family::template Run<T>(op, a, x, y, accumulate));
  if constexpr (std::is_void_v<Result>) {
    Family::template Run<T>(op, a, x, y, accumulate);
    return "";
  } else {
    return Family::template Run<T>(op, a, x, y, accumulate);
  }
}

}  // namespace trainc::ops::unit

#endif  // TRAINC_COMPILER_OPS_UNIT_FAMILY_H_
