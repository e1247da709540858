// Transformer ops: token and position embeddings, and dropout (causal
// attention is attention.cu, softmax softmax.cu); nothing adds floats with
// atomics.
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"
#include "runtime/device/philox.h"

namespace trainc {
namespace cuda {
namespace {

__global__ void EmbeddingKernel(const int32_t* ids, const float* table,
                                float* y, int64_t rows, int64_t vocab,
                                int64_t dim, int* error) {
  TRAINC_GRID_STRIDE(i, rows * dim) {
    const int64_t row = i / dim;
    const int64_t col = i - row * dim;
    const int32_t id = ids[row];
    if (id < 0 || id >= vocab) {
      if (col == 0) atomicOr(error, kErrorTokenOutOfRange);
      y[i] = 0.0f;
    } else {
      y[i] = table[id * dim + col];
    }
  }
}

// Sort keys for the embedding gradient: the id, or `vocab` for an id
// outside [0, vocab) (sorted last, then skipped), and the row index as the
// value the stable sort carries.
__global__ void EmbeddingGradKeysKernel(const int32_t* ids, int64_t rows,
                                        int64_t vocab, uint32_t* keys,
                                        int32_t* row_index) {
  TRAINC_GRID_STRIDE(r, rows) {
    const int32_t id = ids[r];
    keys[r] = (id < 0 || id >= vocab) ? static_cast<uint32_t>(vocab)
                                      : static_cast<uint32_t>(id);
    row_index[r] = static_cast<int32_t>(r);
  }
}

// After the stable sort, the rows of one id are a run in increasing row
// order. The warp at the first position of a run adds the run's dy rows
// into dtable[id] (lane = column), one row after another: the same
// operation order as the CPU's loop over rows, and no two warps ever touch
// the same id.
constexpr int kRunsPerBlock = 8;

__global__ void EmbeddingGradRunKernel(const float* dy, const uint32_t* keys,
                                       const int32_t* row_index, float* dtable,
                                       int64_t rows, int64_t vocab,
                                       int64_t dim) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColTile) + threadIdx.x;
  if (col >= dim) return;
  for (int64_t p = blockIdx.y * static_cast<int64_t>(kRunsPerBlock) +
                   threadIdx.y;
       p < rows; p += static_cast<int64_t>(gridDim.y) * kRunsPerBlock) {
    const uint32_t key = keys[p];
    if (key >= vocab || (p > 0 && keys[p - 1] == key)) continue;
    float* out = dtable + static_cast<int64_t>(key) * dim + col;
    float s = *out;
    for (int64_t q = p; q < rows && keys[q] == key; ++q) {
      s += dy[static_cast<int64_t>(row_index[q]) * dim + col];
    }
    *out = s;
  }
}

__global__ void PositionEmbeddingKernel(const float* table, float* y,
                                        int64_t n, int64_t per_batch) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = table[i % per_batch]; }
}

// dtable[i] (+)= dy[0][i] + dy[1][i] + ...: the batch sum is formed first,
// in increasing b, then stored or added (the CPU's order).
__global__ void PositionEmbeddingGradKernel(const float* dy, float* dtable,
                                            int64_t batch, int64_t per_batch,
                                            bool accumulate) {
  TRAINC_GRID_STRIDE(i, per_batch) {
    float s = batch > 0 ? dy[i] : 0.0f;
    for (int64_t b = 1; b < batch; ++b) s += dy[b * per_batch + i];
    dtable[i] = accumulate ? dtable[i] + s : s;
  }
}

// Bits that hold every embedding-gradient sort key, 0..vocab.
int KeyBits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// The embedding-gradient scratch: keys and row indices before and after the
// sort, then cub's temporary storage, each 256-byte aligned.
struct EmbeddingGradScratch {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* rows_in;
  int32_t* rows_out;
  void* temp;
  size_t temp_bytes;
};

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t EmbeddingGradArrayBytes(int64_t rows) {
  return Align256(static_cast<size_t>(rows > 0 ? rows : 1) * 4);
}

EmbeddingGradScratch SplitEmbeddingGradScratch(void* scratch, size_t bytes,
                                               int64_t rows) {
  const size_t array = EmbeddingGradArrayBytes(rows);
  char* p = static_cast<char*>(scratch);
  EmbeddingGradScratch s;
  s.keys_in = reinterpret_cast<uint32_t*>(p);
  s.keys_out = reinterpret_cast<uint32_t*>(p + array);
  s.rows_in = reinterpret_cast<int32_t*>(p + 2 * array);
  s.rows_out = reinterpret_cast<int32_t*>(p + 3 * array);
  s.temp = p + 4 * array;
  s.temp_bytes = bytes > 4 * array ? bytes - 4 * array : 0;
  return s;
}

// T: f32, or bf16 widened on load and rounded once on store (the staged
// path's bits).
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, int64_t batch,
                              int64_t per_example, float p, uint64_t seed,
                              uint32_t key,
                              const OptimizerStepScalars* scalars,
                              int64_t global_batch, int64_t position,
                              bool accumulate) {
  const uint64_t base =
      static_cast<uint64_t>(scalars->step - 1) * global_batch + position;
  TRAINC_GRID_STRIDE(i, batch * per_example) {
    const int64_t b = i / per_example, j = i % per_example;
    // __fmul_rn: the product is rounded before the accumulating add, as on
    // the CPU; nvcc would otherwise fuse the two into one FMA (one rounding)
    // and the masks' bit-for-bit agreement with the CPU would be lost.
    const float v = __fmul_rn(ToF32(x[i]), DropoutFactor(seed, key, base + b, j, p));
    y[i] = FromF32<T>(accumulate ? ToF32(y[i]) + v : v);
  }
}

}  // namespace

#define TRAINC_LAUNCH_ELEMENTWISE(kernel, n, stream, ...)                 \
  kernel<<<ElementwiseBlocks(n), kBlockSize, 0, stream>>>(__VA_ARGS__); \
  return cudaGetLastError()

cudaError_t LaunchDropout(const void* x, void* y, bool bf16, int64_t batch,
                          int64_t per_example, float p, uint64_t seed,
                          uint32_t key, const OptimizerStepScalars* scalars,
                          int64_t global_batch, int64_t position,
                          bool accumulate, cudaStream_t s) {
  if (bf16) {
    TRAINC_LAUNCH_ELEMENTWISE(DropoutKernel<__nv_bfloat16>, batch * per_example, s,
                              static_cast<const __nv_bfloat16*>(x),
                              static_cast<__nv_bfloat16*>(y), batch, per_example, p, seed, key,
                              scalars, global_batch, position, accumulate);
  }
  TRAINC_LAUNCH_ELEMENTWISE(DropoutKernel<float>, batch * per_example, s,
                            static_cast<const float*>(x), static_cast<float*>(y), batch,
                            per_example, p, seed, key, scalars, global_batch, position,
                            accumulate);
}

cudaError_t LaunchEmbedding(const int32_t* ids, const float* table, float* y,
                            int64_t rows, int64_t vocab, int64_t dim,
                            int* error, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(EmbeddingKernel, rows * dim, s, ids, table, y,
                            rows, vocab, dim, error);
}

cudaError_t EmbeddingGradScratchBytes(int64_t rows, int64_t vocab,
                                      size_t* bytes) {
  size_t temp = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, temp, static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int>(rows), 0,
      KeyBits(vocab));
  *bytes = 4 * EmbeddingGradArrayBytes(rows) + Align256(temp);
  return err;
}

cudaError_t LaunchEmbeddingGrad(const float* dy, const int32_t* ids,
                                float* dtable, int64_t rows, int64_t vocab,
                                int64_t dim, bool accumulate, void* scratch,
                                size_t scratch_bytes, cudaStream_t s) {
  if (!accumulate) {
    const cudaError_t err = cudaMemsetAsync(
        dtable, 0, static_cast<size_t>(vocab * dim) * sizeof(float), s);
    if (err != cudaSuccess) return err;
  }
  if (rows <= 0 || dim <= 0) return cudaGetLastError();
  EmbeddingGradScratch sc = SplitEmbeddingGradScratch(scratch, scratch_bytes,
                                                      rows);
  EmbeddingGradKeysKernel<<<ElementwiseBlocks(rows), kBlockSize, 0, s>>>(
      ids, rows, vocab, sc.keys_in, sc.rows_in);
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      sc.temp, sc.temp_bytes, sc.keys_in, sc.keys_out, sc.rows_in,
      sc.rows_out, static_cast<int>(rows), 0, KeyBits(vocab), s);
  if (err != cudaSuccess) return err;
  const int64_t run_blocks = (rows + kRunsPerBlock - 1) / kRunsPerBlock;
  dim3 block(kColTile, kRunsPerBlock);
  dim3 grid(static_cast<unsigned>((dim + kColTile - 1) / kColTile),
            static_cast<unsigned>(run_blocks < kMaxGridY ? run_blocks
                                                         : kMaxGridY));
  EmbeddingGradRunKernel<<<grid, block, 0, s>>>(dy, sc.keys_out, sc.rows_out,
                                                dtable, rows, vocab, dim);
  return cudaGetLastError();
}

cudaError_t LaunchPositionEmbedding(const float* table, float* y,
                                    int64_t batch, int64_t positions,
                                    int64_t dim, cudaStream_t s) {
  const int64_t per_batch = positions * dim;
  TRAINC_LAUNCH_ELEMENTWISE(PositionEmbeddingKernel, batch * per_batch, s,
                            table, y, batch * per_batch, per_batch);
}

cudaError_t LaunchPositionEmbeddingGrad(const float* dy, float* dtable,
                                        int64_t batch, int64_t positions,
                                        int64_t dim, bool accumulate,
                                        cudaStream_t s) {
  const int64_t per_batch = positions * dim;
  TRAINC_LAUNCH_ELEMENTWISE(PositionEmbeddingGradKernel, per_batch, s, dy,
                            dtable, batch, per_batch, accumulate);
}

}  // namespace cuda
}  // namespace trainc
