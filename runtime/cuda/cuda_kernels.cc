// The CUDA backend's kernel table: for every KernelOp
// (runtime/device/kernel_ops.h) the function that enqueues one resolved
// instruction on the compute stream, over the launchers of kernels.h,
// cuBLAS(Lt) (cublaslt_gemm.cc) and cuDNN (cudnn_ops.h).
#include "runtime/cuda/cuda_kernels.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/unit_family.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_device_impl.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda_internal {

void UseBf16(Kernel& k) {
  UseBf16Gemm(k);
  UseBf16Pointwise(k);
  UseBf16Attention(k);
  UseBf16Classifier(k);
  UseBf16AddLayerNorm(k);
  UseBf16Reshape(k);
  UseBf16Dropout(k);
}

std::vector<Kernel> WithNativeBf16(const std::vector<KernelArgs>& resolved, int64_t* staging) {
  std::vector<Kernel> kernels(resolved.begin(), resolved.end());
  *staging = 0;
  for (Kernel& k : kernels) {
    UseBf16(k);
    *staging = std::max(*staging, Bf16StagingBytes(k));
  }
  return kernels;
}

namespace {

// Whether x[0] and y[out] are the instruction's bf16 operands, its only
// ones; if so both are marked native (their slots keep the tensors).
bool NativeInAndOut(Kernel& k, int out) {
  if (k.num_bf16 != 2 || k.bf16[0].output || k.bf16[0].bf16 != k.x[0] ||
      !k.bf16[1].output || k.bf16[1].bf16 != k.y[out]) {
    return false;
  }
  k.bf16[0].native = k.bf16[1].native = true;
  return true;
}

}  // namespace

void UseBf16Dropout(Kernel& k) {
  // x and y both bf16, read and written as they are.
  if (k.op == Op::kDropout || k.op == Op::kDropoutGrad) k.unit_bf16 = NativeInAndOut(k, 0);
}

void UseBf16Reshape(Kernel& k) {
  // A copy: bf16 in and out move as 2-byte values, nothing widened.
  if (k.op == Op::kReshape) k.unit_bf16 = NativeInAndOut(k, 0);
}

void UseBf16AddLayerNorm(Kernel& k) {
  // b (x[1]) the only bf16 operand: a bf16 branch into the f32 residual.
  if (k.op != Op::kAddLayerNorm || k.num_bf16 != 1) return;
  Bf16Operand& b = k.bf16[0];
  if (b.output || b.bf16 != k.x[1]) return;
  k.unit_bf16 = true;
  b.native = true;
}

void UseBf16Attention(Kernel& k) {
  if (k.op != Op::kAttention && k.op != Op::kAttentionGrad) return;
  // forward: qkv -> y (lse f32); backward: dy, qkv, y -> dqkv (lse, delta
  // f32). Inputs are recorded first, in x order, then the outputs: all of
  // these or none (mixed operands keep the f32 staging).
  const int inputs = k.op == Op::kAttention ? 1 : 3;
  if (k.num_bf16 != inputs + 1) return;
  for (int i = 0; i < inputs; ++i) {
    if (k.bf16[i].output || k.bf16[i].bf16 != k.x[i]) return;
  }
  const Bf16Operand& out = k.bf16[inputs];
  if (!out.output || out.bf16 != k.y[0]) return;
  k.unit_bf16 = true;
  for (int i = 0; i < k.num_bf16; ++i) k.bf16[i].native = true;
}

void UseBf16Classifier(Kernel& k) {
  // logits (x[0]) in, dlogits (y[1]) out, the loss f32: both or neither.
  if (k.op == Op::kCrossEntropyFused) k.unit_bf16 = NativeInAndOut(k, 1);
}

// Each family's preparation: the limits of its CUDA kernels and the
// scratch they need (KernelNeeds), checked once in Prepare.
using CudaPrepare = absl::Status (*)(const Kernel& k, const Instruction& instr,
                                     const std::string& device_name, KernelNeeds* needs);

absl::Status Refuse(const Instruction& instr, const std::string& device_name,
                    const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(device_name, ": instruction ", instr.id, " (",
                                                 instr.op, " \"", instr.label, "\"): ", why));
}

absl::Status PrepareLinear(const Kernel& k, const Instruction& instr,
                           const std::string& device_name, KernelNeeds* needs) {
  if (k.linear.rows > INT32_MAX || k.linear.in > INT32_MAX || k.linear.out > INT32_MAX) {
    return Refuse(instr, device_name, "matrix dimension beyond cuBLAS's int range");
  }
  if (k.op == Op::kLinearGradParams) {
    needs->scratch_floats =
        std::max(needs->scratch_floats, cuda::ColumnSumScratchFloats(k.linear.rows, k.linear.out));
  }
  return absl::OkStatus();
}

// A unit family's preparation: its Prepare<Family> (runtime/cuda/kernels.h).
absl::Status UnitPrepared(const char* why, const Instruction& instr,
                          const std::string& device_name) {
  return why == nullptr ? absl::OkStatus() : Refuse(instr, device_name, why);
}
#define TRAINC_CUDA_UNIT_PREPARE(Family, snake)                                            \
  absl::Status Prepare##Family##Unit(const Kernel& k, const Instruction& instr,            \
                                     const std::string& device_name, KernelNeeds* needs) { \
    return UnitPrepared(cuda::Prepare##Family(k.op, k.snake, &needs->scratch_floats), instr, \
                        device_name);                                                      \
  }
TRAINC_UNIT_FAMILIES(TRAINC_CUDA_UNIT_PREPARE)
#undef TRAINC_CUDA_UNIT_PREPARE

// One instruction to enqueue.
struct KernelCall {
  const Plan& plan;
  const Instruction& instr;
  const Kernel& k;
  const StepState& step;
};

using CudaKernel = absl::Status (*)(CudaDeviceImpl& d, const KernelCall& c);

// A family's CUDA kernel and, where its kernels have limits or need
// scratch, its preparation.
struct CudaBinding {
  CudaKernel run = nullptr;
  CudaPrepare prepare = nullptr;
};

// The table's entries: friends of CudaDeviceImpl, so they reach its
// streams, scratch and library handles.
struct CudaKernels {
  static absl::Status Launched(const KernelCall& c, cudaError_t err) {
    return err == cudaSuccess
               ? absl::OkStatus()
               : cuda::CudaErrorToStatus(err, c.instr.op.c_str(), __FILE__, __LINE__);
  }

  static absl::Status Linear(CudaDeviceImpl& d, const KernelCall& c) {
    const Kernel& k = c.k;
    switch (k.op) {
      case Op::kLinear:
      case Op::kLinearRelu:  // linear_relu without pre: the RELU epilogue
      case Op::kLinearTanh:
      case Op::kLinearGeluErf:
      case Op::kLinearGelu:  // one cublasLt GEMM with the GELU epilogue
        return d.RunLinear(k);
      case Op::kLinearGradInputGelu:  // ... with the DGELU epilogue
        return d.RunLinearGradInputGelu(k);
      case Op::kLinearGradInput:
        // dx[B,in] = dy[B,out] w[out,in]: DX'[in,B] = W'[in,out] DY'[out,B]
        // (a bf16 dx: accumulated in f32 onto the widened old dx, rounded once).
        return d.Gemm(CUBLAS_OP_N, CUBLAS_OP_N, k.linear.in, k.linear.rows, k.linear.out,
                      CudaDeviceImpl::GemmOperand(k, 1), k.linear.in, CudaDeviceImpl::GemmOperand(k, 0),
                      k.linear.out, k.accumulate ? 1.0f : 0.0f, CudaDeviceImpl::LinearOutput(k), k.linear.in,
                      CudaDeviceImpl::GemmType(k), CudaDeviceImpl::OutType(k));
      default: {
        // dw[out,in] = dy^T x: DW'[in,out] = X'[in,B] DY'[out,B]^T.
        RETURN_IF_ERROR(d.Gemm(CUBLAS_OP_N, CUBLAS_OP_T, k.linear.in, k.linear.out, k.linear.rows,
                               CudaDeviceImpl::GemmOperand(k, 1), k.linear.in, CudaDeviceImpl::GemmOperand(k, 0), k.linear.out,
                               k.accumulate ? 1.0f : 0.0f, k.y[0], k.linear.in, CudaDeviceImpl::GemmType(k)));
        if (k.y[1] == nullptr) return absl::OkStatus();
        if (k.gemm_bf16[0] != nullptr) {
          return Launched(c, cuda::LaunchColumnSumBf16(k.gemm_bf16[0], k.linear.rows, k.linear.out, k.y[1],
                                                       k.accumulate, d.kernel_scratch_,
                                                       d.compute_));
        }
        return Launched(c, cuda::LaunchColumnSum(k.x[0], k.linear.rows, k.linear.out, k.y[1], k.accumulate,
                                                 d.kernel_scratch_, d.compute_));
      }
    }
  }

  static absl::Status Pointwise(CudaDeviceImpl& d, const KernelCall& c) {
    const Kernel& k = c.k;
    // bf16 operands as they are (UseBf16Pointwise): all, some or none.
    const unsigned all = PointwiseArity(k.op) == 1 ? 5u : 7u;
    if (k.pointwise_bf16 == all) {
      return Launched(c, cuda::LaunchPointwiseBf16(k.op, k.x[0], k.x[1], k.y[0], k.rows,
                                                   k.accumulate, d.compute_));
    }
    if (k.pointwise_bf16 != 0) {
      return Launched(c, cuda::LaunchPointwiseMixed(k.op, k.x[0], k.x[1], k.y[0], k.rows,
                                                    k.accumulate, k.pointwise_bf16,
                                                    d.compute_));
    }
    return Launched(c, cuda::LaunchPointwise(k.op, k.x[0], k.x[1], k.y[0], k.rows,
                                             k.accumulate, d.compute_));
  }

  // Convolution and pooling: cuDNN, with the descriptors Prepare made.
  static absl::Status Window(CudaDeviceImpl& d, const KernelCall& c) {
    return d.cudnn_->Run(c.instr.id);
  }

  // A unit family's CUDA kernels: its launcher
  // (compiler/ops/kernel_families.h, runtime/cuda/kernels.h).
  static cuda::UnitLaunch UnitEnv(CudaDeviceImpl& d, const KernelCall& c) {
    cuda::UnitLaunch env;
    env.accumulate = c.k.accumulate;
    env.training = c.step.training;
    env.bf16 = c.k.unit_bf16;
    env.scratch = d.kernel_scratch_;
    env.scratch_floats = d.kernel_scratch_floats_;
    env.error = d.device_error_;
    env.scalars = d.device_scalars_;
    env.stream = d.compute_;
    return env;
  }
  template <typename Args>
  static absl::Status LaunchUnit(CudaDeviceImpl& d, const KernelCall& c, const Args& args,
                                 cudaError_t (*launch)(KernelOp, const Args&,
                                                       const float* const*, float* const*,
                                                       const cuda::UnitLaunch&)) {
    // The step's scalars: uploaded here when eager, by Replay in a
    // captured graph.
    if constexpr (ops::unit::HasStep<Args>::value) {
      if (!d.capturing_) RETURN_IF_ERROR(d.UploadStepScalars(c.plan, c.step));
    }
    const ops::unit::Step step{c.step.training, c.step.step, c.step.rank, c.step.lr};
    return Launched(c, launch(c.k.op, ops::unit::ForStep(args, step), c.k.x, c.k.y,
                              UnitEnv(d, c)));
  }
#define TRAINC_CUDA_UNIT(Family, snake)                                      \
  static absl::Status Family##Unit(CudaDeviceImpl& d, const KernelCall& c) { \
    return LaunchUnit(d, c, c.k.snake, &cuda::Launch##Family);               \
  }
  TRAINC_UNIT_FAMILIES(TRAINC_CUDA_UNIT)
#undef TRAINC_CUDA_UNIT

  // One kernel per family (compiler/ops/kernel_families.h); a family left
  // out has no CUDA kernel.
  static KernelTable<CudaBinding> Make() {
    using F = KernelFamily;
#define TRAINC_CUDA_UNIT_ENTRY(Family, snake) \
  {F::k##Family, {&Family##Unit, &Prepare##Family##Unit}},
    return KernelTable<CudaBinding>::OfFamilies({
        {F::kPointwise, {&Pointwise}},
        {F::kLinear, {&Linear, &PrepareLinear}},
        {F::kWindow, {&Window}},
        TRAINC_UNIT_FAMILIES(TRAINC_CUDA_UNIT_ENTRY)
    });
#undef TRAINC_CUDA_UNIT_ENTRY
  }

  static const KernelTable<CudaBinding>& Table() {
    static const KernelTable<CudaBinding> table = Make();
    return table;
  }
};

absl::Status CudaDeviceImpl::RunF32Kernel(const Plan& plan, const Instruction& instr,
                                          const StepState& step) {
  const Kernel& k = kernels_[instr.id];
  const CudaKernel kernel = CudaKernels::Table()[k.op].run;
  if (kernel == nullptr) {
    return absl::InvalidArgumentError(name_ + ": " + instr.op + " is not a compute kernel");
  }
  absl::Status status = kernel(*this, {plan, instr, k, step});
  return status.ok() ? status : Fail(std::move(status));
}

absl::Status CheckKernelTable(const Plan& plan, const std::vector<Kernel>& kernels,
                              const std::string& device_name) {
  return CheckKernels(plan, kernels, device_name, [](KernelOp op, int) {
    return CudaKernels::Table()[op].run != nullptr;
  });
}

absl::Status PrepareKernel(const Kernel& k, const Instruction& instr,
                           const std::string& device_name, KernelNeeds* needs) {
  if (k.op == Op::kNotCompute) return absl::OkStatus();
  const CudaPrepare prepare = CudaKernels::Table()[k.op].prepare;
  return prepare == nullptr ? absl::OkStatus() : prepare(k, instr, device_name, needs);
}

}  // namespace cuda_internal

namespace cuda {

bool KernelTableBuilt() { return true; }

bool HasKernel(KernelOp op) { return cuda_internal::CudaKernels::Table()[op].run != nullptr; }

std::vector<bool> NativeBf16Operands(const KernelArgs& args) {
  cuda_internal::Kernel k(args);
  cuda_internal::UseBf16(k);
  std::vector<bool> native(k.num_bf16);
  for (int i = 0; i < k.num_bf16; ++i) native[i] = k.bf16[i].native;
  return native;
}

}  // namespace cuda
}  // namespace trainc
