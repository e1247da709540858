// precision = bf16 on the CPU: the linear family's matrix products on
// oneDNN's bf16 kernels (avx512_core_bf16, AMX). The two bf16 operands are
// read from the arena as they are (marked native: no f32 staging); their
// products are exact in f32 and accumulate in f32 into an f32 destination,
// the output's staging when the output is bf16, which the device rounds to
// nearest even after the kernel as before. The bias, the activation and
// the bias gradient stay the f32 loops of kernels.h. Bf16Gemm below runs
// the products of a kernel that makes its own bf16 operands (attention's
// blocks, attention.h).
//
//   Bf16Matmuls matmuls;
//   matmuls.Choose(kernels);              // before AssignBf16Staging
//   AssignBf16Staging(kernels, staging);
//   RETURN_IF_ERROR(matmuls.Bind(kernels));
//   ... if (matmuls.Runs(id)) RETURN_IF_ERROR(matmuls.Run(id)); ...
//
// One primitive per product shape, shared by the instructions of that
// shape; the scratchpad is one block, allocated in Bind (kernels run one at
// a time). Where oneDNN offers no bf16 kernel (a CPU without avx512_bf16,
// or ONEDNN_MAX_CPU_ISA below it), or with TRAINC_BF16_GEMM=widened in the
// environment, nothing is chosen: the operands stay staged and the f32
// GEMM (gemm.h) multiplies the widened values, as before.
//
// Determinism: a shape gives the same bits call after call and wherever
// its operands lie (bf16_matmul_test), and deterministic mode runs the same
// shapes on every split, so it holds as with f32. Rows do depend on the row
// count (oneDNN picks its K blocking, and below a few rows its kernel, by
// shape; dnnl_sgemm does too).
//
// Rounding: each product is exact in f32 and the sums are f32 sums in
// oneDNN's order, not OpenBLAS's (PyTorch's on Debian): a few outputs round
// to the neighbouring bf16, and a relu gate at a pre-activation near 0 can
// then open differently, which moves a short run's weights by up to ~1e-2
// of their update (docs/train-settings.md).
#ifndef TRAINC_RUNTIME_CPU_BF16_MATMUL_H_
#define TRAINC_RUNTIME_CPU_BF16_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

// A row-major product C[m,n] (+)= op(A) op(B), op(X) = X or X^T, with row
// strides lda, ldb, ldc, as gemm.h's Sgemm takes it; A and B f32 or bf16.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  // Bf16Gemm only: `batch` such products, the i-th at a + i stride_a (in
  // elements), b + i stride_b, c + i stride_c. oneDNN's bf16 kernels take
  // a batch only when it is dense (each stride the size of its matrix).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// The linear family's ops with a matrix product: linear, linear_<act>,
// linear_gelu, linear_grad_input(_gelu), linear_grad_params.
bool IsLinearProduct(KernelOp op);

// The product of such an instruction: y = x w^T; dx (+)= dy w; dw (+)=
// dy^T x. linear_grad_input_gelu forms dh (in its workspace when dpre
// accumulates, else in dpre).
GemmCall LinearGemmOf(const KernelArgs& k);

// `g` on f32 operands, through Sgemm.
void RunF32(const GemmCall& g);

// What the bf16 products run on, for the run summary and cpu_bench:
// "oneDNN matmul, brg:avx512_core_amx_bf16 kernels", or why they are f32
// GEMMs on widened operands (and that TRAINC_BF16_GEMM=widened asked for
// it). Probed once per process on a GPT-like shape.
std::string Bf16GemmSummary();

// bf16 products for a kernel that forms its own bf16 operands (attention's
// blocks: attention.h), each shape's primitive created on its first Run
// and kept (JIT code and all; one scratchpad, grown to the largest). One
// per thread: Run is not thread-safe.
class Bf16Gemm {
 public:
  // Whether products can run on oneDNN's bf16 kernels: the CPU has them
  // (probed once per process: Bf16GemmSummary) and TRAINC_BF16_GEMM is not
  // "widened" (read on each call: ask once per plan, as
  // attention.h's PrepareAttention does, not per product).
  static bool Native();

  Bf16Gemm();
  ~Bf16Gemm();

  // g with bf16 a and b, f32 c. An error when oneDNN has no bf16 kernel
  // for g's shape (not its reference loops, nor a gemm that widens), or
  // its own.
  absl::Status Run(const GemmCall& g);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class Bf16Matmuls {
 public:
  Bf16Matmuls();
  ~Bf16Matmuls();

  // Marks native the two bf16 operands of every linear product that
  // oneDNN runs with a bf16 kernel (both operands bf16; the output's type
  // does not matter). Before AssignBf16Staging, while the x slots hold the
  // tensors.
  void Choose(std::vector<KernelArgs>& kernels);

  // After AssignBf16Staging: the primitives, every chosen instruction's
  // operands and the scratchpad. Errors are oneDNN's.
  absl::Status Bind(const std::vector<KernelArgs>& kernels);

  bool Runs(int id) const;
  absl::Status Run(int id);  // the product of LinearGemmOf, only

  int64_t scratch_bytes() const;  // Bind's allocation

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_BF16_MATMUL_H_
