#include "bf16_cast.h"

#include <cuda_bf16.h>

namespace trainc::nccl {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void FromBf16Kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __bfloat162float(x[i]);
  }
}

}  // namespace

cudaError_t LaunchToBf16(const float* f32, void* bf16, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(
      f32, static_cast<__nv_bfloat16*>(bf16), n);
  return cudaGetLastError();
}

cudaError_t LaunchFromBf16(const void* bf16, float* f32, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FromBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(bf16), f32, n);
  return cudaGetLastError();
}

}  // namespace trainc::nccl
