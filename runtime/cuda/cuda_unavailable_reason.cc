// CudaUnavailableReason() of the statically linked backend (cuda_device.h):
// what the CUDA runtime said when asked for devices.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_device.h"

namespace trainc {

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: later calls start clean
    return absl::StrCat("CUDA runtime: ", cudaGetErrorName(err), ": ",
                        cudaGetErrorString(err));
  }
  if (count == 0) return "CUDA runtime: no device (CUDA_VISIBLE_DEVICES empty?)";
  return "";
}

}  // namespace trainc
