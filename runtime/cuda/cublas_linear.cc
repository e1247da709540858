// The linear family on cuBLAS and cublasLt (cublas_linear.h): a cublasLt
// matmul with fused bias/ReLU, or bias/GELU writing the pre-activation too
// for linear_gelu, or the GELU gradient reading it for
// linear_grad_input_gelu; or cublasGemmEx.
#include "runtime/cuda/cublas_linear.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels.h"

namespace trainc::cuda_internal {

// Row-major y[B,out] = x[B,in] w[out,in]^T is, in cuBLAS's column-major
// view, Y'[out,B] = W'^T X' with W' = w as [in,out] (ld in) and X' = x as
// [in,B] (ld in): transa = T, transb = N, m = out, n = B, k = in. The bias
// epilogue adds bias[m] down each column, i.e. b[out] to every row of y.
// With bf16 operands (Kernel::gemm_bf16) A and B are bf16, the product
// accumulates in f32, and the f32 bias is added to the f32 result before
// the one rounding to bf16, as on the CPU: by cublasLt itself into a bf16
// D (Kernel::gemm_out_bf16), else into y's f32 staging, rounded after.
//
// linear_gelu: the GELU_AUX(_BIAS) epilogue writes D = gelu_tanh(x w^T + b)
// into y (y[1]) and the pre-activation x w^T + b into pre (y[0]) as its
// aux matrix, [out, B] column-major with leading dimension out, which
// cublasLt takes only when out is a multiple of 8 (otherwise RunLinear's
// fallback: the GEMM and bias, then the gelu_tanh kernel). The aux has D's
// type, and cublasLt's GELU reads the unrounded pre, where the unfused
// plan's gelu_tanh reads it rounded to bf16; and its GELU is its own tanh
// form, not compiler/ops/pointwise.h's: the fused instruction is close to,
// not the bits of, the unfused two on the GPU.
//
// linear_grad_input_gelu: dx[B,in] = dy[B,out] w[out,in] is DX'[in,B] =
// W'[in,out] DY'[out,B] (transa = N, transb = N, m = in, n = B, k = out),
// and the DGELU epilogue multiplies it by gelu_tanh'(pre) into dpre: pre
// is the aux input, [in, B] with leading dimension in (the forward's
// layout: in is the forward's out), of D's type, which cublasLt takes only
// when in is a multiple of 8. The product is not rounded to bf16 before
// the gradient, where the unfused plan's dh is a bf16 tensor, and the GELU
// is cublasLt's: close to, not the bits of, the unfused two. It cannot
// accumulate (the epilogue would apply to the sum): an accumulating one,
// in not a multiple of 8 or no algorithm is RunLinearGradInputGelu's
// fallback.
namespace {

absl::Status LtOk(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return cuda::CublasErrorToStatus(st, what, __FILE__, __LINE__);
}

// Sets one attribute of the matmul's descriptor (m: a CublasLinear's
// LtMatmul).
template <typename Matmul, typename T>
absl::Status SetLtAttribute(const Matmul& m, cublasLtMatmulDescAttributes_t attr,
                            const T& value, const char* what) {
  return LtOk(cublasLtMatmulDescSetAttribute(m.desc, attr, &value, sizeof(value)), what);
}

// linear_relu without pre (the plan keeps none: nothing else reads it):
// cublasLt's RELU(_BIAS) epilogue writes y, the only output.
bool ReluEpilogue(const Kernel& k) {
  return k.linear.act == Activation::kRelu && k.y[1] == nullptr;
}
// What a forward linear's GEMM writes as D: y[0] (the linear's output,
// or linear_relu's y by the epilogue), or linear_gelu's y (the aux then
// pre); bf16 where gemm_out_bf16 says so.
void* LinearOutput(const Kernel& k) {
  const int j = k.op == Op::kLinearGelu ? 1 : 0;
  return k.gemm_out_bf16[0] != nullptr ? k.gemm_out_bf16[j] : static_cast<void*>(k.y[j]);
}
// linear_gelu's pre-activation (the epilogue's aux).
void* LinearPre(const Kernel& k) {
  return k.gemm_out_bf16[0] != nullptr ? k.gemm_out_bf16[0] : static_cast<void*>(k.y[0]);
}
cudaDataType_t OutType(const Kernel& k) {
  return k.gemm_out_bf16[0] != nullptr ? CUDA_R_16BF : CUDA_R_32F;
}
// The two operands of a linear op's GEMM: bf16 when gemm_bf16 is set.
const void* GemmOperand(const Kernel& k, int i) {
  return k.gemm_bf16[i] != nullptr ? k.gemm_bf16[i] : k.x[i];
}
cudaDataType_t GemmType(const Kernel& k) {
  return k.gemm_bf16[0] != nullptr ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace

void CublasLinear::LtMatmul::Destroy() {
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (desc) cublasLtMatmulDescDestroy(desc);
  *this = LtMatmul();
}

CublasLinear::~CublasLinear() {
  Clear();
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
}

absl::Status CublasLinear::Init(cudaStream_t stream) {
  stream_ = stream;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas_));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_, stream_));
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, kBlasWorkspaceBytes));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(blas_, workspace_, kBlasWorkspaceBytes));
  return absl::OkStatus();
}

void CublasLinear::Clear() {
  for (LtMatmul& m : lt_matmuls_) m.Destroy();
  lt_matmuls_.clear();
  tf32_ = false;  // the next plan's, from its first Add
}

absl::Status CublasLinear::BuildLtMatmul(const Kernel& k, bool tf32, int* index) {
  const bool dgelu = k.op == Op::kLinearGradInputGelu, gelu = k.op == Op::kLinearGelu;
  LtMatmul m;
  // No aux layout cublasLt accepts (RunLinear's fallback): kept unusable.
  const bool no_aux = (gelu && k.linear.out % 8 != 0) ||
                      (dgelu && (k.linear.in % 8 != 0 || k.accumulate));
  if (!no_aux) {
    if (absl::Status s = DescribeLtMatmul(k, tf32, m); !s.ok()) {
      m.Destroy();
      return s;
    }
    if (absl::Status s = FindLtAlgorithm(k, m); !s.ok()) {
      m.Destroy();
      return s;
    }
  }
  lt_matmuls_.push_back(m);
  *index = static_cast<int>(lt_matmuls_.size()) - 1;
  return absl::OkStatus();
}

// The descriptor (compute type, transposes, epilogue with its bias and aux
// operands) and the three layouts.
absl::Status CublasLinear::DescribeLtMatmul(const Kernel& k, bool tf32, LtMatmul& m) {
  const int64_t rows = k.linear.rows, in = k.linear.in, out = k.linear.out;
  const bool dgelu = k.op == Op::kLinearGradInputGelu;
  const bool bias = !dgelu && k.x[2] != nullptr, relu = ReluEpilogue(k);
  const bool gelu = k.op == Op::kLinearGelu;
  const cudaDataType_t ab = GemmType(k);
  // bf16 products are exact in f32: TF32 changes nothing there.
  const cublasComputeType_t compute =
      tf32 && ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RETURN_IF_ERROR(LtOk(cublasLtMatmulDescCreate(&m.desc, compute, CUDA_R_32F),
                       "cublasLtMatmulDescCreate"));
  const cublasOperation_t ta = dgelu ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA"));
  RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB"));
  const cublasLtEpilogue_t epilogue =
      dgelu  ? CUBLASLT_EPILOGUE_DGELU
      : gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
      : bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
             : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE"));
  if (bias) {
    // f32, or bf16 beside a bf16 D (Kernel::bias_bf16); said outright. The
    // pointer is fixed by Prepare; set now, the heuristic sees its
    // alignment (64 bytes) rather than assuming a null one's.
    const cudaDataType_t bias_type = k.bias_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    RETURN_IF_ERROR(
        SetLtAttribute(m, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "BIAS_DATA_TYPE"));
    RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_BIAS_POINTER, k.x[2], "BIAS_POINTER"));
  }
  const cudaDataType_t d_type = OutType(k);
  if (gelu || dgelu) {
    // pre: [out, B] with leading dimension out (linear_grad_input_gelu's:
    // [in, B], ld in), of D's type (said outright; its pointer set now, as
    // the bias's).
    const void* aux = dgelu ? static_cast<const void*>(k.x[2]) : LinearPre(k);
    const int64_t aux_ld = dgelu ? in : out;
    RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "AUX_POINTER"));
    RETURN_IF_ERROR(SetLtAttribute(m, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, "AUX_LD"));
    RETURN_IF_ERROR(
        SetLtAttribute(m, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, d_type, "AUX_DATA_TYPE"));
  }
  RETURN_IF_ERROR(LtOk(cublasLtMatrixLayoutCreate(&m.a, ab, in, out, in), "layout A"));
  // B and D: X'[in, B] and Y'[out, B]; for the input gradient DY'[out, B]
  // and DX'[in, B].
  const int64_t b_rows = dgelu ? out : in, d_rows = dgelu ? in : out;
  RETURN_IF_ERROR(LtOk(cublasLtMatrixLayoutCreate(&m.b, ab, b_rows, rows, b_rows), "layout B"));
  return LtOk(cublasLtMatrixLayoutCreate(&m.d, d_type, d_rows, rows, d_rows), "layout D");
}

// cublasLt's best algorithm for the described matmul within the workspace
// and the operands' real alignment: m.usable when one was found. None (or
// an unsupported epilogue) is not an error: RunLinear falls back to
// cublasGemmEx plus the bias kernel.
absl::Status CublasLinear::FindLtAlgorithm(const Kernel& k, LtMatmul& m) {
  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(
      LtOk(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  size_t ws = kBlasWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // The heuristic assumes 256-byte aligned operands unless told otherwise;
  // plan offsets are only 64-byte aligned, so say what these pointers are.
  const void* d = LinearOutput(k);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*>
      alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, GemmOperand(k, 1)},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, GemmOperand(k, 0)},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d}};
  for (const auto& [attr, ptr] : alignments) {
    if (st != CUBLAS_STATUS_SUCCESS) break;
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    uint32_t align = 256;
    while (align > 4 && address % align != 0) align /= 2;
    st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt_, m.desc, m.a, m.b, m.d, m.d, pref, 1, &result,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    m.algo = result.algo;
    m.usable = true;
  }
  return absl::OkStatus();
}

void UseBf16Gemm(Kernel& k) {
  if (k.op != Op::kLinear && k.op != Op::kLinearGelu && k.op != Op::kLinearGradInput &&
      k.op != Op::kLinearGradInputGelu && k.op != Op::kLinearGradParams) {
    return;
  }
  // Before the staging: a bf16 operand's x / y slot holds its tensor.
  Bf16Operand* operand[2] = {nullptr, nullptr};
  Bf16Operand* output[2] = {nullptr, nullptr};
  for (int i = 0; i < k.num_bf16; ++i) {
    Bf16Operand& o = k.bf16[i];
    for (int j = 0; j < 2; ++j) {
      if (!o.output && k.x[j] == o.bf16 && operand[j] == nullptr) operand[j] = &o;
      if (o.output && k.y[j] == o.bf16 && output[j] == nullptr) output[j] = &o;
    }
  }
  if (operand[0] == nullptr || operand[1] == nullptr) return;
  for (int j = 0; j < 2; ++j) {
    k.gemm_bf16[j] = operand[j]->bf16;
    operand[j]->native = true;
  }
  // The outputs cuBLAS writes: y, pre and y, or dx. A fused activation
  // (ReLU, GELU, tanh) reads y in f32 after the GEMM: those stay staged.
  const int outputs = k.op == Op::kLinearGelu ? 2 : 1;
  if (k.op == Op::kLinearGradParams || k.linear.act != Activation::kNone) return;
  for (int j = 0; j < outputs; ++j) {
    if (output[j] == nullptr) return;
  }
  if (k.op == Op::kLinearGradInputGelu) {
    // pre, the epilogue's aux (and the fallback's gelu_tanh_grad operand),
    // has dpre's type: bf16 with dpre, or both staged.
    for (int i = 0; i < k.num_bf16; ++i) {
      Bf16Operand& o = k.bf16[i];
      if (!o.output && k.x[2] == o.bf16) {
        k.pre_bf16 = true;
        o.native = true;
      }
    }
    if (!k.pre_bf16) return;
  }
  for (int j = 0; j < outputs; ++j) {
    k.gemm_out_bf16[j] = output[j]->bf16;
    output[j]->native = true;
  }
  // A bf16 bias beside bf16 outputs: cublasLt reads it as bf16 (widened
  // exactly, added in f32).
  for (int i = 0; i < k.num_bf16 && k.op != Op::kLinearGradInputGelu; ++i) {
    Bf16Operand& o = k.bf16[i];
    if (!o.output && k.x[2] != nullptr && k.x[2] == o.bf16) {
      k.bias_bf16 = true;
      o.native = true;
    }
  }
}

absl::Status CublasLinear::Gemm(cublasOperation_t ta, cublasOperation_t tb,
                                  int64_t m, int64_t n, int64_t k,
                                  const void* a, int64_t lda, const void* b,
                                  int64_t ldb, float beta, void* c,
                                  int64_t ldc, cudaDataType_t ab, cudaDataType_t c_type) {
  const float alpha = 1.0f;
  // bf16 products are exact in f32: TF32 changes nothing there.
  const cublasComputeType_t compute =
      tf32_ && ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      blas_, ta, tb, static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k), &alpha, a, ab, static_cast<int>(lda), b,
      ab, static_cast<int>(ldb), &beta, c, c_type,
      static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::StatusOr<bool> CublasLinear::RunLtMatmul(const Kernel& k) {
  LtMatmul& m = lt_matmuls_[k.lt];
  if (!m.usable) return false;
  void* d = LinearOutput(k);
  // The bias and aux pointers are in the descriptor since BuildLtMatmul.
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(lt_, m.desc, &alpha, GemmOperand(k, 1), m.a, GemmOperand(k, 0), m.b,
                     &beta, d, m.d, d, m.d, &m.algo, workspace_,
                     kBlasWorkspaceBytes, stream_);
  // An algorithm the heuristic offered but the call rejects (nothing was
  // enqueued) is not fatal: this instruction uses cublasGemmEx from now on.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    m.usable = false;
    return false;
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    return cuda::CublasErrorToStatus(st, "cublasLtMatmul", __FILE__, __LINE__);
  }
  return true;
}

absl::Status CublasLinear::RunLinear(const Kernel& k) {
  ASSIGN_OR_RETURN(const bool ran, RunLtMatmul(k));
  if (ran) return ReluEpilogue(k) ? absl::OkStatus() : RunFusedActivation(k);
  if (k.gemm_out_bf16[0] != nullptr) return RunLinearBf16Fallback(k);
  RETURN_IF_ERROR(Gemm(CUBLAS_OP_T, CUBLAS_OP_N, k.linear.out, k.linear.rows, k.linear.in, GemmOperand(k, 1), k.linear.in,
                       GemmOperand(k, 0), k.linear.in, 0.0f, k.y[0], k.linear.out, GemmType(k)));
  if (k.x[2] != nullptr) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchBiasAdd(k.y[0], k.x[2], k.linear.rows, k.linear.out, stream_));
  }
  const int64_t n = k.linear.rows * k.linear.out;
  if (k.op == Op::kLinearGelu) {
    // The fallback is the unfused plan's kernels: gelu_tanh reads pre as
    // that instruction would, under bf16 rounded to the bf16 tensor.
    if (const Bf16Operand* pre = StagedOutput(k, 0)) {
      CUDA_RETURN_IF_ERROR(cuda::LaunchToBf16(pre->f32, pre->bf16, pre->elems, stream_));
      CUDA_RETURN_IF_ERROR(cuda::LaunchFromBf16(pre->bf16, pre->f32, pre->elems, stream_));
    }
    CUDA_RETURN_IF_ERROR(
        cuda::LaunchPointwise(KernelOp::kGeluTanh, k.y[0], nullptr, k.y[1], n, false, stream_));
  }
  return RunFusedActivation(k);
}

// linear_grad_input_gelu: one cublasLt GEMM with the DGELU epilogue, or
// the unfused plan's kernels: the GEMM into dh (dpre itself, or where dpre
// accumulates the instruction's workspace), of dpre's type, then
// gelu_tanh_grad(dh, pre) into dpre (each element read before it is
// written). Staged (bf16 dpre not native): dh rounded to bf16 first, as
// the unfused plan's bf16 dh, through dpre's bf16 tensor (overwritten by
// the staging after the kernel).
absl::Status CublasLinear::RunLinearGradInputGelu(const Kernel& k) {
  ASSIGN_OR_RETURN(const bool ran, RunLtMatmul(k));
  if (ran) return absl::OkStatus();
  const int64_t n = k.linear.rows * k.linear.in;
  void* dh = LinearOutput(k);
  if (k.accumulate) {
    if (k.workspace_bytes < LinearGradInputGeluWorkspaceBytes(k)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda: linear_grad_input_gelu accumulating needs a workspace of ",
          LinearGradInputGeluWorkspaceBytes(k), " bytes, the plan has ", k.workspace_bytes,
          ": compile the plan with the GPU's workspace sizes (PlanOptions::workspace)"));
    }
    dh = k.workspace;
  }
  RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_N, k.linear.in, k.linear.rows, k.linear.out, GemmOperand(k, 1), k.linear.in,
                       GemmOperand(k, 0), k.linear.out, 0.0f, dh, k.linear.in, GemmType(k), OutType(k)));
  if (k.gemm_out_bf16[0] != nullptr) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchPointwiseBf16(KernelOp::kGeluTanhGrad, dh, k.x[2],
                                                   k.gemm_out_bf16[0], n, k.accumulate,
                                                   stream_));
    return absl::OkStatus();
  }
  float* dh_f32 = static_cast<float*>(dh);
  if (const Bf16Operand* dpre = StagedOutput(k, 0)) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchToBf16(dh_f32, dpre->bf16, n, stream_));
    CUDA_RETURN_IF_ERROR(cuda::LaunchFromBf16(dpre->bf16, dh_f32, n, stream_));
  }
  CUDA_RETURN_IF_ERROR(cuda::LaunchPointwise(KernelOp::kGeluTanhGrad, dh_f32, k.x[2], k.y[0], n,
                                             k.accumulate, stream_));
  return absl::OkStatus();
}

// Without a cublasLt algorithm, bf16 outputs: the bias rounded to bf16
// (exact: under bf16 it is a bf16 tensor) into every row of y (pre), then
// a bf16 GEMM adding its product to it (beta 1) with one rounding; then
// linear_gelu's gelu_tanh on the bf16 pre, as the unfused plan runs it.
absl::Status CublasLinear::RunLinearBf16Fallback(const Kernel& k) {
  void* pre = k.gemm_out_bf16[0];
  const bool bias = k.x[2] != nullptr;
  if (bias) {
    CUDA_RETURN_IF_ERROR(
        cuda::LaunchBiasRowsBf16(pre, k.x[2], k.bias_bf16, k.linear.rows, k.linear.out, stream_));
  }
  RETURN_IF_ERROR(Gemm(CUBLAS_OP_T, CUBLAS_OP_N, k.linear.out, k.linear.rows, k.linear.in, GemmOperand(k, 1), k.linear.in,
                       GemmOperand(k, 0), k.linear.in, bias ? 1.0f : 0.0f, pre, k.linear.out, GemmType(k),
                       CUDA_R_16BF));
  if (k.op == Op::kLinearGelu) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchPointwiseBf16(KernelOp::kGeluTanh, pre, nullptr,
                                                   k.gemm_out_bf16[1], k.linear.rows * k.linear.out, false,
                                                   stream_));
  }
  return absl::OkStatus();
}

// linear_relu, linear_tanh, linear_gelu_erf after their GEMM (not an
// epilogue's): the activation of y[0] into y[1] (pre kept), or over y[0]
// itself (no pre), an elementwise kernel as the unfused plan's.
absl::Status CublasLinear::RunFusedActivation(const Kernel& k) {
  const int64_t n = k.linear.rows * k.linear.out;
  float* y = k.y[1] != nullptr ? k.y[1] : k.y[0];
  switch (k.linear.act) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kRelu, k.y[0], nullptr, y, n, false, stream_));
      break;
    case Activation::kGelu:
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kGelu, k.y[0], nullptr, y, n, false, stream_));
      break;
    case Activation::kTanh:
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kTanh, k.y[0], nullptr, y, n, false, stream_));
      break;
  }
  return absl::OkStatus();
}

// The linear family's preparation (a family prepared per plan): cuBLAS's
// int range, the bias gradient's scratch, and a cublasLt matmul with its
// epilogue for the forward products and linear_grad_input_gelu.
absl::Status CublasLinear::Add(const ops::LinearFamily::Args& l, Kernel& k,
                               const Instruction& instr, bool tf32,
                               const std::string& device_name, KernelNeeds* needs) {
  tf32_ = tf32;
  if (l.rows > INT32_MAX || l.in > INT32_MAX || l.out > INT32_MAX) {
    return Refuse(instr, device_name, "matrix dimension beyond cuBLAS's int range");
  }
  if (k.op == Op::kLinearGradParams) {
    needs->scratch_floats =
        std::max(needs->scratch_floats, cuda::ColumnSumScratchFloats(l.rows, l.out));
  }
  if (k.op == Op::kLinear || k.op == Op::kLinearGelu || k.op == Op::kLinearGradInputGelu ||
      l.act != Activation::kNone) {
    RETURN_IF_ERROR(BuildLtMatmul(k, tf32, &k.lt));
  }
  return absl::OkStatus();
}

absl::Status CublasLinear::Run(const ops::LinearFamily::Args& l, const Kernel& k,
                               float* scratch) {
  switch (k.op) {
    case Op::kLinear:
    case Op::kLinearRelu:  // linear_relu without pre: the RELU epilogue
    case Op::kLinearTanh:
    case Op::kLinearGeluErf:
    case Op::kLinearGelu:  // one cublasLt GEMM with the GELU epilogue
      return RunLinear(k);
    case Op::kLinearGradInputGelu:  // ... with the DGELU epilogue
      return RunLinearGradInputGelu(k);
    case Op::kLinearGradInput:
      // dx[B,in] = dy[B,out] w[out,in]: DX'[in,B] = W'[in,out] DY'[out,B]
      // (a bf16 dx: accumulated in f32 onto the widened old dx, rounded once).
      return Gemm(CUBLAS_OP_N, CUBLAS_OP_N, l.in, l.rows, l.out, GemmOperand(k, 1), l.in,
                  GemmOperand(k, 0), l.out, k.accumulate ? 1.0f : 0.0f, LinearOutput(k), l.in,
                  GemmType(k), OutType(k));
    default:
      return RunLinearGradParams(k, scratch);
  }
}

// linear_grad_params: dw[out,in] = dy^T x: DW'[in,out] = X'[in,B]
// DY'[out,B]^T; then db, dy's column sums (dy bf16 when the GEMM read it
// so).
absl::Status CublasLinear::RunLinearGradParams(const Kernel& k, float* scratch) {
  const ops::LinearFamily::Args& l = k.linear;
  RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, l.rows, GemmOperand(k, 1), l.in,
                       GemmOperand(k, 0), l.out, k.accumulate ? 1.0f : 0.0f, k.y[0], l.in,
                       GemmType(k)));
  if (k.y[1] == nullptr) return absl::OkStatus();
  if (k.gemm_bf16[0] != nullptr) {
    CUDA_RETURN_IF_ERROR(cuda::LaunchColumnSumBf16(k.gemm_bf16[0], l.rows, l.out, k.y[1],
                                                   k.accumulate, scratch, stream_));
    return absl::OkStatus();
  }
  CUDA_RETURN_IF_ERROR(
      cuda::LaunchColumnSum(k.x[0], l.rows, l.out, k.y[1], k.accumulate, scratch, stream_));
  return absl::OkStatus();
}

}  // namespace trainc::cuda_internal
