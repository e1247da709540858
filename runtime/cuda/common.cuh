// Device helpers shared by the kernel files: launch geometry, storage
// types, warp and block reductions, and the deterministic two-pass column
// reduction.
#ifndef TRAINC_RUNTIME_CUDA_COMMON_CUH_
#define TRAINC_RUNTIME_CUDA_COMMON_CUH_

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace trainc {
namespace cuda {

inline constexpr int kWarpSize = 32;
inline constexpr int kBlockSize = 256;
inline constexpr int kWarpsPerBlock = kBlockSize / kWarpSize;

// Elementwise kernels use a grid-stride loop over a capped grid: enough
// blocks to fill an H100 many times over, few enough to amortise the launch.
inline unsigned ElementwiseBlocks(int64_t n) {
  int64_t blocks = (n + kBlockSize - 1) / kBlockSize;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
}

// At least one block: a grid of 0 blocks is a launch error, and the row
// kernels return early for rows >= `rows` (whole warps, so full-mask
// shuffles stay valid).
inline unsigned RowWarpBlocks(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// The row of this thread's warp in a row kernel (RowWarpBlocks blocks).
__device__ __forceinline__ int64_t WarpRow() {
  return blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
}

// Operands stored as T: f32 as is, bf16 widened on load and rounded to
// nearest even on store (the staged path's arithmetic and rounding, so a
// kernel that reads and writes bf16 itself gives the staged path's bits).
__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

#define TRAINC_GRID_STRIDE(i, n)                                       \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) +     \
                   threadIdx.x;                                        \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Butterfly reduction: every lane ends with the same, order-fixed sum.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// out[0] = sum of values[0..n): one block of kBlockSize threads, fixed order
// (strided per-thread sums, then a tree), so the loss is reproducible.
// Accumulated in double, as the CPU reference accumulates its loss.
// (Templates here and below so every .cu file can include the definition.)
template <int kUnused = 0>
__global__ void SumToScalarKernel(const float* values, int64_t n, float* out) {
  __shared__ double shared[kBlockSize];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlockSize) s += values[i];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int width = kBlockSize / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(shared[0]);
}

// Max and sum over each aligned group of 4 lanes (butterflies: all four
// end with the same, order-fixed value).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Column reduction in two passes without atomics. Pass 1: block (32 columns
// x 8 row lanes) per (column tile, chunk of kRowsPerChunk rows) writes one
// partial per chunk; pass 2 adds the chunks in order. Coalesced: a warp
// reads 32 consecutive floats of one row.
inline constexpr int kColTile = 32;
inline constexpr int kRowLanes = 8;
inline constexpr int64_t kRowsPerChunk = 256;

inline int64_t ColumnChunks(int64_t rows) {
  int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return chunks < 1 ? 1 : chunks;
}

// gridDim.y is capped at 65535, so blocks loop over chunks (rows beyond
// 65535 * kRowsPerChunk would otherwise be an invalid launch).
inline constexpr int64_t kMaxGridY = 65535;

// `f(r, c, v)` adds row r's K contributions for column c into v[0..K).
// partial[k][chunk][c] with stride chunks * cols between the K outputs.
template <int K, typename F>
__global__ void ColumnPartialKernel(F f, int64_t rows, int64_t cols,
                                    int64_t chunks, float* partial) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColTile) + threadIdx.x;
  __shared__ float shared[K][kRowLanes][kColTile + 1];
  // Block-uniform loop: the __syncthreads below are reached by all threads.
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r0 = chunk * kRowsPerChunk;
    const int64_t r1 = min(rows, r0 + kRowsPerChunk);
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    if (col < cols) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) f(r, col, acc);
    }
#pragma unroll
    for (int k = 0; k < K; ++k) shared[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float s = shared[k][0][threadIdx.x];
        for (int lane = 1; lane < kRowLanes; ++lane) {
          s += shared[k][lane][threadIdx.x];
        }
        partial[(k * chunks + chunk) * cols + col] = s;
      }
    }
    __syncthreads();  // shared is rewritten by the next chunk
  }
}

// out[c] (+)= sum over chunks of partial[chunk][c], chunks in order.
template <int kUnused = 0>
__global__ void ColumnFinishKernel(const float* partial, int64_t chunks,
                                   int64_t cols, float* out, bool accumulate) {
  TRAINC_GRID_STRIDE(c, cols) {
    float s = partial[c];
    for (int64_t chunk = 1; chunk < chunks; ++chunk) s += partial[chunk * cols + c];
    out[c] = accumulate ? out[c] + s : s;
  }
}

template <int K, typename F>
cudaError_t LaunchColumnReduce(F f, int64_t rows, int64_t cols,
                               float* const (&outs)[K], bool accumulate,
                               float* scratch, cudaStream_t stream) {
  if (cols <= 0) return cudaGetLastError();  // grid.x would be 0
  const int64_t chunks = ColumnChunks(rows);
  dim3 block(kColTile, kRowLanes);
  dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
            static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  ColumnPartialKernel<K><<<grid, block, 0, stream>>>(f, rows, cols, chunks,
                                                     scratch);
  for (int k = 0; k < K; ++k) {
    ColumnFinishKernel<><<<ElementwiseBlocks(cols), kBlockSize, 0, stream>>>(
        scratch + k * chunks * cols, chunks, cols, outs[k], accumulate);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_COMMON_CUH_
