// attention's CUDA kernels (compiler/ops/attention_family.h, a unit
// family), causal attention in O(T) memory: tiled,
// FlashAttention-style kernels on CUDA cores (f32 FMA), with grouped-query
// heads and rotary positions. Nothing [T, T] exists: the forward keeps a
// running softmax per query row and saves its log-sum-exp; the backward
// recomputes each tile's probabilities from it.
//
// Tiles are kTile = 32 query rows or keys of one head, staged in shared
// memory as f32 [32][kD + 1] (kD = 32, 64 or 128, the smallest >= d; the
// columns past d are zeros, so they add nothing to any product; the extra
// float per row keeps a warp's column reads on distinct banks). A block
// has 128 threads, 4 per tile row: thread t owns row t / 4 and, of a tile's
// 32 columns (scores) or kD columns (accumulators), those congruent to t % 4
// mod 4. The 4 threads of a row are consecutive lanes of one warp and
// reduce with two butterfly shuffles.
//
// Deterministic: no atomics; every sum runs in an order fixed by the shape
// alone, so replays give the same bits. The backward is three kernels:
// delta = rowsum(dy y); dK and dV, a block per key tile of one kv head,
// over the group's query heads and the query tiles on or below the
// diagonal in increasing order; dQ, a block per query tile, over the key
// tiles up to the diagonal (recomputing the scores rather than adding dQ
// with atomics).
//
// Rotary positions: q and k are rotated as they are staged (and dq, dk
// rotated back before they are stored) with attention::RotatePair and the
// angles of attention::RopeCosSin.
//
// bf16 operands with head size 64 or 128 may run on tensor cores instead
// (attention_mma.cu; AttentionUsesMma chooses), sharing the delta kernel.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using attention::Geometry;

// The largest head size d the kernels hold (their tiles are 32, 64 or 128
// wide); PrepareAttention refuses larger heads.
constexpr int64_t kMaxHeadDim = 128;

constexpr int kTile = 32;                      // query rows (Br) and keys (Bc)
constexpr int kThreads = 128;                  // per block
constexpr int kLanesPerRow = kThreads / kTile;  // 4 threads share a tile row
constexpr int kPerLane = kTile / kLanesPerRow;  // 8 scores per thread
constexpr int kScoreStride = kTile + 1;         // a [32][33] score tile
// The delta kernel's warps stride over rows beyond this many.
constexpr int64_t kDeltaRowsPerLaunch = int64_t{8192} * kWarpsPerBlock;

static_assert(kLanesPerRow == 4, "QuadMax and QuadSum reduce a row's 4 lanes");

// Row stride (floats) of a staged [kTile][kD] tile.
template <int kD>
__host__ __device__ constexpr int Stride() {
  return kD + 1;
}
template <int kD>
__host__ __device__ constexpr int TileFloats() {
  return kTile * Stride<kD>();
}

// Dynamic shared memory of every kernel below (*SmemFloats of them).
__device__ __forceinline__ float* SharedFloats() {
  extern __shared__ float attention_shared[];
  return attention_shared;
}

// Tiles of kTile rows that cover seq (at most INT32_MAX / kTile + 1: the
// backend refuses a longer sequence when it prepares the plan).
__host__ __device__ __forceinline__ int Tiles(int64_t seq) {
  return static_cast<int>((seq + kTile - 1) / kTile);
}

// inv_freq[i] = attention::RopeInvFreq(i, d, theta) for i < d / 2, once per
// block: a double pow per rotated pair would cost more than its products.
__device__ void LoadInvFreq(const Geometry& g, float* inv_freq) {
  const int n = static_cast<int>(g.head_dim / 2);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    inv_freq[i] = attention::RopeInvFreq(i, g.head_dim, g.rope_theta);
  }
}

// Stages rows [t0, t0 + kTile) of one head into s[kTile][kD + 1] as f32:
// `head` is the head's first column in row 0, rows `ld` elements apart.
// Rows at or past `seq` and columns past d are zeros. Coalesced: a warp
// reads consecutive columns of a row.
template <int kD, typename T>
__device__ void LoadTile(const T* head, int64_t ld, int t0, int seq, int d, float* s) {
  for (int e = threadIdx.x; e < kTile * kD; e += kThreads) {
    const int r = e / kD, c = e % kD, t = t0 + r;
    s[r * Stride<kD>() + c] = t < seq && c < d ? ToF32(head[t * ld + c]) : 0.0f;
  }
}

// The reverse: s's rows below `seq`, d columns, stored into (or, with
// `accumulate`, added to) the head's columns.
template <int kD, typename T>
__device__ void StoreTile(const float* s, int t0, int seq, int d, T* head, int64_t ld,
                          bool accumulate) {
  for (int e = threadIdx.x; e < kTile * kD; e += kThreads) {
    const int r = e / kD, c = e % kD, t = t0 + r;
    if (t >= seq || c >= d) continue;
    T* out = head + t * ld + c;
    const float v = s[r * Stride<kD>() + c];
    *out = FromF32<T>(accumulate ? ToF32(*out) + v : v);
  }
}

// Rotary positions on a staged tile, in place: pair (i, i + d / 2) of row r
// turned by the angles of position t0 + r (inverse: back, the transpose).
// The caller synchronises before and after (the tile's other pairs belong
// to other threads).
template <int kD>
__device__ void RotateTile(float* s, int t0, int seq, int d, const float* inv_freq,
                           bool inverse) {
  const int n = d / 2;
  for (int e = threadIdx.x; e < kTile * n; e += kThreads) {
    const int r = e / n, i = e % n;
    if (t0 + r >= seq) continue;
    float c, sn;
    attention::RopeCosSinOf(t0 + r, inv_freq[i], &c, &sn);
    attention::RotatePair(s[r * Stride<kD>() + i], s[r * Stride<kD>() + i + n], c, sn,
                          inverse);
  }
}

// Eight dot products of length kD against one row: acc[m] += a . b_m, where
// `a` is a staged row and b_m rows `lane + 4 m` of a staged tile. The same
// order of terms in every kernel, so the backward's scores are the
// forward's bits.
template <int kD>
__device__ __forceinline__ void RowDots(const float* a, const float* tile, int lane,
                                        float (&acc)[kPerLane]) {
#pragma unroll 4
  for (int c = 0; c < kD; ++c) {
    const float x = a[c];
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      acc[m] = fmaf(x, tile[(lane + kLanesPerRow * m) * Stride<kD>() + c], acc[m]);
    }
  }
}

// acc[jj] += sum_j w[j] tile[j][lane + 4 jj] over the kTile rows of a
// staged tile, j increasing: one row of a [32 x 32] x [32 x kD] product
// into this thread's columns.
template <int kD>
__device__ __forceinline__ void AccumulateRows(const float* w, const float* tile, int lane,
                                               float (&acc)[kD / kLanesPerRow]) {
#pragma unroll 2
  for (int j = 0; j < kTile; ++j) {
    const float x = w[j];
#pragma unroll
    for (int jj = 0; jj < kD / kLanesPerRow; ++jj) {
      acc[jj] = fmaf(x, tile[j * Stride<kD>() + lane + kLanesPerRow * jj], acc[jj]);
    }
  }
}

// This thread's accumulator columns into row `row` of a staged tile,
// times `scale`.
template <int kD>
__device__ __forceinline__ void SpillRow(const float (&acc)[kD / kLanesPerRow], float scale,
                                         int row, int lane, float* tile) {
#pragma unroll
  for (int jj = 0; jj < kD / kLanesPerRow; ++jj) {
    tile[row * Stride<kD>() + lane + kLanesPerRow * jj] = acc[jj] * scale;
  }
}

// ---- forward ---------------------------------------------------------------

template <int kD>
__host__ __device__ constexpr int ForwardSmemFloats() {
  return 3 * TileFloats<kD>() + kTile * kScoreStride + kD / 2;
}

// Key/value tile k0 of key/value head kv into shared k and v, k rotated
// when rope is on; every thread may read both when it returns. The caller
// has synchronised after the previous tile's last read.
template <int kD, typename T>
__device__ void LoadKeyValueTile(const Geometry& g, const T* rows, int64_t kv, int k0,
                                 const float* inv_freq, float* k, float* v) {
  const int seq = static_cast<int>(g.seq), d = static_cast<int>(g.head_dim);
  const int64_t width = g.QkvWidth();
  LoadTile<kD>(rows + g.KOffset(kv), width, k0, seq, d, k);
  LoadTile<kD>(rows + g.VOffset(kv), width, k0, seq, d, v);
  if (g.rope) {
    __syncthreads();
    RotateTile<kD>(k, k0, seq, d, inv_freq, false);
  }
  __syncthreads();
}

// Block: one query tile of one (b, h); blockIdx.x = qt' * B H + (b H + h)
// with qt' counting from the last tile, so the longest blocks start first.
// Per key tile up to the diagonal: scores S = scale q' k'^T (8 per thread),
// the causal mask, the online softmax (running max m and sum l per row)
// and O = O exp(m_old - m_new) + P V in registers. y = O / l and
// lse = m + log(l) at the end.
template <int kD, typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(Geometry g, const T* qkv, T* y, float* lse) {
  constexpr int S = Stride<kD>();
  float* q = SharedFloats();
  float* k = q + TileFloats<kD>();
  float* v = k + TileFloats<kD>();
  float* p = v + TileFloats<kD>();
  float* inv_freq = p + kTile * kScoreStride;

  const int seq = static_cast<int>(g.seq), d = static_cast<int>(g.head_dim);
  const int64_t heads = g.batch * g.heads;
  const int64_t bh = blockIdx.x % heads;
  const int qt = Tiles(seq) - 1 - static_cast<int>(blockIdx.x / heads);
  const int64_t b = bh / g.heads, h = bh % g.heads, kv = g.KvHeadOf(h);
  const int64_t width = g.QkvWidth();
  const T* rows = qkv + b * seq * width;
  const int row = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
  const int q0 = qt * kTile, i = q0 + row;
  const float scale = g.Scale();

  if (g.rope) LoadInvFreq(g, inv_freq);
  LoadTile<kD>(rows + g.QOffset(h), width, q0, seq, d, q);
  __syncthreads();
  if (g.rope) RotateTile<kD>(q, q0, seq, d, inv_freq, false);

  float o[kD / kLanesPerRow] = {};
  float m = -INFINITY, l = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // q is rotated; the last tile's k, v and p are read
    LoadKeyValueTile<kD>(g, rows, kv, k0, inv_freq, k, v);
    float s[kPerLane] = {};
    RowDots<kD>(q + row * S, k, lane, s);
    // Key k0 is on or below the diagonal of every row here, so each row
    // has a finite score and m stays finite after the first tile.
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < kPerLane; ++n) {
      const int j = k0 + lane + kLanesPerRow * n;
      s[n] = j <= i && j < seq ? s[n] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[n]);
    }
    const float m_new = fmaxf(m, QuadMax(tile_max));
    const float alpha = expf(m - m_new);  // 0 on the first tile
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kPerLane; ++n) {
      s[n] = expf(s[n] - m_new);  // exact 0 where masked
      sum += s[n];
      p[row * kScoreStride + lane + kLanesPerRow * n] = s[n];
    }
    l = l * alpha + QuadSum(sum);
    m = m_new;
    __syncthreads();  // p is whole
#pragma unroll
    for (int jj = 0; jj < kD / kLanesPerRow; ++jj) o[jj] *= alpha;
    AccumulateRows<kD>(p + row * kScoreStride, v, lane, o);
  }
  __syncthreads();  // q is free: it stages y
#pragma unroll
  for (int jj = 0; jj < kD / kLanesPerRow; ++jj) {
    q[row * S + lane + kLanesPerRow * jj] = o[jj] / l;
  }
  if (lane == 0 && i < seq) lse[bh * seq + i] = m + logf(l);
  __syncthreads();
  StoreTile<kD>(q, q0, seq, d, y + b * seq * g.OutWidth() + h * d, g.OutWidth(), false);
}

// ---- backward ---------------------------------------------------------------

// delta[b, h, i] = sum_c dy[b, i, h d + c] y[b, i, h d + c]: one warp per
// row (rows in lse's [B, H, T] order), lane-strided then a butterfly.
template <typename T>
__global__ void AttentionDeltaKernel(Geometry g, const T* dy, const T* y, float* delta) {
  const int64_t rows = g.batch * g.heads * g.seq;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
       r < rows; r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t i = r % g.seq, bh = r / g.seq;
    const int64_t b = bh / g.heads, h = bh % g.heads;
    const int64_t at = (b * g.seq + i) * g.OutWidth() + h * g.head_dim;
    float s = 0.0f;
    for (int64_t c = lane; c < g.head_dim; c += kWarpSize) {
      s = fmaf(ToF32(dy[at + c]), ToF32(y[at + c]), s);
    }
    s = WarpSum(s);
    if (lane == 0) delta[r] = s;
  }
}

template <int kD>
__host__ __device__ constexpr int KeyGradSmemFloats() {
  return 4 * TileFloats<kD>() + 2 * kTile * kScoreStride + 2 * kTile + kD / 2;
}

// Block: one key tile of one (b, kv head); blockIdx.x = kt * B KV + (b KV +
// g), so the longest blocks (small kt) start first. Thread t owns key
// t / 4 and accumulates its dK' and dV columns in registers over the
// group's query heads in increasing order, and for each over the query
// tiles from the key tile's own to the last:
//   P = exp(scale q' . k' - lse) (0 above the diagonal), dP = dy . v,
//   dS = P (dP - delta);  dV += P^T dY,  dK' += scale dS^T Q'.
// Each thread forms the 8 (key, query) pairs of its key and queries t % 4
// + 4 m; the [key][query] tiles of P and dS in shared memory give every
// thread all 32 queries of its key. dK' is rotated back before the store.
template <int kD, typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionKeyGradKernel(Geometry g, const T* dy, const T* qkv, const float* lse,
                           const float* delta, T* dqkv, bool accumulate) {
  constexpr int S = Stride<kD>();
  float* k = SharedFloats();
  float* v = k + TileFloats<kD>();
  float* q = v + TileFloats<kD>();
  float* dys = q + TileFloats<kD>();
  float* p = dys + TileFloats<kD>();   // [key][query]
  float* ds = p + kTile * kScoreStride;  // [key][query]
  float* lse_s = ds + kTile * kScoreStride;
  float* delta_s = lse_s + kTile;
  float* inv_freq = delta_s + kTile;

  const int seq = static_cast<int>(g.seq), d = static_cast<int>(g.head_dim);
  const int tiles = Tiles(seq);
  const int64_t kv_heads = g.batch * g.kv_heads;
  const int64_t bk = blockIdx.x % kv_heads;
  const int kt = static_cast<int>(blockIdx.x / kv_heads);
  const int64_t b = bk / g.kv_heads, kv = bk % g.kv_heads;
  const int64_t width = g.QkvWidth(), out_width = g.OutWidth();
  const T* rows = qkv + b * seq * width;
  const T* dy_rows = dy + b * seq * out_width;
  const int key = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
  const int k0 = kt * kTile, j = k0 + key;
  const float scale = g.Scale();

  if (g.rope) LoadInvFreq(g, inv_freq);
  LoadTile<kD>(rows + g.KOffset(kv), width, k0, seq, d, k);
  LoadTile<kD>(rows + g.VOffset(kv), width, k0, seq, d, v);
  __syncthreads();
  if (g.rope) RotateTile<kD>(k, k0, seq, d, inv_freq, false);

  float dk[kD / kLanesPerRow] = {}, dv[kD / kLanesPerRow] = {};
  for (int64_t h = kv * g.Group(); h < (kv + 1) * g.Group(); ++h) {
    for (int qt = kt; qt < tiles; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();  // k is rotated; the last tile's q, dys, p, ds are read
      LoadTile<kD>(rows + g.QOffset(h), width, q0, seq, d, q);
      LoadTile<kD>(dy_rows + h * d, out_width, q0, seq, d, dys);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const bool in = q0 + r < seq;
        lse_s[r] = in ? lse[(b * g.heads + h) * seq + q0 + r] : 0.0f;
        delta_s[r] = in ? delta[(b * g.heads + h) * seq + q0 + r] : 0.0f;
      }
      if (g.rope) {
        __syncthreads();
        RotateTile<kD>(q, q0, seq, d, inv_freq, false);
      }
      __syncthreads();
      float s[kPerLane] = {}, dp[kPerLane] = {};
      RowDots<kD>(k + key * S, q, lane, s);  // k'_j . q'_i = the forward's q'_i . k'_j
      RowDots<kD>(v + key * S, dys, lane, dp);
#pragma unroll
      for (int n = 0; n < kPerLane; ++n) {
        const int r = lane + kLanesPerRow * n, i = q0 + r;
        const float pr = j <= i && i < seq && j < seq ? expf(s[n] * scale - lse_s[r]) : 0.0f;
        p[key * kScoreStride + r] = pr;
        ds[key * kScoreStride + r] = pr * (dp[n] - delta_s[r]);
      }
      __syncthreads();  // p and ds are whole
      AccumulateRows<kD>(p + key * kScoreStride, dys, lane, dv);
      AccumulateRows<kD>(ds + key * kScoreStride, q, lane, dk);
    }
  }
  __syncthreads();  // q and dys are free: they stage dK' and dV
  SpillRow<kD>(dk, scale, key, lane, q);
  SpillRow<kD>(dv, 1.0f, key, lane, dys);
  if (g.rope) {
    __syncthreads();
    RotateTile<kD>(q, k0, seq, d, inv_freq, true);
  }
  __syncthreads();
  T* out = dqkv + b * seq * width;
  StoreTile<kD>(q, k0, seq, d, out + g.KOffset(kv), width, accumulate);
  StoreTile<kD>(dys, k0, seq, d, out + g.VOffset(kv), width, accumulate);
}

template <int kD>
__host__ __device__ constexpr int QueryGradSmemFloats() {
  return 4 * TileFloats<kD>() + kTile * kScoreStride + kD / 2;
}

// Block: one query tile of one (b, h), ordered as the forward's. Thread t
// owns query row t / 4 and its dQ' columns; per key tile up to the
// diagonal it forms P, dP and dS as the key kernel does (the same bits)
// for keys t % 4 + 4 m, then dQ' += scale dS K'. dQ' is rotated back
// before the store.
template <int kD, typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionQueryGradKernel(Geometry g, const T* dy, const T* qkv, const float* lse,
                             const float* delta, T* dqkv, bool accumulate) {
  constexpr int S = Stride<kD>();
  float* q = SharedFloats();
  float* dys = q + TileFloats<kD>();
  float* k = dys + TileFloats<kD>();
  float* v = k + TileFloats<kD>();
  float* ds = v + TileFloats<kD>();  // [query][key]
  float* inv_freq = ds + kTile * kScoreStride;

  const int seq = static_cast<int>(g.seq), d = static_cast<int>(g.head_dim);
  const int64_t heads = g.batch * g.heads;
  const int64_t bh = blockIdx.x % heads;
  const int qt = Tiles(seq) - 1 - static_cast<int>(blockIdx.x / heads);
  const int64_t b = bh / g.heads, h = bh % g.heads, kv = g.KvHeadOf(h);
  const int64_t width = g.QkvWidth(), out_width = g.OutWidth();
  const T* rows = qkv + b * seq * width;
  const int row = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
  const int q0 = qt * kTile, i = q0 + row;
  const float scale = g.Scale();
  const float row_lse = i < seq ? lse[bh * seq + i] : 0.0f;
  const float row_delta = i < seq ? delta[bh * seq + i] : 0.0f;

  if (g.rope) LoadInvFreq(g, inv_freq);
  LoadTile<kD>(rows + g.QOffset(h), width, q0, seq, d, q);
  LoadTile<kD>(dy + b * seq * out_width + h * d, out_width, q0, seq, d, dys);
  __syncthreads();
  if (g.rope) RotateTile<kD>(q, q0, seq, d, inv_freq, false);

  float dq[kD / kLanesPerRow] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // q is rotated; the last tile's k, v and ds are read
    LoadKeyValueTile<kD>(g, rows, kv, k0, inv_freq, k, v);
    float s[kPerLane] = {}, dp[kPerLane] = {};
    RowDots<kD>(q + row * S, k, lane, s);
    RowDots<kD>(dys + row * S, v, lane, dp);
#pragma unroll
    for (int n = 0; n < kPerLane; ++n) {
      const int c = lane + kLanesPerRow * n, j = k0 + c;
      const float pr = j <= i && i < seq && j < seq ? expf(s[n] * scale - row_lse) : 0.0f;
      ds[row * kScoreStride + c] = pr * (dp[n] - row_delta);
    }
    __syncthreads();  // ds is whole
    AccumulateRows<kD>(ds + row * kScoreStride, k, lane, dq);
  }
  __syncthreads();  // q is free: it stages dQ'
  SpillRow<kD>(dq, scale, row, lane, q);
  if (g.rope) {
    __syncthreads();
    RotateTile<kD>(q, q0, seq, d, inv_freq, true);
  }
  __syncthreads();
  StoreTile<kD>(q, q0, seq, d, dqkv + b * seq * width + g.QOffset(h), width, accumulate);
}

// ---- launch ------------------------------------------------------------------

template <int kD>
using HeadDim = std::integral_constant<int, kD>;

// f(HeadDim<kD>()) for the smallest kD of 32, 64, 128 that holds d.
template <typename F>
cudaError_t WithHeadDim(int64_t d, F&& f) {
  if (d < 1) return cudaErrorInvalidValue;
  if (d <= 32) return f(HeadDim<32>());
  if (d <= 64) return f(HeadDim<64>());
  if (d <= kMaxHeadDim) return f(HeadDim<128>());
  return cudaErrorInvalidValue;
}

// f(T()) for the storage type of the tensors other than lse and delta.
template <typename F>
cudaError_t WithStorage(bool bf16, F&& f) {
  return bf16 ? f(__nv_bfloat16()) : f(0.0f);
}

constexpr size_t Bytes(int floats) { return static_cast<size_t>(floats) * sizeof(float); }

// Lets the kernels use more than 48 KB of shared memory on the current
// device (cudaFuncSetAttribute): before their first launch, outside stream
// capture.
cudaError_t AllowSharedMemory() {
  cudaError_t err = cudaSuccess;
  auto allow = [&](const void* kernel, int floats) {
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(Bytes(floats)));
    }
  };
  for (bool bf16 : {false, true}) {
    for (int d : {32, 64, 128}) {
      WithStorage(bf16, [&](auto zero) {
        using T = decltype(zero);
        return WithHeadDim(d, [&](auto dim) {
          constexpr int kD = decltype(dim)::value;
          allow(reinterpret_cast<const void*>(&AttentionForwardKernel<kD, T>),
                ForwardSmemFloats<kD>());
          allow(reinterpret_cast<const void*>(&AttentionKeyGradKernel<kD, T>),
                KeyGradSmemFloats<kD>());
          allow(reinterpret_cast<const void*>(&AttentionQueryGradKernel<kD, T>),
                QueryGradSmemFloats<kD>());
          return err;
        });
      });
    }
  }
  return err;
}

// Blocks of one launch: a tile of queries (or keys) of one head.
int64_t Blocks(int64_t seq, int64_t batch, int64_t heads) {
  return static_cast<int64_t>(Tiles(seq)) * batch * heads;
}

// qkv[B, T, (H + 2 KV) d] -> y[B, T, H d], lse[B, H, T] = each row's
// log-sum-exp of its scaled scores. qkv and y are f32, or bf16 when `bf16`
// (widened on load, rounded to nearest even on store: the staged path's
// bits); lse always f32.
cudaError_t LaunchForward(const Geometry& g, const void* qkv, void* y, float* lse, bool bf16,
                          cudaStream_t s) {
  const int64_t blocks = Blocks(g.seq, g.batch, g.heads);
  if (blocks == 0) return cudaGetLastError();
  return WithStorage(bf16, [&](auto zero) {
    using T = decltype(zero);
    return WithHeadDim(g.head_dim, [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      AttentionForwardKernel<kD, T>
          <<<static_cast<unsigned>(blocks), kThreads, Bytes(ForwardSmemFloats<kD>()), s>>>(
              g, static_cast<const T*>(qkv), static_cast<T*>(y), lse);
      return cudaGetLastError();
    });
  });
}

// dqkv (+)= the gradient given dy[B, T, H d] and the forward's qkv, y and
// lse; delta[B, H, T] = rowsum(dy y) is written first and read after (its
// prior contents never are; nor dqkv's unless `accumulate`). Storage as
// LaunchForward's.
// `mma`: dqkv from attention_mma.cu's kernels after the delta.
cudaError_t LaunchGrad(const Geometry& g, const void* dy, const void* qkv, const void* y,
                       const float* lse, void* dqkv, float* delta, bool accumulate, bool bf16,
                       bool mma, cudaStream_t s) {
  const int64_t query_blocks = Blocks(g.seq, g.batch, g.heads);
  const int64_t key_blocks = Blocks(g.seq, g.batch, g.kv_heads);
  if (query_blocks == 0 || key_blocks == 0) return cudaGetLastError();
  return WithStorage(bf16, [&](auto zero) {
    using T = decltype(zero);
    return WithHeadDim(g.head_dim, [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      const T* dy_t = static_cast<const T*>(dy);
      const T* qkv_t = static_cast<const T*>(qkv);
      T* dqkv_t = static_cast<T*>(dqkv);
      // Warps stride over the rows, so the grid is capped as elementwise ones.
      const int64_t rows = g.batch * g.heads * g.seq;
      const unsigned delta_blocks = RowWarpBlocks(std::min<int64_t>(rows, kDeltaRowsPerLaunch));
      AttentionDeltaKernel<T><<<delta_blocks, kBlockSize, 0, s>>>(
          g, dy_t, static_cast<const T*>(y), delta);
      cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return err;
      if (mma) return LaunchMmaAttentionGrad(g, dy, qkv, lse, delta, dqkv, accumulate, s);
      AttentionKeyGradKernel<kD, T>
          <<<static_cast<unsigned>(key_blocks), kThreads, Bytes(KeyGradSmemFloats<kD>()), s>>>(
              g, dy_t, qkv_t, lse, delta, dqkv_t, accumulate);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
      AttentionQueryGradKernel<kD, T><<<static_cast<unsigned>(query_blocks), kThreads,
                                        Bytes(QueryGradSmemFloats<kD>()), s>>>(
          g, dy_t, qkv_t, lse, delta, dqkv_t, accumulate);
      return cudaGetLastError();
    });
  });
}

// Prepare's refusal as a C string, kept until this thread's next one.
const char* Refusal(std::string why) {
  thread_local std::string text;
  text = std::move(why);
  return text.c_str();
}

}  // namespace

const char* PrepareAttention(KernelOp, const Geometry& g, int64_t*) {
  // The tiles hold heads of up to 128 features; positions, and the blocks
  // of one launch (tiles x B x H, H >= KV), are int32.
  if (g.head_dim < 1 || g.head_dim > kMaxHeadDim) {
    return Refusal("head size " + std::to_string(g.head_dim) + " is outside 1.." +
                   std::to_string(kMaxHeadDim) + ", what the CUDA attention kernels hold");
  }
  if (g.seq > INT32_MAX || Blocks(g.seq, g.batch, g.heads) > INT32_MAX) {
    return Refusal("sequence of " + std::to_string(g.seq) + " tokens with batch " +
                   std::to_string(g.batch) + " and " + std::to_string(g.heads) +
                   " heads is beyond the CUDA attention kernels' int32 positions and grid");
  }
  // Prepare runs on the device, outside capture: idempotent, and cheap
  // beside the plan's preparation.
  cudaError_t err = AllowSharedMemory();
  if (err == cudaSuccess) err = AllowMmaAttentionSharedMemory();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// qkv -> y, lse; dy, qkv, y, lse -> dqkv, delta. Under env.bf16 the slots
// of qkv, y, dy and dqkv hold the bf16 tensors (UseBf16Attention).
// The tensor-core kernels when AttentionUsesMma and the bf16 operands are
// 16-byte aligned.
cudaError_t LaunchAttention(KernelOp op, const Geometry& g, const float* const* x,
                            float* const* y, const UnitLaunch& env) {
  const bool forward = op == KernelOp::kAttention;
  // qkv and y, or dy, qkv and dqkv.
  const void* bf16_operands[] = {x[0], forward ? y[0] : x[1], y[0]};
  const bool mma = AttentionUsesMma(g, env.bf16) &&
                   MmaAttentionOperandsFit(bf16_operands, forward ? 2 : 3);
  if (forward) {
    if (mma) return LaunchMmaAttentionForward(g, x[0], y[0], y[1], env.stream);
    return LaunchForward(g, x[0], y[0], y[1], env.bf16, env.stream);
  }
  return LaunchGrad(g, x[0], x[1], x[2], x[3], y[0], y[1], env.accumulate, env.bf16, mma,
                    env.stream);
}

}  // namespace cuda
}  // namespace trainc
