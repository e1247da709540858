// KernelArgs: a plan's compute instructions resolved once into plain
// values (op, sizes, arena pointers), for every backend.
//
//   ASSIGN_OR_RETURN(std::vector<KernelArgs> kernels,
//                    ResolveKernels(plan, arena, arena_bytes, "cpu"));
//   ... RunKernel(instr) reads kernels[instr.id], no lookups ...
//
// ResolveKernels checks every instruction against the op table (arity,
// buffer ids, sizes, the optimizer's bucket spans); one instruction is one
// kernel (fusions are the plan's: compiler/graph/pipeline.h). A backend
// adds what only it needs (scratch sizes, library descriptors) after.
#ifndef TRAINC_RUNTIME_DEVICE_KERNEL_ARGS_H_
#define TRAINC_RUNTIME_DEVICE_KERNEL_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_ops.h"

namespace trainc {

// precision = bf16: an operand stored as bf16 in the arena. The kernels
// compute in f32 on KernelArgs::x / y as usual; for a staged operand those
// point at f32 staging (AssignBf16Staging), which the device fills from
// the bf16 tensor before the kernel (inputs; outputs of an accumulating
// kernel too) and rounds back to it after (outputs).
struct Bf16Operand {
  void* bf16 = nullptr;   // the tensor in the arena (uint16 values)
  float* f32 = nullptr;   // its staging
  int64_t elems = 0;
  bool output = false;
  // A backend whose kernel reads or writes this operand as bf16 itself
  // (CUDA's) sets it before AssignBf16Staging: the operand gets no staging,
  // no widening or rounding around the kernel, and its x / y slot keeps the
  // tensor's address.
  bool native = false;
};

// One instruction with everything a kernel needs as plain values. The
// sizes and operands are common to all; each field below them belongs to
// one family of ops and means one thing.
struct KernelArgs {
  KernelOp op = KernelOp::kNotCompute;
  bool accumulate = false;  // outputs += the result (gradients)
  int64_t rows = 0;  // pointwise: elements
  const float* x[5] = {};
  float* y[4] = {};  // add_layernorm writes four

  // Each unit family's sizes (compiler/ops/kernel_families.h):
  // ops::<Family>Family::Args <snake> (linear, window, layer_norm, ...).
#define TRAINC_UNIT_ARGS_FIELD(Fam, snake) ops::Fam##Family::Args snake;
  TRAINC_UNIT_FAMILIES(TRAINC_UNIT_ARGS_FIELD)
#undef TRAINC_UNIT_ARGS_FIELD
  // Ops with a workspace (ops::OpDef::workspace): the plan's reservation.
  char* workspace = nullptr;
  int64_t workspace_bytes = 0;
  // bf16 operands, inputs first (x order, then y order).
  Bf16Operand bf16[8];
  int num_bf16 = 0;
};

// Bytes of f32 staging the kernels' bf16 operands need: the largest
// instruction's, each operand 64-byte aligned (kernels run one at a time,
// so they share it). 0 for an all-f32 plan. A native operand needs none.
int64_t Bf16StagingBytes(const std::vector<KernelArgs>& kernels);
int64_t Bf16StagingBytes(const KernelArgs& k);  // one instruction's

// Points every bf16 operand's x / y at its staging inside `staging` (of
// Bf16StagingBytes), before a backend derives anything from the pointers.
// A native operand keeps its tensor's address there.
void AssignBf16Staging(std::vector<KernelArgs>& kernels, char* staging);
void AssignBf16Staging(KernelArgs& k, char* staging);  // one instruction's

// linear_grad_input_gelu: the workspace its kernels need on either
// backend, room for dh in f32 where dpre accumulates (the product cannot be
// formed in dpre then); 0 otherwise, dh being formed in dpre.
int64_t LinearGradInputGeluWorkspaceBytes(const KernelArgs& k);

// precision = bf16: the operand staged behind output y[j] (its f32 staging
// is y[j]), or null when that output is not a staged bf16 tensor. A kernel
// that reads back its own output (linear_gelu's pre; add_layernorm's sum:
// ops::LayerNormFamily::Args::bf16_outputs) rounds it first, as the bf16
// tensor a separate instruction would read.
const Bf16Operand* StagedOutput(const KernelArgs& k, int j);

// True for the ops a device runs (everything but load_batch and
// all_reduce, which the executor handles).
bool IsKernelOp(absl::string_view op);

// Resolves every instruction of `plan` (indexed by instruction id) against
// an arena at `arena` of `arena_bytes`. Errors start with `device_name`.
absl::StatusOr<std::vector<KernelArgs>> ResolveKernels(
    const Plan& plan, char* arena, int64_t arena_bytes,
    const std::string& device_name);

// A backend without an op's kernel says so when it prepares the plan, not
// in the middle of a step: the first instruction that runs a kernel (not
// kNotCompute) for which `has(op, instruction id)` is false
// fails, naming the backend, the instruction and its op.
absl::Status MissingKernelError(const Instruction& instr, KernelOp op,
                                const std::string& device_name);
template <typename K>
absl::Status CheckKernels(const Plan& plan, const std::vector<K>& kernels,
                          const std::string& device_name,
                          absl::FunctionRef<bool(KernelOp, int)> has) {
  for (size_t i = 0; i < kernels.size() && i < plan.instructions.size(); ++i) {
    const KernelOp op = kernels[i].op;
    if (op == KernelOp::kNotCompute) continue;
    if (!has(op, static_cast<int>(i))) {
      return MissingKernelError(plan.instructions[i], op, device_name);
    }
  }
  return absl::OkStatus();
}

// Convolution and pooling (KernelFamily::kWindow): the geometry is in
// KernelArgs::window and the last output is the instruction's workspace.
bool IsWindowOp(KernelOp op);

// One instruction resolved without an arena (pointers left null): what a
// backend needs to size its workspace (PlanOptions::workspace) before the
// plan's memory is laid out.
absl::StatusOr<KernelArgs> DescribeKernel(const Plan& plan,
                                          const Instruction& instr,
                                          const std::string& device_name);

// Elements of a buffer.
inline int64_t Elements(const Buffer& b) { return b.bytes / DTypeBytes(b.dtype); }

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_KERNEL_ARGS_H_
