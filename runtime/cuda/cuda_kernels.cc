// The CUDA backend's kernel table: for every KernelOp
// (runtime/device/kernel_ops.h) the function that enqueues one resolved
// instruction on the compute stream, over the launchers of kernels.h,
// cuBLAS(Lt) (cublas_linear.h) and cuDNN (cudnn_ops.h).
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
  UseBf16SwiGlu(k);
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

void UseBf16SwiGlu(Kernel& k) {
  // gate, up -> y; dy, gate, up -> dgate, dup: every operand bf16 (as the
  // SwiGLU fusion makes them in a bf16 plan), or every one staged.
  if (k.op != Op::kSwiGlu && k.op != Op::kSwiGluGrad) return;
  if (k.num_bf16 != (k.op == Op::kSwiGlu ? 3 : 5)) return;
  k.unit_bf16 = true;
  for (int i = 0; i < k.num_bf16; ++i) k.bf16[i].native = true;
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

void UseBf16Pointwise(Kernel& k) {
  const int arity = PointwiseArity(k.op);
  if (arity == 0) return;
  // Before the staging: a bf16 operand's x / y slot holds its tensor.
  unsigned mask = 0;
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output) {
      if (k.y[0] == o.bf16) mask |= 4u;
      continue;
    }
    for (int j = 0; j < arity; ++j) {
      if (k.x[j] == o.bf16) mask |= 1u << j;
    }
  }
  k.pointwise_bf16 = mask;
  for (int i = 0; i < k.num_bf16; ++i) k.bf16[i].native = true;
}

void UseBf16Classifier(Kernel& k) {
  // logits (x[0]) in, dlogits (y[1]) out, the loss f32: both or neither.
  if (k.op == Op::kCrossEntropyFused) k.unit_bf16 = NativeInAndOut(k, 1);
}

// Each family's preparation, once per instruction in Prepare: the limits
// of its CUDA kernels, the scratch they need (KernelNeeds) and, for a
// family prepared per plan, its programs.
using CudaPrepare = absl::Status (*)(CudaDeviceImpl& d, Kernel& k, const Instruction& instr,
                                     KernelNeeds* needs);

absl::Status Refuse(const Instruction& instr, const std::string& device_name,
                    const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(device_name, ": instruction ", instr.id, " (",
                                                 instr.op, " \"", instr.label, "\"): ", why));
}

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
  // Its preparation: its Prepare<Family> (runtime/cuda/kernels.h).
  static absl::Status PrepareUnit(CudaDeviceImpl& d, const char* why, const Instruction& instr) {
    return why == nullptr ? absl::OkStatus() : Refuse(instr, d.name_, why);
  }
#define TRAINC_CUDA_UNIT(Family, snake)                                                   \
  static absl::Status Family##Unit(CudaDeviceImpl& d, const KernelCall& c) {              \
    return LaunchUnit(d, c, c.k.snake, &cuda::Launch##Family);                            \
  }                                                                                       \
  static absl::Status Prepare##Family##Unit(CudaDeviceImpl& d, Kernel& k,                 \
                                            const Instruction& instr, KernelNeeds* needs) { \
    return PrepareUnit(d, cuda::Prepare##Family(k.op, k.snake, &needs->scratch_floats), instr); \
  }
  TRAINC_STATELESS_FAMILIES(TRAINC_CUDA_UNIT)
#undef TRAINC_CUDA_UNIT

  // A family prepared per plan (compiler/ops/unit_family.h): the device's
  // programs for it, built per instruction in Prepare and enqueued here
  // (PreparePrograms and RunPrograms, overloads on its Args, below).
#define TRAINC_CUDA_PREPARED(Family, snake)                                               \
  static absl::Status Family##Unit(CudaDeviceImpl& d, const KernelCall& c) {              \
    return d.RunPrograms(c.k.snake, c.k, c.instr.id);                                     \
  }                                                                                       \
  static absl::Status Prepare##Family##Unit(CudaDeviceImpl& d, Kernel& k,                 \
                                            const Instruction& instr, KernelNeeds* needs) { \
    return d.PreparePrograms(k.snake, k, instr, needs);                                   \
  }
  TRAINC_PREPARED_FAMILIES(TRAINC_CUDA_PREPARED)
#undef TRAINC_CUDA_PREPARED

  // One kernel per family (compiler/ops/kernel_families.h); a family left
  // out has no CUDA kernel.
  static KernelTable<CudaBinding> Make() {
    using F = KernelFamily;
#define TRAINC_CUDA_UNIT_ENTRY(Family, snake) \
  {F::k##Family, {&Family##Unit, &Prepare##Family##Unit}},
    return KernelTable<CudaBinding>::OfFamilies({
        {F::kPointwise, {&Pointwise}},
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

// The families prepared per plan: each instruction handed to the programs
// of its family, which the device owns.
absl::Status CudaDeviceImpl::PreparePrograms(const ops::LinearFamily::Args& l, Kernel& k,
                                             const Instruction& instr, KernelNeeds* needs) {
  return linear_->Add(l, k, instr, tf32_, name_, needs);
}

absl::Status CudaDeviceImpl::RunPrograms(const ops::LinearFamily::Args& l, const Kernel& k,
                                         int) {
  return linear_->Run(l, k, kernel_scratch_);
}

// The window family's: its cuDNN descriptors, checked against the plan's
// workspace.
absl::Status CudaDeviceImpl::PreparePrograms(const WindowGeometry&, Kernel& k,
                                             const Instruction& instr, KernelNeeds*) {
  return cudnn_->Add(instr, k, tf32_, name_);
}

absl::Status CudaDeviceImpl::RunPrograms(const WindowGeometry&, const Kernel&, int id) {
  return cudnn_->Run(id);
}

absl::Status CheckKernelTable(const Plan& plan, const std::vector<Kernel>& kernels,
                              const std::string& device_name) {
  return CheckKernels(plan, kernels, device_name, [](KernelOp op, int) {
    return CudaKernels::Table()[op].run != nullptr;
  });
}

absl::Status CudaDeviceImpl::PrepareKernel(Kernel& k, const Instruction& instr,
                                           KernelNeeds* needs) {
  if (k.op == Op::kNotCompute) return absl::OkStatus();
  const CudaPrepare prepare = CudaKernels::Table()[k.op].prepare;
  return prepare == nullptr ? absl::OkStatus() : prepare(*this, k, instr, needs);
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
