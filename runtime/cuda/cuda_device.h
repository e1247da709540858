// CudaDevice: the Device of runtime/device/device.h on one NVIDIA GPU.
//
//   if (CudaDeviceCount() == 0) ... use the CPU backend ...
//   ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateCudaDevice(rank));
//   RETURN_IF_ERROR(device->AllocateArena(plan.arena_bytes));
//   RETURN_IF_ERROR(device->Prepare(plan));
//   ... the shared Executor drives it exactly like a CpuDevice ...
//
// A drop-in for CpuDevice: the same ops with the same semantics (matrix
// products through cuBLAS/cublasLt, TF32 when plan.tf32), the plan's
// compute and comm streams as two non-blocking cudaStreams, its events as
// cudaEvents. Every call only enqueues work, except Download and
// Synchronize, which wait. Kernels never use atomics for sums, so a run is
// bit-reproducible on one GPU model (what deterministic mode needs).
//
// Errors of device work (a label outside [0, C), a failed kernel) surface
// at the next Synchronize(), the only point the host waits anyway.
//
// CUDA graphs (opt-in, see CudaDevice below): one whole step can be
// captured once and replayed, removing the per-kernel launch cost that
// dominates small models.
//
// Built without the CUDA toolkit, CudaDeviceCount() is 0 and
// CreateCudaDevice() returns Unavailable, so tools always link.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_
#define TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/device/device.h"

namespace trainc {

// Usable CUDA GPUs; 0 when there is no driver or no GPU (never crashes) or
// when built without the toolkit.
int CudaDeviceCount();

// The GPU `local_rank` (cudaSetDevice(local_rank)) as a Device. Its dynamic
// type is CudaDevice.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int local_rank);

// The CUDA-specific extension: step capture into a CUDA graph.
//
//   Eager warm-up step(s) first (Prepare, cuBLAS heuristics and workspaces
//   settle), then:
//     cuda->BeginCapture();
//     executor runs one step exactly as usual (uploads included);
//     cuda->EndCapture();            // nothing of that step has run yet
//     cuda->ReplayCapture(state);    // runs it
//   and for every later step:
//     Upload(...) each input, in the same order and sizes as captured;
//     cuda->ReplayCapture(state);    // new lr / step are applied
//
// Uploads inside the graph read fixed device-side input slots, so a replay
// consumes what Upload put there since the previous replay; the learning
// rate and step live in device memory for the same reason. NCCL calls on
// the comm stream are captured with the step (NCCL >= 2.9). SubmitTimed
// does not time inside a capture (a graph is one unit on the timeline).
// While a capture is held, Upload feeds the captured step; DropCapture()
// returns to eager execution.
class CudaDevice : public Device {
 public:
  virtual int ordinal() const = 0;

  virtual absl::Status BeginCapture() = 0;
  virtual absl::Status EndCapture() = 0;
  virtual absl::Status ReplayCapture(const StepState& state) = 0;
  virtual absl::Status DropCapture() = 0;
  virtual bool has_capture() const = 0;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_CUDA_DEVICE_H_
