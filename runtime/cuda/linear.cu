// Linear layer kernels that cuBLAS does not cover: the bias epilogue
// fallback and the bias gradient (a deterministic column sum of dy).
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

__global__ void BiasAddKernel(float* y, const float* bias, int64_t rows,
                              int64_t cols) {
  TRAINC_GRID_STRIDE(i, rows * cols) { y[i] += bias[i % cols]; }
}

struct ColumnValue {
  const float* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1]) const {
    acc[0] += x[r * cols + c];
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

cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols,
                            float* out, bool accumulate, float* scratch,
                            cudaStream_t stream) {
  float* const outs[1] = {out};
  return LaunchColumnReduce<1>(ColumnValue{x, cols}, rows, cols, outs,
                               accumulate, scratch, stream);
}

}  // namespace cuda
}  // namespace trainc
