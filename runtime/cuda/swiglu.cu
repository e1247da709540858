// swiglu's CUDA kernels (compiler/ops/swiglu_family.h): one grid-stride
// pass each, pointwise.h's formulas in the unfused order, on f32 operands
// (staged) or, when every operand is bf16 (UseBf16SwiGlu), on the bf16
// tensors themselves as pointwise.cu's bf16 kernels read and write them.
// In a bf16 plan silu's output and its gradient ds are rounded to bf16
// before they are read (Args::Round), as the unfused plan stored them.
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::SwiGluFamily::Args;

// v as a bf16 tensor holds it, when `round`.
__device__ __forceinline__ float Stored(float v, bool round) {
  return round ? ToF32(FromF32<__nv_bfloat16>(v)) : v;
}

template <typename T>
__global__ void SwiGluKernel(const T* gate, const T* up, T* y, int64_t n, bool accumulate,
                             bool round) {
  TRAINC_GRID_STRIDE(i, n) {
    const float s = Stored(pointwise::Silu::F(ToF32(gate[i])), round);
    float v = pointwise::Mul::F(s, ToF32(up[i]));
    if (accumulate) v = ToF32(y[i]) + v;
    y[i] = FromF32<T>(v);
  }
}

template <typename T>
__global__ void SwiGluGradKernel(const T* dy, const T* gate, const T* up, T* dgate, T* dup,
                                 int64_t n, bool accumulate, bool round) {
  TRAINC_GRID_STRIDE(i, n) {
    const float d = ToF32(dy[i]), g = ToF32(gate[i]);
    float sigmoid;
    const float s = Stored(pointwise::math::SiluAndSigmoid(g, &sigmoid), round);
    const float ds = Stored(pointwise::MulGrad::F(d, ToF32(up[i])), round);
    float dg = pointwise::SiluGrad::OfSigmoid(ds, g, sigmoid);
    float du = pointwise::MulGrad::F(d, s);
    if (accumulate) {
      dg = ToF32(dgate[i]) + dg;
      du = ToF32(dup[i]) + du;
    }
    dgate[i] = FromF32<T>(dg);
    dup[i] = FromF32<T>(du);
  }
}

// x and y hold T tensors (f32 staging, or every operand bf16: env.bf16).
template <typename T>
cudaError_t LaunchAs(KernelOp op, const Args& a, const float* const* x, float* const* y,
                     const UnitLaunch& env) {
  auto in = [x](int j) { return static_cast<const T*>(static_cast<const void*>(x[j])); };
  auto out = [y](int j) { return static_cast<T*>(static_cast<void*>(y[j])); };
  const unsigned blocks = ElementwiseBlocks(a.n);
  if (op == KernelOp::kSwiGlu) {
    SwiGluKernel<T><<<blocks, kBlockSize, 0, env.stream>>>(in(0), in(1), out(0), a.n,
                                                           env.accumulate, a.Round());
  } else {
    SwiGluGradKernel<T><<<blocks, kBlockSize, 0, env.stream>>>(
        in(0), in(1), in(2), out(0), out(1), a.n, env.accumulate, a.Round());
  }
  return cudaGetLastError();
}

}  // namespace

const char* PrepareSwiGlu(KernelOp, const Args&, int64_t*) { return nullptr; }

cudaError_t LaunchSwiGlu(KernelOp op, const Args& a, const float* const* x, float* const* y,
                         const UnitLaunch& env) {
  return env.bf16 ? LaunchAs<__nv_bfloat16>(op, a, x, y, env) : LaunchAs<float>(op, a, x, y, env);
}

}  // namespace cuda
}  // namespace trainc
