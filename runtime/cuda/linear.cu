// Linear layer kernels that cuBLAS does not cover: the bias epilogue
// fallbacks and the bias gradient (a deterministic column sum of dy, f32
// or bf16).
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

__global__ void BiasAddKernel(float* y, const float* bias, int64_t rows,
                              int64_t cols) {
  TRAINC_GRID_STRIDE(i, rows * cols) { y[i] += bias[i % cols]; }
}

// y[r, c] = bias[c] as bf16: the C that a bf16 GEMM with beta 1 adds its
// product to (exact for a bias that is or was bf16).
template <typename T>
__global__ void BiasRowsBf16Kernel(__nv_bfloat16* y, const T* bias, int64_t rows,
                                   int64_t cols) {
  TRAINC_GRID_STRIDE(i, rows * cols) { y[i] = FromF32<__nv_bfloat16>(ToF32(bias[i % cols])); }
}

template <typename T>
struct ColumnValue {
  const T* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1]) const {
    acc[0] += ToF32(x[r * cols + c]);
  }
};

}  // namespace

int64_t ColumnSumScratchFloats(int64_t rows, int64_t cols) {
  return ColumnChunks(rows) * cols;
}

cudaError_t LaunchBiasAdd(float* y, const float* bias, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  BiasAddKernel<<<ElementwiseBlocks(rows * cols), kBlockSize, 0, stream>>>(
      y, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchBiasRowsBf16(void* y, const void* bias, bool bias_bf16, int64_t rows,
                               int64_t cols, cudaStream_t stream) {
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(y);
  if (bias_bf16) {
    BiasRowsBf16Kernel<<<ElementwiseBlocks(rows * cols), kBlockSize, 0, stream>>>(
        out, static_cast<const __nv_bfloat16*>(bias), rows, cols);
  } else {
    BiasRowsBf16Kernel<<<ElementwiseBlocks(rows * cols), kBlockSize, 0, stream>>>(
        out, static_cast<const float*>(bias), rows, cols);
  }
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols,
                            float* out, bool accumulate, float* scratch,
                            cudaStream_t stream) {
  float* const outs[1] = {out};
  return LaunchColumnReduce<1>(ColumnValue<float>{x, cols}, rows, cols, outs,
                               accumulate, scratch, stream);
}

cudaError_t LaunchColumnSumBf16(const void* x, int64_t rows, int64_t cols, float* out,
                                bool accumulate, float* scratch, cudaStream_t stream) {
  float* const outs[1] = {out};
  return LaunchColumnReduce<1>(
      ColumnValue<__nv_bfloat16>{static_cast<const __nv_bfloat16*>(x), cols}, rows, cols, outs,
      accumulate, scratch, stream);
}

}  // namespace cuda
}  // namespace trainc
