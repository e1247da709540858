// Built instead of the backend (cuda_device.cc and the other files of
// cuda_device_impl.h) when Bazel found no CUDA toolkit: the factory
// exists, so every tool links, and says why there is no GPU.
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"

namespace trainc {

int CudaDeviceCount() { return 0; }

std::string CudaUnavailableReason() {
  return "trainc was built without the CUDA toolkit";
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int /*local_rank*/) {
  return absl::UnavailableError(
      "cuda: trainc was built without the CUDA toolkit (no nvcc, cuBLAS or "
      "NCCL found at build time); rebuild on a machine that has them");
}

absl::StatusOr<int64_t> CudaWorkspaceBytes(const Plan& /*plan*/,
                                           const Instruction& /*instr*/) {
  return absl::UnavailableError(
      "cuda: trainc was built without the CUDA toolkit; compile for --device cpu");
}

absl::StatusOr<int64_t> CudaBf16StagingBytes(const Plan& /*plan*/) {
  return absl::UnavailableError(
      "cuda: trainc was built without the CUDA toolkit; compile for --device cpu");
}

namespace cuda {

bool KernelTableBuilt() { return false; }

bool HasKernel(KernelOp /*op*/) { return false; }

std::vector<bool> NativeBf16Operands(const KernelArgs& args) {
  return std::vector<bool>(args.num_bf16, false);
}

bool AttentionUsesMma(const attention::Geometry& /*g*/, bool /*bf16*/) { return false; }

}  // namespace cuda
}  // namespace trainc
