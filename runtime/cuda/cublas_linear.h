// The linear family's CUDA kernel (compiler/ops/linear_family.h, a family
// prepared per plan: compiler/ops/unit_family.h) and the programs it runs:
// cuBLAS and cublasLt on one GPU (internal to the CUDA backend;
// CudaDeviceImpl owns one CublasLinear, as it owns cuDNN's CudnnOps).
//
//   CublasLinear linear;
//   RETURN_IF_ERROR(linear.Init(compute_stream));  // handles, workspace
//   linear.Clear();                                // a new plan
//   RETURN_IF_ERROR(linear.Add(k.linear, k, instr, tf32, name, &needs));
//   ... RETURN_IF_ERROR(linear.Run(k.linear, k, scratch)); ...  // enqueues
//
// The forward products and linear_grad_input_gelu are one cublasLt matmul
// each, built when the plan is prepared, whose epilogue adds the bias and
// applies ReLU (linear_relu without pre), GELU (linear_gelu, writing pre as
// its aux) or the GELU gradient (linear_grad_input_gelu, reading pre);
// without an algorithm for it, cublasGemmEx and the bias and activation
// kernels (kernels.h), as the unfused plan runs them. The other products
// are cublasGemmEx calls. Under precision = bf16 the operands, outputs and
// bias UseBf16Gemm marks native are read and written as bf16 (Kernel's
// gemm_bf16, gemm_out_bf16, bias_bf16, pre_bf16).
#ifndef TRAINC_RUNTIME_CUDA_CUBLAS_LINEAR_H_
#define TRAINC_RUNTIME_CUDA_CUBLAS_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ops/linear_family.h"
#include "compiler/plan/plan.h"
#include "runtime/cuda/prepared.h"

namespace trainc::cuda_internal {

// cuBLAS/cublasLt share one workspace: they run on the compute stream only,
// so their uses never overlap. A fixed workspace (instead of cuBLAS's own
// allocations) is also what CUDA-graph capture requires.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;

// precision = bf16: a linear op whose two GEMM operands are both bf16
// reads them as they are (Kernel::gemm_bf16), the bias gradient's column
// sum reading dy as bf16 too; its bf16 outputs are cuBLAS's D (and
// linear_gelu's aux); linear_relu, linear_tanh and linear_gelu_erf (their
// activation reads y in f32 after the GEMM) stay staged;
// linear_grad_input_gelu's bf16 dpre with its bf16 pre (the DGELU aux),
// both or neither.
// (cublas_linear.cc)
void UseBf16Gemm(Kernel& k);

class CublasLinear {
 public:
  CublasLinear() = default;
  ~CublasLinear();  // call with the handles' GPU current, its stream idle
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  // Creates the cuBLAS and cublasLt handles on the current GPU and their
  // workspace, bound to `stream`: every call of Run enqueues there.
  absl::Status Init(cudaStream_t stream);

  // Forgets every instruction's matmul (no queued work may use them).
  void Clear();

  // Prepares linear instruction `instr`, resolved as `k` (with arena
  // pointers), TF32 math when `tf32`: checks it against cuBLAS's int range,
  // adds the bias gradient's scratch to *needs and builds its cublasLt
  // matmul (k.lt). Fails, naming the instruction, on a refusal.
  absl::Status Add(const ops::LinearFamily::Args& l, Kernel& k, const Instruction& instr,
                   bool tf32, const std::string& device_name, KernelNeeds* needs);

  // Enqueues `k` (one of those added) on the stream; `scratch`: the kernel
  // scratch, at least what Add asked for.
  absl::Status Run(const ops::LinearFamily::Args& l, const Kernel& k, float* scratch);

 private:
  // A forward linear as one cublasLt call: y = x w^T + b (D = op(A) B +
  // bias in cuBLAS's column-major view, see cublas_linear.cc), optionally
  // with ReLU; or linear_gelu's GEMM with the GELU epilogue writing pre as
  // its aux; or linear_grad_input_gelu's dy w with the DGELU epilogue
  // reading pre.
  struct LtMatmul {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool usable = false;  // false: fall back to cublasGemmEx + bias kernel

    void Destroy();
  };

  // Appends k's cublasLt matmul to lt_matmuls_ (at *index), usable when
  // cublasLt has an algorithm for it.
  absl::Status BuildLtMatmul(const Kernel& k, bool tf32, int* index);
  absl::Status DescribeLtMatmul(const Kernel& k, bool tf32, LtMatmul& m);
  absl::Status FindLtAlgorithm(const Kernel& k, LtMatmul& m);
  absl::Status RunLinear(const Kernel& k);
  absl::Status RunLinearGradInputGelu(const Kernel& k);
  absl::Status RunLinearGradParams(const Kernel& k, float* scratch);
  // Runs lt_matmuls_[k.lt] when usable (alpha 1, beta 0): false when it
  // has no algorithm, or cublasLt rejects the call (nothing enqueued; the
  // kernel falls back from then on).
  absl::StatusOr<bool> RunLtMatmul(const Kernel& k);
  absl::Status RunLinearBf16Fallback(const Kernel& k);
  absl::Status RunFusedActivation(const Kernel& k);
  // C = A B (+ beta C), accumulated in f32; A and B f32, or bf16 when
  // `ab` says so; C f32, or bf16 (rounded once) when `c_type` says so.
  absl::Status Gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                    int64_t n, int64_t k, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float beta, void* c,
                    int64_t ldc, cudaDataType_t ab = CUDA_R_32F,
                    cudaDataType_t c_type = CUDA_R_32F);

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;  // kBlasWorkspaceBytes, both handles'
  bool tf32_ = false;          // the plan's (Add), for cublasGemmEx
  std::vector<LtMatmul> lt_matmuls_;
};

}  // namespace trainc::cuda_internal

#endif  // TRAINC_RUNTIME_CUDA_CUBLAS_LINEAR_H_
