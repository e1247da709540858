// CudaDevice: the Device of runtime/device/device.h on one NVIDIA GPU.
//
//   if (CudaDeviceCount() == 0) ... use the CPU backend ...
//   ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateCudaDevice(rank));
//   RETURN_IF_ERROR(device->AllocateArena(plan.arena_bytes));
//   RETURN_IF_ERROR(device->Prepare(plan));
//   ... the shared Executor drives it exactly like a CpuDevice ...
//
// A drop-in for CpuDevice: the same ops with the same semantics (matrix
// products through cuBLAS/cublasLt, convolution and pooling through cuDNN
// with fixed deterministic algorithms, TF32 when plan.tf32), the plan's
// compute and comm streams as two non-blocking cudaStreams, its events as
// cudaEvents. Every call only enqueues work, except Download, CopyToHost
// and Synchronize, which wait. Kernels never use atomics for sums, so a run is
// bit-reproducible on one GPU model (what deterministic mode needs).
//
// Errors of device work (a label outside [0, C), a failed kernel) surface
// at the next Synchronize(), the only point the host waits anyway.
//
// CUDA graphs: the Device's step-capture hooks (device.h) are real here.
// Uploads inside the graph read device-side input slots, two sets of them:
// BeginReplayInputs' uploads fill the set the running replay does not
// read, on a copy stream of their own; the learning rate and step live in
// device memory, written by Replay. NCCL calls on the comm stream are
// captured with the step (NCCL >= 2.9.6). SubmitTimed does not time inside
// a capture (a graph is one unit on the timeline).
//
// Programs link //runtime/cuda:cuda_device, which links no CUDA library:
// these functions forward to the CUDA plugin libtrainc_cuda.so, loaded on
// first use (cuda_loader.h), so a CPU-only run never loads cuBLAS or cuDNN.
// (The backend's own tests link it statically: :cuda_device_impl.)
//
// Built without the CUDA toolkit, CudaDeviceCount() is 0 and
// CreateCudaDevice() returns Unavailable, so tools always link.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_
#define TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"

namespace trainc {

// Usable CUDA GPUs; 0 when there is no driver or no GPU (never crashes) or
// when built without the toolkit, or the CUDA plugin cannot be loaded.
int CudaDeviceCount();

// Why CudaDeviceCount() is 0, for messages (no NVIDIA driver, plugin not
// found or not loadable, what the CUDA runtime said); "" when it is not.
std::string CudaUnavailableReason();

// The GPU `local_rank` (cudaSetDevice(local_rank)) as a Device. Its dynamic
// type is CudaDevice.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int local_rank);

// The workspace `instr` needs on this backend (cuDNN's, for convolution
// and pooling): PlanOptions::workspace for plans that will run on GPUs.
// Asks the current GPU; Unavailable without one.
absl::StatusOr<int64_t> CudaWorkspaceBytes(const Plan& plan, const Instruction& instr);

// precision = bf16: the f32 staging a CudaDevice keeps beside the arena
// for `plan`'s bf16 operands its kernels do not read and write as bf16
// themselves (0 for GPT-style models): PlanOptions::bf16_staging for
// plans that will run on GPUs. Needs no GPU.
absl::StatusOr<int64_t> CudaBf16StagingBytes(const Plan& plan);

// The CUDA-specific part of the interface.
class CudaDevice : public Device {
 public:
  virtual int ordinal() const = 0;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_
