// reshape's CUDA kernel (compiler/ops/reshape_family.h): a device copy.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {

const char* PrepareReshape(KernelOp, const ops::ReshapeFamily::Args&, int64_t*) {
  return nullptr;
}

// bf16 in and out (UseBf16Reshape): the 2-byte values as they are.
cudaError_t LaunchReshape(KernelOp, const ops::ReshapeFamily::Args& a, const float* const* x,
                          float* const* y, const UnitLaunch& env) {
  if (y[0] == x[0]) return cudaSuccess;
  const size_t width = env.bf16 ? 2 : 4;
  return cudaMemcpyAsync(y[0], x[0], static_cast<size_t>(a.elements) * width,
                         cudaMemcpyDeviceToDevice, env.stream);
}

}  // namespace cuda
}  // namespace trainc
