// CudaDeviceImpl (cuda_device_impl.h): set-up, Prepare, and RunKernel's
// bf16 staging around each instruction's kernel (the kernel table is
// cuda_kernels.cc); and the plugin's factory functions.
#include "runtime/cuda/cuda_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_device_impl.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/cudnn_ops.h"
#include "runtime/device/kernel_args.h"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda_internal {

CudaDeviceImpl::~CudaDeviceImpl() {
  // Best effort: a destructor cannot report, and the streams must be idle
  // before their memory goes.
  cudaSetDevice(ordinal_);
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_) cudaStreamSynchronize(comm_);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (copy_) cudaStreamSynchronize(copy_);
  (void)FreeInputSlots();
  for (cudaEvent_t e : landed_) {
    if (e) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : consumed_) {
    if (e) cudaEventDestroy(e);
  }
  linear_.reset();  // its handles are bound to compute_, destroyed below
  cudnn_.reset();  // its handle is bound to compute_, destroyed below
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timing_pool_) cudaEventDestroy(e);
  for (TimedWork& t : timed_) {
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  if (anchor_) cudaEventDestroy(anchor_);
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  for (Staging& s : staging_) {
    if (s.host) cudaFreeHost(s.host);
    if (s.done) cudaEventDestroy(s.done);
  }
  for (void* p : scratch_) cudaFree(p);
  if (kernel_scratch_) cudaFree(kernel_scratch_);
  if (bf16_staging_) cudaFree(bf16_staging_);
  if (device_scalars_) cudaFree(device_scalars_);
  if (device_error_) cudaFree(device_error_);
  if (arena_) cudaFree(arena_);
  if (copy_) cudaStreamDestroy(copy_);
  if (comm_) cudaStreamDestroy(comm_);
  if (compute_) cudaStreamDestroy(compute_);
}

absl::Status CudaDeviceImpl::Init() {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal_));
  name_ = absl::StrCat("cuda:", ordinal_, " (", prop.name, ", sm_",
                       prop.major, prop.minor, ")");
  // Non-blocking: the plan's streams must not serialise with the legacy
  // default stream that libraries or other code may use.
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (int set = 0; set < 2; ++set) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&landed_[set], cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&consumed_[set], cudaEventDisableTiming));
  }
  linear_ = std::make_unique<CublasLinear>();
  RETURN_IF_ERROR(linear_->Init(compute_));
  // cuDNN's scratch is each instruction's workspace in the arena, so the
  // handle needs nothing but the stream.
  cudnn_ = std::make_unique<cuda::CudnnOps>();
  RETURN_IF_ERROR(cudnn_->Init(compute_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&device_error_, sizeof(int)));
  RETURN_IF_ERROR(Zero(device_error_, sizeof(int)));
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(&device_scalars_, 2 * sizeof(OptimizerStepScalars)));
  for (Staging& s : staging_) {
    CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&anchor_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, compute_));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
  anchor_ns_ = SteadyNowNs();
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Prepare(const Plan& plan) {
  if (arena_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": Prepare before AllocateArena");
  }
  if (capturing_ || graph_exec_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": Prepare while a capture is held");
  }
  if (plan.arena_bytes > arena_bytes_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", arena_bytes_));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  ASSIGN_OR_RETURN(std::vector<KernelArgs> resolved,
                   ResolveKernels(plan, arena_, arena_bytes_, name_));
  // Old matmul descriptors may still be referenced by queued work.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  // precision = bf16: the operands the kernels read and write as bf16
  // themselves, then f32 staging for the rest (kernel_args.h), grown here
  // only, so no step allocates.
  int64_t staging = 0;
  std::vector<Kernel> kernels = WithNativeBf16(resolved, &staging);
  if (staging > bf16_staging_bytes_) {
    prepared_plan_ = nullptr;  // its kernels may point at the old staging
    if (bf16_staging_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(bf16_staging_));
    bf16_staging_ = nullptr;
    bf16_staging_bytes_ = 0;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&bf16_staging_, static_cast<size_t>(staging)));
    bf16_staging_bytes_ = staging;
  }
  for (Kernel& k : kernels) AssignBf16Staging(k, bf16_staging_);
  // From here a failure leaves no plan prepared (the old one's programs
  // are gone).
  prepared_plan_ = nullptr;
  linear_->Clear();
  cudnn_->Clear();
  tf32_ = plan.tf32;
  // Each instruction's limits, scratch and, for the families prepared per
  // plan, programs (cuBLASLt matmuls, cuDNN descriptors).
  KernelNeeds needs;
  for (size_t i = 0; i < kernels.size(); ++i) {
    RETURN_IF_ERROR(PrepareKernel(kernels[i], plan.instructions[i], &needs));
  }
  RETURN_IF_ERROR(CheckKernelTable(plan, kernels, name_));
  RETURN_IF_ERROR(EnsureKernelScratch(needs.scratch_floats));
  kernels_ = std::move(kernels);
  prepared_plan_ = &plan;
  scalars_valid_ = false;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::UploadStepScalars(const Plan& plan,
                                               const StepState& state) {
  if (scalars_valid_ && scalars_state_.step == state.step &&
      scalars_state_.lr == state.lr) {
    return absl::OkStatus();
  }
  // In double, rounded once: torch computes these in Python floats, and
  // the CPU reference (cpu/kernels.cc) the same way.
  const OptimizerConfig& o = plan.optimizer;
  const double t = static_cast<double>(state.step);
  OptimizerStepScalars s;
  s.lr = static_cast<float>(state.lr);
  s.adamw_decay = static_cast<float>(1.0 - state.lr * o.weight_decay);
  s.adamw_neg_step_size =
      static_cast<float>(-(state.lr / (1.0 - std::pow(o.beta1, t))));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  s.first_step = state.step <= 1 ? 1 : 0;
  s.step = state.step;
  OptimizerStepScalars both[2] = {s, s};
  both[1].adamw_decay = 1.0f;  // 1 - lr * 0
  RETURN_IF_ERROR(StagedCopy(device_scalars_, both, sizeof(both)));
  scalars_valid_ = true;
  scalars_state_ = state;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RunKernel(const Plan& plan,
                                       const Instruction& instr,
                                       const StepState& step) {
  if (&plan != prepared_plan_ || instr.id < 0 ||
      instr.id >= static_cast<int>(kernels_.size())) {
    return absl::FailedPreconditionError(
        name_ + ": RunKernel for a plan that was not Prepare()d");
  }
  if (!sticky_.ok()) return sticky_;
  // precision = bf16: the kernel computes in f32 on staging, widened from
  // the bf16 tensors before and rounded to nearest even into them after,
  // all on the compute stream (and so inside a captured step).
  const Kernel& k = kernels_[instr.id];
  auto check = [&](cudaError_t err) {
    return err == cudaSuccess
               ? absl::OkStatus()
               : Fail(cuda::CudaErrorToStatus(err, instr.op.c_str(), __FILE__, __LINE__));
  };
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.native || (o.output && !k.accumulate)) continue;
    RETURN_IF_ERROR(check(cuda::LaunchFromBf16(o.bf16, o.f32, o.elems, compute_)));
  }
  RETURN_IF_ERROR(RunF32Kernel(plan, instr, step));
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output && !o.native) {
      RETURN_IF_ERROR(check(cuda::LaunchToBf16(o.f32, o.bf16, o.elems, compute_)));
    }
  }
  return absl::OkStatus();
}

}  // namespace cuda_internal

absl::StatusOr<int64_t> CudaWorkspaceBytes(const Plan& plan, const Instruction& instr) {
  if (KernelOpOfInstruction(instr.op) == KernelOp::kLinearGradInputGelu) {
    ASSIGN_OR_RETURN(const KernelArgs k, DescribeKernel(plan, instr, "cuda"));
    return LinearGradInputGeluWorkspaceBytes(k);
  }
  return cuda::CudnnWorkspaceBytes(plan, instr);
}

absl::StatusOr<int64_t> CudaBf16StagingBytes(const Plan& plan) {
  // Pointers only, as Prepare derives them: nothing reads the arena.
  char* const unread_arena = reinterpret_cast<char*>(uintptr_t{1} << 40);
  ASSIGN_OR_RETURN(std::vector<KernelArgs> resolved,
                   ResolveKernels(plan, unread_arena, plan.arena_bytes, "cuda"));
  int64_t staging = 0;
  cuda_internal::WithNativeBf16(resolved, &staging);
  return staging;
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver / no GPU: not an error for a caller choosing a backend.
    // Clear the sticky runtime error so later calls start clean.
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int local_rank) {
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError(
        "cuda: no CUDA GPU visible (no driver, no device, or "
        "CUDA_VISIBLE_DEVICES is empty)");
  }
  if (local_rank < 0 || local_rank >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda: local rank ", local_rank, " but only ", count, " GPU(s)"));
  }
  auto device = std::make_unique<cuda_internal::CudaDeviceImpl>(local_rank);
  RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace trainc
