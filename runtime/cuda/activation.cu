// Pointwise activations and their gradients (plan.h: relu, gelu (exact, erf
// form), tanh). relu_grad and tanh_grad take the forward output y, gelu_grad
// the input x, exactly as the plan wires them.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__global__ void ReluKernel(const float* x, float* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void ReluGradKernel(const float* dy, const float* y, float* dx,
                               int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    float g = y[i] > 0.0f ? dy[i] : 0.0f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void GeluKernel(const float* x, float* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
  }
}

__global__ void GeluGradKernel(const float* dy, const float* x, float* dx,
                               int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
    float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    float g = dy[i] * (cdf + v * pdf);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void SiluKernel(const float* x, float* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = x[i] / (1.0f + expf(-x[i])); }
}

__global__ void SiluGradKernel(const float* dy, const float* x, float* dx,
                               int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    const float s = 1.0f / (1.0f + expf(-x[i]));
    const float g = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void TanhKernel(const float* x, float* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = tanhf(x[i]); }
}

__global__ void TanhGradKernel(const float* dy, const float* y, float* dx,
                               int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    float g = dy[i] * (1.0f - y[i] * y[i]);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

}  // namespace

#define TRAINC_LAUNCH_ELEMENTWISE(kernel, n, stream, ...)                 \
  kernel<<<ElementwiseBlocks(n), kBlockSize, 0, stream>>>(__VA_ARGS__); \
  return cudaGetLastError()

cudaError_t LaunchRelu(const float* x, float* y, int64_t n, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(ReluKernel, n, s, x, y, n);
}
cudaError_t LaunchReluGrad(const float* dy, const float* y, float* dx,
                           int64_t n, bool accumulate, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(ReluGradKernel, n, s, dy, y, dx, n, accumulate);
}
cudaError_t LaunchGelu(const float* x, float* y, int64_t n, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(GeluKernel, n, s, x, y, n);
}
cudaError_t LaunchGeluGrad(const float* dy, const float* x, float* dx,
                           int64_t n, bool accumulate, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(GeluGradKernel, n, s, dy, x, dx, n, accumulate);
}
cudaError_t LaunchSilu(const float* x, float* y, int64_t n, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(SiluKernel, n, s, x, y, n);
}
cudaError_t LaunchSiluGrad(const float* dy, const float* x, float* dx,
                           int64_t n, bool accumulate, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(SiluGradKernel, n, s, dy, x, dx, n, accumulate);
}
cudaError_t LaunchTanh(const float* x, float* y, int64_t n, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(TanhKernel, n, s, x, y, n);
}
cudaError_t LaunchTanhGrad(const float* dy, const float* y, float* dx,
                           int64_t n, bool accumulate, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(TanhGradKernel, n, s, dy, y, dx, n, accumulate);
}

}  // namespace cuda
}  // namespace trainc
