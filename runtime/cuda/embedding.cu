// embedding's CUDA kernels (compiler/ops/embedding_family.h). Token
// embeddings gather rows; their gradient sorts the ids (a stable radix
// sort) so that each id's rows are added in increasing row order, as on
// the CPU, with no float atomics. Position embeddings copy the table per
// batch element; their gradient sums over the batch in increasing order.
#include <cub/device/device_radix_sort.cuh>

#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::EmbeddingFamily::Args;

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

#define TRAINC_LAUNCH_ELEMENTWISE(kernel, n, stream, ...)                 \
  kernel<<<ElementwiseBlocks(n), kBlockSize, 0, stream>>>(__VA_ARGS__); \
  return cudaGetLastError()

// An id outside [0, vocab) sets kErrorTokenOutOfRange in *error.
cudaError_t Forward(const Args& a, const float* table, float* y, int* error, cudaStream_t s) {
  TRAINC_LAUNCH_ELEMENTWISE(EmbeddingKernel, a.rows * a.width, s, a.ids, table, y, a.rows,
                            a.vocab, a.width, error);
}

// The scratch Grad needs for `rows` ids of a `vocab`-row table.
cudaError_t GradScratchBytes(int64_t rows, int64_t vocab, size_t* bytes) {
  size_t temp = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, temp, static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int>(rows), 0,
      KeyBits(vocab));
  *bytes = 4 * EmbeddingGradArrayBytes(rows) + Align256(temp);
  return err;
}

// Deterministic (no float atomics): a stable sort of the ids groups each
// id's rows, which are then added into dtable in increasing row order (the
// CPU's order). `scratch` (256-byte aligned) holds GradScratchBytes; rows
// and vocab fit in int32. Ids outside [0, vocab) are skipped.
cudaError_t Grad(const Args& a, const float* dy, float* dtable, bool accumulate, void* scratch,
                 size_t scratch_bytes, cudaStream_t s) {
  const int64_t rows = a.rows, vocab = a.vocab, dim = a.width;
  if (!accumulate) {
    const cudaError_t err = cudaMemsetAsync(
        dtable, 0, static_cast<size_t>(vocab * dim) * sizeof(float), s);
    if (err != cudaSuccess) return err;
  }
  if (rows <= 0 || dim <= 0) return cudaGetLastError();
  EmbeddingGradScratch sc = SplitEmbeddingGradScratch(scratch, scratch_bytes,
                                                      rows);
  EmbeddingGradKeysKernel<<<ElementwiseBlocks(rows), kBlockSize, 0, s>>>(
      a.ids, rows, vocab, sc.keys_in, sc.rows_in);
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

cudaError_t PositionForward(const Args& a, const float* table, float* y, cudaStream_t s) {
  const int64_t per_batch = a.positions * a.width;
  TRAINC_LAUNCH_ELEMENTWISE(PositionEmbeddingKernel, a.batch * per_batch, s,
                            table, y, a.batch * per_batch, per_batch);
}

cudaError_t PositionGrad(const Args& a, const float* dy, float* dtable, bool accumulate,
                         cudaStream_t s) {
  const int64_t per_batch = a.positions * a.width;
  TRAINC_LAUNCH_ELEMENTWISE(PositionEmbeddingGradKernel, per_batch, s, dy,
                            dtable, a.batch, per_batch, accumulate);
}

#undef TRAINC_LAUNCH_ELEMENTWISE

}  // namespace

const char* PrepareEmbedding(KernelOp op, const Args& a, int64_t* scratch_floats) {
  if (op != KernelOp::kEmbeddingGrad) return nullptr;
  // cub's radix sort counts items (and the sort keys hold ids) in int.
  if (a.rows > INT32_MAX || a.vocab > INT32_MAX - 1) {
    return "more ids or a larger vocabulary than int32 holds";
  }
  size_t bytes = 0;
  const cudaError_t err = GradScratchBytes(a.rows, a.vocab, &bytes);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const int64_t floats = static_cast<int64_t>((bytes + 3) / 4);
  if (*scratch_floats < floats) *scratch_floats = floats;
  return nullptr;
}

cudaError_t LaunchEmbedding(KernelOp op, const Args& a, const float* const* x, float* const* y,
                            const UnitLaunch& env) {
  switch (op) {
    case KernelOp::kEmbedding:
      return Forward(a, x[1], y[0], env.error, env.stream);
    case KernelOp::kEmbeddingGrad:
      return Grad(a, x[0], y[0], env.accumulate, env.scratch,
                  static_cast<size_t>(env.scratch_floats) * 4, env.stream);
    case KernelOp::kPositionEmbedding:
      return PositionForward(a, x[0], y[0], env.stream);
    case KernelOp::kPositionEmbeddingGrad:
      return PositionGrad(a, x[0], y[0], env.accumulate, env.stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
