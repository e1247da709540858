// CpuDevice: the Device of runtime/device/device.h on the host CPU.
//
//   CpuDevice device;                      // one per rank (process)
//   RETURN_IF_ERROR(device.AllocateArena(plan.arena_bytes));
//   RETURN_IF_ERROR(device.Prepare(plan));  // resolves kernels once
//   ... Executor drives Submit / RunKernel / events ...
//
// Compute stream: the calling thread (Submit runs the work before it
// returns). Comm stream: one worker thread draining a FIFO of work, event
// records and event waits. Events are per-step flags; a wait on the compute
// stream blocks the caller until the comm worker records the event.
//
// Errors are sticky: after the first failed work item the device refuses
// new work and Synchronize() returns that error (a step that half ran
// leaves the parameters in an unknown state; the caller should stop).
#ifndef TRAINC_RUNTIME_CPU_CPU_DEVICE_H_
#define TRAINC_RUNTIME_CPU_CPU_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/cpu/gemm.h"
#include "runtime/device/device.h"

namespace trainc {

struct CpuDeviceOptions {
  // OpenBLAS threads for this process. 1 by default: each rank is its own
  // process, so ranks x BLAS threads would oversubscribe the cores and
  // starve the comm thread; a single-rank run on an idle machine may set
  // more. <= 0 leaves OpenBLAS's own setting (OPENBLAS_NUM_THREADS) alone.
  int blas_threads = 1;
  // The matrix products' library (runtime/cpu/gemm.h), process-wide: kAuto
  // is TRAINC_BLAS when that names a library, else oneDNN when OpenBLAS
  // runs a fallback core, else OpenBLAS.
  cpu::BlasChoice blas = cpu::BlasChoice::kAuto;
};

// The f32 staging CpuDevice::Prepare allocates for `plan`'s bf16 operands
// (PlanOptions::bf16_staging): none for those the bf16 matmuls read
// themselves (bf16_matmul.h) on a CPU that has them.
absl::StatusOr<int64_t> CpuBf16StagingBytes(const Plan& plan);

class CpuDevice : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;

  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  std::string name() const override { return "cpu"; }

  absl::Status AllocateArena(int64_t bytes) override;
  char* arena() override;
  absl::Status Upload(int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Download(int64_t offset, void* dst, int64_t bytes) override;

  absl::Status Prepare(const Plan& plan) override;
  absl::Status RunKernel(const Plan& plan, const Instruction& instr,
                         const StepState& state) override;
  absl::Status OrderedSum(Stream stream, const float* src, int64_t n,
                          int64_t count, float* dst) override;
  absl::StatusOr<char*> AllocateScratch(int64_t bytes) override;
  int64_t HostBytes() const override;

  absl::Status Submit(Stream stream,
                      std::function<absl::Status()> work) override;
  absl::Status RecordEvent(Stream stream, int event) override;
  absl::Status WaitEvent(Stream stream, int event) override;
  absl::Status ResetEvents(int num_events) override;
  absl::Status Synchronize() override;
  void* NativeStream(Stream /*stream*/) override { return nullptr; }
  absl::Status Copy(Stream stream, const void* src, void* dst,
                    int64_t bytes) override;
  absl::Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  absl::Status CopyFromHost(const void* src, void* dst,
                            int64_t bytes) override;

 private:
  // RunKernel's kernel proper, on f32 operands (bf16 ones staged).
  absl::Status RunF32Kernel(const Plan& plan, const Instruction& instr,
                            const StepState& state);

  struct State;  // arena, prepared kernels, comm worker; see cpu_device.cc
  std::unique_ptr<State> state_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CPU_CPU_DEVICE_H_
