// cast's CUDA kernels (compiler/ops/cast_family.h): elementwise.cu's f32 <->
// bf16 conversions, which the bf16 gradients on the wire share.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {

const char* PrepareCast(KernelOp, const ops::CastFamily::Args&, int64_t*) { return nullptr; }

cudaError_t LaunchCast(KernelOp op, const ops::CastFamily::Args& a, const float* const* x,
                       float* const* y, const UnitLaunch& env) {
  return op == KernelOp::kCastToBf16 ? LaunchToBf16(x[0], y[0], a.elements, env.stream)
                                     : LaunchFromBf16(x[0], y[0], a.elements, env.stream);
}

}  // namespace cuda
}  // namespace trainc
