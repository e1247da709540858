// What the CUDA backend resolves each instruction into (Kernel: the
// instruction's KernelArgs plus this backend's own fields) and what
// preparing a plan's kernels needs (KernelNeeds, Refuse). Internal to
// runtime/cuda: shared by the device (cuda_device_impl.h) and the programs
// of the families prepared per plan (cublas_linear.h: linear).
#ifndef TRAINC_RUNTIME_CUDA_PREPARED_H_
#define TRAINC_RUNTIME_CUDA_PREPARED_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cuda_internal {

// Instructions resolved once by Prepare (runtime/device/kernel_args.h).
using Op = KernelOp;

// A resolved instruction plus what only this backend needs.
struct Kernel : KernelArgs {
  Kernel() = default;
  explicit Kernel(const KernelArgs& args) : KernelArgs(args) {}
  int lt = -1;  // linear: index into CublasLinear's matmuls (cublas_linear.h)
  // precision = bf16, the linear ops: x[0] and x[1] as the bf16 tensors
  // they are staged from, multiplied by a bf16 GEMM with f32 accumulation
  // and an f32 result (null: an f32 GEMM on x).
  const void* gemm_bf16[2] = {nullptr, nullptr};
  // precision = bf16, linear, linear_gelu and linear_grad_input with bf16
  // GEMM operands: their bf16 outputs (y[0]; linear_gelu's y[1] too),
  // which cuBLAS writes itself, rounding its f32 result (plus the bias)
  // once (UseBf16Gemm); null: f32 outputs (staged or not).
  void* gemm_out_bf16[2] = {nullptr, nullptr};
  // ... and then a bf16 bias read as it is (x[2] holds the tensor).
  bool bias_bf16 = false;
  // ... linear_grad_input_gelu with bf16 dpre: its bf16 pre read as it is
  // (x[2] holds the tensor), the DGELU epilogue's aux of D's type.
  bool pre_bf16 = false;
  // precision = bf16, a unit family's operands its CUDA kernels read or
  // write as bf16 themselves (cuda::UnitLaunch::bf16): cross_entropy_fused
  // whose logits (x[0]) and dlogits (y[1]) are bf16 (UseBf16Classifier),
  // add_layernorm whose b (x[1]) is (UseBf16AddLayerNorm), attention(_grad)
  // whose qkv, y, dy and dqkv are (UseBf16Attention), dropout(_grad) and
  // reshape of a bf16 tensor into one (UseBf16Dropout, UseBf16Reshape),
  // swiglu(_grad) of bf16 operands alone (UseBf16SwiGlu); their slots hold
  // the tensors.
  bool unit_bf16 = false;
  // precision = bf16, a pointwise op: bit 0, 1, 2 set where a, b, y is a
  // bf16 tensor (its x / y slot then holds it), which the kernel reads or
  // writes itself (UseBf16Pointwise); 0: f32 operands.
  unsigned pointwise_bf16 = 0;
};

// What a plan's kernels need from Prepare besides their arguments.
struct KernelNeeds {
  int64_t scratch_floats = 1;  // the kernel scratch, the largest kernel's
};

// "<device>: instruction <id> (<op> "<label>"): <why>", a plan refused at
// Prepare. (cuda_kernels.cc)
absl::Status Refuse(const Instruction& instr, const std::string& device_name,
                    const std::string& why);

}  // namespace trainc::cuda_internal

#endif  // TRAINC_RUNTIME_CUDA_PREPARED_H_
