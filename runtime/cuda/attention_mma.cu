// attention's tensor-core kernels (compiler/ops/attention_family.h): causal
// attention on bf16 q|k|v, y, dy and dqkv, FlashAttention-2 style, with
// the products on `mma.sync.m16n8k16` (bf16 operands, f32 accumulation)
// and fragments loaded by `ldmatrix`. attention.cu's LaunchAttention takes
// them when AttentionUsesMma says so; its f32 kernels do the rest.
//
// Tiles. A block has 4 warps; each warp owns 16 rows (query rows, or keys
// in the key-gradient kernel) of the block's 64. Tiles are staged in
// shared memory as bf16 [rows][kD + 8] (kD = d = 64 or 128; the 8 extra
// elements put the 8 rows an ldmatrix reads on distinct banks). Every
// product is one of two warp-level shapes:
//   WarpGemmABt: C[16 x N] += A[16 x kD] B[N x kD]^T, both from shared
//     memory (S = Q K^T, dP = dY V^T, and their transposes);
//   WarpGemmPB:  C[16 x N] += P[16 x K] B[K x N], P in registers (the
//     accumulator of the previous product rounded to bf16, whose
//     fragment layout is the A operand's) and B from shared memory by
//     ldmatrix.trans (O += P V, dV += P^T dY, dK += dS^T Q, dQ += dS K).
//
// Forward: a block per 64 query rows of one (b, h); per 64-key tile up to
// the diagonal, the online softmax (running max and sum per row) in f32,
// P rounded to bf16 for P V. y = O / l, lse = m + log(l) (f32).
// Backward (after attention.cu's delta = rowsum(dy y)): dK and dV, a block
// per 64 keys of one (b, kv head), over the group's query heads and the
// 32-row query steps from the diagonal on; dQ, a block per 64 query rows,
// over the 32-key steps up to the diagonal, recomputing P (no atomics).
// P and dS are rounded to bf16 before their products, as in
// FlashAttention; every sum runs in an order fixed by the shape, so the
// results are bit-reproducible.
//
// Rotary positions: q and k are rotated as they are staged (f32 with the
// angles of attention::RopeCosSin, then rounded to bf16: the mma's
// operands), dq and dk rotated back in registers before they are stored.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using attention::Geometry;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarpRows = 16;  // rows of one warp's mma tiles
constexpr int kTile = 64;      // query rows (or keys) of a block
constexpr int kStep = 32;      // queries (or keys) of one backward step
constexpr int kChunk = 8;      // bf16 per 16-byte load

template <int kD>
__host__ __device__ constexpr int Stride() {
  return kD + 8;
}

__host__ __device__ __forceinline__ int Tiles(int64_t n, int tile) {
  return static_cast<int>((n + tile - 1) / tile);
}

// ---- PTX -------------------------------------------------------------------

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 bf16 matrices; lanes 8 m .. 8 m + 7 give matrix m's row
// addresses, and lane l receives of each row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1 (with .trans: of each, row 2 (l % 4) and the next, column
// l / 4).
__device__ __forceinline__ void LdMatrix(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(p))
               : "memory");
}
__device__ __forceinline__ void LdMatrixTrans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(p))
               : "memory");
}

// c[16 x 8] += a[16 x 16] b[16 x 8]. Lane l (g = l / 4, t = l % 4) holds
// c[g][2t, 2t + 1] in c[0], c[1] and c[g + 8][2t, 2t + 1] in c[2], c[3];
// a as {a[g][2t..], a[g + 8][2t..], a[g][2t + 8..], a[g + 8][2t + 8..]},
// b as {b[2t..][g], b[2t + 8..][g]} (two bf16 a register, low first).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// ---- warp products -----------------------------------------------------------

// acc[16 x kN] += a[16 x kK] b[kN x kK]^T: a and b row-major in shared
// memory, rows `stride` apart. k in increasing steps of 16.
template <int kK, int kN>
__device__ __forceinline__ void WarpGemmABt(const bf16* a, const bf16* b, int stride,
                                            float (&acc)[kN / 8][4]) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
    uint32_t af[4];
    LdMatrix(af, a + (lane % 16) * stride + k + (lane / 16) * 8);
#pragma unroll
    for (int n = 0; n < kN; n += 16) {
      uint32_t bf[4];  // b0, b1 of columns n..n+7, then of n+8..n+15
      LdMatrix(bf, b + (n + (lane / 16) * 8 + lane % 8) * stride + k + (lane / 8 % 2) * 8);
      Mma(acc[n / 8], af, bf[0], bf[1]);
      Mma(acc[n / 8 + 1], af, bf[2], bf[3]);
    }
  }
}

// The accumulator of a [16 x kN] product as the A fragments of the next:
// columns 16 j .. 16 j + 15 are n-tiles 2 j and 2 j + 1.
template <int kN>
__device__ __forceinline__ void ToFragments(const float (&c)[kN / 8][4],
                                            uint32_t (&a)[kN / 16][4]) {
#pragma unroll
  for (int j = 0; j < kN / 16; ++j) {
    a[j][0] = PackBf16(c[2 * j][0], c[2 * j][1]);
    a[j][1] = PackBf16(c[2 * j][2], c[2 * j][3]);
    a[j][2] = PackBf16(c[2 * j + 1][0], c[2 * j + 1][1]);
    a[j][3] = PackBf16(c[2 * j + 1][2], c[2 * j + 1][3]);
  }
}

// acc[16 x kN] += p[16 x kK] b[kK x kN]: p as fragments, b row-major in
// shared memory (read transposed by ldmatrix.trans).
template <int kK, int kN>
__device__ __forceinline__ void WarpGemmPB(const uint32_t (&p)[kK / 16][4], const bf16* b,
                                           int stride, float (&acc)[kN / 8][4]) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
#pragma unroll
    for (int n = 0; n < kN; n += 16) {
      uint32_t bf[4];
      LdMatrixTrans(bf, b + (k + (lane / 8 % 2) * 8 + lane % 8) * stride + n + (lane / 16) * 8);
      Mma(acc[n / 8], p[k / 16], bf[0], bf[1]);
      Mma(acc[n / 8 + 1], p[k / 16], bf[2], bf[3]);
    }
  }
}

// An accumulator row is spread over the 4 lanes of a quad (QuadMax and
// QuadSum reduce it). The position of accumulator element e of n-tile nt in this lane: its row
// (0..15) and column inside the warp's tile.
__device__ __forceinline__ int FragRow(int e) { return threadIdx.x % kWarpSize / 4 + 8 * (e / 2); }
__device__ __forceinline__ int FragCol(int nt, int e) {
  return nt * 8 + threadIdx.x % 4 * 2 + e % 2;
}

// ---- staging -----------------------------------------------------------------

// inv_freq[i] = attention::RopeInvFreq(i, d, theta) for i < d / 2.
__device__ void LoadInvFreq(const Geometry& g, float* inv_freq) {
  for (int i = threadIdx.x; i < g.head_dim / 2; i += kThreads) {
    inv_freq[i] = attention::RopeInvFreq(i, g.head_dim, g.rope_theta);
  }
}

// Rows [t0, t0 + kRows) of one head into s[kRows][Stride<kD>()]: `head` is
// the head's first column in row 0, rows `ld` elements apart (16-byte
// aligned); rows at or past `seq` are zeros. With `inv_freq`, each row is
// rotated by its position's angles (in f32, then rounded to bf16).
template <int kD, int kRows>
__device__ void LoadRows(const bf16* head, int64_t ld, int t0, int seq, bf16* s,
                         const float* inv_freq) {
  constexpr int kHalf = kD / 2;
  const int chunks = inv_freq != nullptr ? kHalf / kChunk : kD / kChunk;
  for (int e = threadIdx.x; e < kRows * chunks; e += kThreads) {
    const int r = e / chunks, c = e % chunks * kChunk, t = t0 + r;
    uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
    if (t < seq) lo = *reinterpret_cast<const uint4*>(head + t * ld + c);
    if (inv_freq != nullptr) {
      if (t < seq) hi = *reinterpret_cast<const uint4*>(head + t * ld + c + kHalf);
      bf16* a = reinterpret_cast<bf16*>(&lo);
      bf16* b = reinterpret_cast<bf16*>(&hi);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]), cs, sn;
        attention::RopeCosSinOf(t, inv_freq[c + i], &cs, &sn);
        attention::RotatePair(x, y, cs, sn, false);
        a[i] = __float2bfloat16_rn(x);
        b[i] = __float2bfloat16_rn(y);
      }
      *reinterpret_cast<uint4*>(s + r * Stride<kD>() + c + kHalf) = hi;
    }
    *reinterpret_cast<uint4*>(s + r * Stride<kD>() + c) = lo;
  }
}

// A warp's [16 x kD] accumulator (times `scale`), rows at `t0` + its rows,
// into (or, `accumulate`, onto) a head's columns; rows past `seq` dropped.
// With `inv_freq`, each row is first rotated back by its position's
// angles (pair i, i + kD / 2 is n-tiles nt, nt + kD / 16 of one lane).
template <int kD>
__device__ void StoreRows(float (&acc)[kD / 8][4], float scale, int t0, int seq,
                          const float* inv_freq, bf16* head, int64_t ld, bool accumulate) {
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] *= scale;
  }
  if (inv_freq != nullptr) {
#pragma unroll
    for (int nt = 0; nt < kD / 16; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float cs, sn;
        attention::RopeCosSinOf(t0 + FragRow(e), inv_freq[FragCol(nt, e)], &cs, &sn);
        attention::RotatePair(acc[nt][e], acc[nt + kD / 16][e], cs, sn, true);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = t0 + FragRow(2 * half);
      if (t >= seq) continue;
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(head + t * ld + FragCol(nt, 0));
      float lo = acc[nt][2 * half], hi = acc[nt][2 * half + 1];
      if (accumulate) {
        const float2 old = __bfloat1622float2(*out);
        lo += old.x;
        hi += old.y;
      }
      *out = __floats2bfloat162_rn(lo, hi);
    }
  }
}

// ---- forward ---------------------------------------------------------------

template <int kD>
__host__ __device__ constexpr int ForwardSmemBytes() {
  return 3 * kTile * Stride<kD>() * 2 + kD / 2 * 4;
}

// One key tile's online-softmax step for a warp's 16 rows (row0: the
// first's position): s (the scores q' k'^T of keys k0 ..) scaled and
// masked becomes exp(s - m_new); m, l (this lane's part of the row sums)
// and o are rescaled by exp(m - m_new). Key k0 is on or below the
// diagonal of every row here, so m is finite after the first tile.
template <int kD>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kTile / 8][4], float (&o)[kD / 8][4],
                                            float (&m)[2], float (&l)[2], int row0, int k0,
                                            int seq, float scale) {
  float top[2] = {m[0], m[1]};
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = k0 + FragCol(nt, e), i = row0 + FragRow(e);
      s[nt][e] = j <= i && j < seq ? s[nt][e] * scale : -INFINITY;
      top[e / 2] = fmaxf(top[e / 2], s[nt][e]);
    }
  }
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    top[r] = QuadMax(top[r]);
    alpha[r] = expf(m[r] - top[r]);  // 0 on the first tile
    m[r] = top[r];
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = expf(s[nt][e] - m[e / 2]);  // exact 0 where masked
      l[e / 2] += s[nt][e];
    }
  }
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= alpha[e / 2];
  }
}

// y = o / l for a warp's rows, and lse = m + log(l).
template <int kD>
__device__ void StoreOutput(float (&o)[kD / 8][4], const float (&m)[2], float (&l)[2], int row0,
                            int seq, bf16* y, int64_t ld, float* lse) {
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = QuadSum(l[r]);
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] /= l[e / 2];
  }
  StoreRows<kD>(o, 1.0f, row0, seq, nullptr, y, ld, false);
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + FragRow(2 * r);
    if (threadIdx.x % 4 == 0 && i < seq) lse[i] = m[r] + logf(l[r]);
  }
}

// Block: 64 query rows of one (b, h); blockIdx.x = qt' * B H + (b H + h),
// qt' counting from the last tile, so the longest blocks start first.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaForwardKernel(Geometry g, const bf16* qkv, bf16* y, float* lse) {
  constexpr int S = Stride<kD>();
  extern __shared__ uint4 mma_forward_shared[];
  bf16* q = reinterpret_cast<bf16*>(mma_forward_shared);
  bf16* k = q + kTile * S;
  bf16* v = k + kTile * S;
  float* inv_freq = reinterpret_cast<float*>(v + kTile * S);
  const float* rope = g.rope ? inv_freq : nullptr;

  const int seq = static_cast<int>(g.seq);
  const int64_t heads = g.batch * g.heads, bh = blockIdx.x % heads;
  const int qt = Tiles(seq, kTile) - 1 - static_cast<int>(blockIdx.x / heads);
  const int64_t b = bh / g.heads, h = bh % g.heads, kv = g.KvHeadOf(h);
  const int64_t width = g.QkvWidth();
  const bf16* rows = qkv + b * seq * width;
  const int warp = threadIdx.x / kWarpSize, row0 = qt * kTile + warp * kWarpRows;
  const float scale = g.Scale();

  if (g.rope) LoadInvFreq(g, inv_freq);
  __syncthreads();
  LoadRows<kD, kTile>(rows + g.QOffset(h), width, qt * kTile, seq, q, rope);
  float o[kD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();  // the last tile's k and v are read
    LoadRows<kD, kTile>(rows + g.KOffset(kv), width, kt * kTile, seq, k, rope);
    LoadRows<kD, kTile>(rows + g.VOffset(kv), width, kt * kTile, seq, v, nullptr);
    __syncthreads();
    float s[kTile / 8][4] = {};
    WarpGemmABt<kD, kTile>(q + warp * kWarpRows * S, k, S, s);
    SoftmaxStep<kD>(s, o, m, l, row0, kt * kTile, seq, scale);
    uint32_t p[kTile / 16][4];
    ToFragments<kTile>(s, p);
    WarpGemmPB<kTile, kD>(p, v, S, o);
  }
  StoreOutput<kD>(o, m, l, row0, seq, y + b * seq * g.OutWidth() + h * kD, g.OutWidth(),
                  lse + bh * seq);
}

// ---- backward ---------------------------------------------------------------

// P = exp(scale s - lse) and dS = P (dP - delta), in place of s and dp, for
// a warp's [16 x kStep] tile; element (r, c) pairs key and query
// (Key(r, c), Query(r, c)), and lse / delta are the query's (Stats(r, c)).
template <typename Pair, typename Stats>
__device__ __forceinline__ void GradScores(float (&s)[kStep / 8][4], float (&dp)[kStep / 8][4],
                                           float scale, int seq, Pair pair, Stats stats) {
#pragma unroll
  for (int nt = 0; nt < kStep / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int key, query;
      pair(FragRow(e), FragCol(nt, e), &key, &query);
      float lse, delta;
      stats(FragRow(e), FragCol(nt, e), &lse, &delta);
      const bool in = key <= query && query < seq && key < seq;
      const float p = in ? expf(s[nt][e] * scale - lse) : 0.0f;
      s[nt][e] = p;
      dp[nt][e] = p * (dp[nt][e] - delta);
    }
  }
}

template <int kD>
__host__ __device__ constexpr int KeyGradSmemBytes() {
  return (2 * kTile + 2 * kStep) * Stride<kD>() * 2 + 2 * kStep * 4 + kD / 2 * 4;
}

// Block: 64 keys of one (b, kv head); blockIdx.x = kt * B KV + (b KV + g),
// so the longest blocks (small kt) start first. Warp w owns keys 16 w ..
// and accumulates dK' and dV over the group's query heads in increasing
// order, and for each over the 32-row query steps from the diagonal on:
//   S^T = K' Q'^T, dP^T = V dY^T, P^T and dS^T from them;
//   dV += P^T dY, dK' += dS^T Q'.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaKeyGradKernel(Geometry g, const bf16* dy, const bf16* qkv, const float* lse,
                     const float* delta, bf16* dqkv, bool accumulate) {
  constexpr int S = Stride<kD>();
  extern __shared__ uint4 mma_key_shared[];
  bf16* k = reinterpret_cast<bf16*>(mma_key_shared);
  bf16* v = k + kTile * S;
  bf16* q = v + kTile * S;
  bf16* dys = q + kStep * S;
  float* lse_s = reinterpret_cast<float*>(dys + kStep * S);
  float* delta_s = lse_s + kStep;
  float* inv_freq = delta_s + kStep;
  const float* rope = g.rope ? inv_freq : nullptr;

  const int seq = static_cast<int>(g.seq);
  const int64_t kv_heads = g.batch * g.kv_heads, bk = blockIdx.x % kv_heads;
  const int kt = static_cast<int>(blockIdx.x / kv_heads);
  const int64_t b = bk / g.kv_heads, kv = bk % g.kv_heads;
  const int64_t width = g.QkvWidth(), out_width = g.OutWidth();
  const bf16* rows = qkv + b * seq * width;
  const int warp = threadIdx.x / kWarpSize, key0 = kt * kTile + warp * kWarpRows;
  const float scale = g.Scale();

  if (g.rope) LoadInvFreq(g, inv_freq);
  __syncthreads();
  LoadRows<kD, kTile>(rows + g.KOffset(kv), width, kt * kTile, seq, k, rope);
  LoadRows<kD, kTile>(rows + g.VOffset(kv), width, kt * kTile, seq, v, nullptr);
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int64_t h = kv * g.Group(); h < (kv + 1) * g.Group(); ++h) {
    const int64_t bh = b * g.heads + h;
    for (int q0 = kt * kTile; q0 < seq; q0 += kStep) {
      __syncthreads();  // the last step's q, dys and statistics are read
      LoadRows<kD, kStep>(rows + g.QOffset(h), width, q0, seq, q, rope);
      LoadRows<kD, kStep>(dy + b * seq * out_width + h * kD, out_width, q0, seq, dys, nullptr);
      for (int r = threadIdx.x; r < kStep; r += kThreads) {
        lse_s[r] = q0 + r < seq ? lse[bh * seq + q0 + r] : 0.0f;
        delta_s[r] = q0 + r < seq ? delta[bh * seq + q0 + r] : 0.0f;
      }
      __syncthreads();
      if (key0 > q0 + kStep - 1) continue;  // every query here is above this warp's keys
      float s[kStep / 8][4] = {}, dp[kStep / 8][4] = {};
      WarpGemmABt<kD, kStep>(k + warp * kWarpRows * S, q, S, s);
      WarpGemmABt<kD, kStep>(v + warp * kWarpRows * S, dys, S, dp);
      GradScores(
          s, dp, scale, seq,
          [&](int r, int c, int* key, int* query) {
            *key = key0 + r;
            *query = q0 + c;
          },
          [&](int, int c, float* l, float* d) {
            *l = lse_s[c];
            *d = delta_s[c];
          });
      uint32_t f[kStep / 16][4];
      ToFragments<kStep>(s, f);
      WarpGemmPB<kStep, kD>(f, dys, S, dv);
      ToFragments<kStep>(dp, f);
      WarpGemmPB<kStep, kD>(f, q, S, dk);
    }
  }
  bf16* out = dqkv + b * seq * width;
  StoreRows<kD>(dk, scale, key0, seq, rope, out + g.KOffset(kv), width, accumulate);
  StoreRows<kD>(dv, 1.0f, key0, seq, nullptr, out + g.VOffset(kv), width, accumulate);
}

template <int kD>
__host__ __device__ constexpr int QueryGradSmemBytes() {
  return (2 * kTile + 2 * kStep) * Stride<kD>() * 2 + kD / 2 * 4;
}

// Block: 64 query rows of one (b, h), ordered as the forward's. Warp w owns
// rows 16 w .. and its dQ'; per 32-key step up to the diagonal it forms P
// and dS as the key kernel does, then dQ' += dS K'.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaQueryGradKernel(Geometry g, const bf16* dy, const bf16* qkv, const float* lse,
                       const float* delta, bf16* dqkv, bool accumulate) {
  constexpr int S = Stride<kD>();
  extern __shared__ uint4 mma_query_shared[];
  bf16* q = reinterpret_cast<bf16*>(mma_query_shared);
  bf16* dys = q + kTile * S;
  bf16* k = dys + kTile * S;
  bf16* v = k + kStep * S;
  float* inv_freq = reinterpret_cast<float*>(v + kStep * S);
  const float* rope = g.rope ? inv_freq : nullptr;

  const int seq = static_cast<int>(g.seq);
  const int64_t heads = g.batch * g.heads, bh = blockIdx.x % heads;
  const int qt = Tiles(seq, kTile) - 1 - static_cast<int>(blockIdx.x / heads);
  const int64_t b = bh / g.heads, h = bh % g.heads, kv = g.KvHeadOf(h);
  const int64_t width = g.QkvWidth(), out_width = g.OutWidth();
  const bf16* rows = qkv + b * seq * width;
  const int warp = threadIdx.x / kWarpSize, row0 = qt * kTile + warp * kWarpRows;
  const float scale = g.Scale();
  float row_lse[2], row_delta[2];
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + FragRow(2 * r);
    row_lse[r] = i < seq ? lse[bh * seq + i] : 0.0f;
    row_delta[r] = i < seq ? delta[bh * seq + i] : 0.0f;
  }

  if (g.rope) LoadInvFreq(g, inv_freq);
  __syncthreads();
  LoadRows<kD, kTile>(rows + g.QOffset(h), width, qt * kTile, seq, q, rope);
  LoadRows<kD, kTile>(dy + b * seq * out_width + h * kD, out_width, qt * kTile, seq, dys,
                      nullptr);
  float dq[kD / 8][4] = {};
  const int keys = min(seq, (qt + 1) * kTile);
  for (int k0 = 0; k0 < keys; k0 += kStep) {
    __syncthreads();  // the last step's k and v are read
    LoadRows<kD, kStep>(rows + g.KOffset(kv), width, k0, seq, k, rope);
    LoadRows<kD, kStep>(rows + g.VOffset(kv), width, k0, seq, v, nullptr);
    __syncthreads();
    if (k0 > row0 + kWarpRows - 1) continue;  // every key here is above this warp's rows
    float s[kStep / 8][4] = {}, dp[kStep / 8][4] = {};
    WarpGemmABt<kD, kStep>(q + warp * kWarpRows * S, k, S, s);
    WarpGemmABt<kD, kStep>(dys + warp * kWarpRows * S, v, S, dp);
    GradScores(
        s, dp, scale, seq,
        [&](int r, int c, int* key, int* query) {
          *key = k0 + c;
          *query = row0 + r;
        },
        [&](int r, int, float* l, float* d) {
          *l = row_lse[r / 8];
          *d = row_delta[r / 8];
        });
    uint32_t f[kStep / 16][4];
    ToFragments<kStep>(dp, f);
    WarpGemmPB<kStep, kD>(f, k, S, dq);
  }
  StoreRows<kD>(dq, scale, row0, seq, rope, dqkv + b * seq * width + g.QOffset(h), width,
                accumulate);
}

// ---- launch ------------------------------------------------------------------

template <typename F>
cudaError_t WithHeadDim(int64_t d, F&& f) {
  if (d == 64) return f(std::integral_constant<int, 64>());
  if (d == 128) return f(std::integral_constant<int, 128>());
  return cudaErrorInvalidValue;
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool AttentionUsesMma(const Geometry& g, bool bf16) {
  const char* choice = std::getenv("TRAINC_CUDA_ATTENTION");
  return bf16 && (g.head_dim == 64 || g.head_dim == 128) && choice != nullptr &&
         std::strcmp(choice, "mma") == 0;
}

bool MmaAttentionOperandsFit(const void* const* operands, int n) {
  for (int i = 0; i < n; ++i) {
    if (!Aligned(operands[i])) return false;
  }
  return true;
}

cudaError_t AllowMmaAttentionSharedMemory() {
  cudaError_t err = cudaSuccess;
  auto allow = [&](const void* kernel, int bytes) {
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    }
  };
  for (int d : {64, 128}) {
    WithHeadDim(d, [&](auto dim) {
      constexpr int kD = decltype(dim)::value;
      allow(reinterpret_cast<const void*>(&MmaForwardKernel<kD>), ForwardSmemBytes<kD>());
      allow(reinterpret_cast<const void*>(&MmaKeyGradKernel<kD>), KeyGradSmemBytes<kD>());
      allow(reinterpret_cast<const void*>(&MmaQueryGradKernel<kD>), QueryGradSmemBytes<kD>());
      return err;
    });
  }
  return err;
}

cudaError_t LaunchMmaAttentionForward(const Geometry& g, const void* qkv, void* y, float* lse,
                                      cudaStream_t s) {
  const int64_t blocks = Tiles(g.seq, kTile) * g.batch * g.heads;
  if (blocks == 0) return cudaGetLastError();
  return WithHeadDim(g.head_dim, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    MmaForwardKernel<kD><<<static_cast<unsigned>(blocks), kThreads, ForwardSmemBytes<kD>(), s>>>(
        g, static_cast<const bf16*>(qkv), static_cast<bf16*>(y), lse);
    return cudaGetLastError();
  });
}

cudaError_t LaunchMmaAttentionGrad(const Geometry& g, const void* dy, const void* qkv,
                                   const float* lse, const float* delta, void* dqkv,
                                   bool accumulate, cudaStream_t s) {
  const int64_t key_blocks = Tiles(g.seq, kTile) * g.batch * g.kv_heads;
  const int64_t query_blocks = Tiles(g.seq, kTile) * g.batch * g.heads;
  if (key_blocks == 0 || query_blocks == 0) return cudaGetLastError();
  return WithHeadDim(g.head_dim, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    const bf16* dy_t = static_cast<const bf16*>(dy);
    const bf16* qkv_t = static_cast<const bf16*>(qkv);
    bf16* dqkv_t = static_cast<bf16*>(dqkv);
    MmaKeyGradKernel<kD>
        <<<static_cast<unsigned>(key_blocks), kThreads, KeyGradSmemBytes<kD>(), s>>>(
            g, dy_t, qkv_t, lse, delta, dqkv_t, accumulate);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    MmaQueryGradKernel<kD>
        <<<static_cast<unsigned>(query_blocks), kThreads, QueryGradSmemBytes<kD>(), s>>>(
            g, dy_t, qkv_t, lse, delta, dqkv_t, accumulate);
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace trainc
