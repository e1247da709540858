#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/pointwise.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/store.h"
#include "runtime/device/bf16.h"

namespace trainc::cpu {
namespace {

// Query rows per block: a block's scores are kBlock x T floats (256 KiB at
// T = 1024), and each block costs a few BLAS calls.
constexpr int64_t kBlock = 64;

// A head's rows [T, d] as a matrix BLAS reads: in place inside qkv (ld the
// q|k|v width) or, rotated, in a contiguous copy (ld d).
struct Rows {
  const float* data;
  int64_t ld;
};

// cos and sin of every (position, pair) for rope, [T, d / 2] each; kept
// across calls (the angles depend only on T, d and theta).
class RopeTable {
 public:
  void Fill(const attention::Geometry& g) {
    if (!g.rope || (seq_ == g.seq && dim_ == g.head_dim && theta_ == g.rope_theta)) return;
    seq_ = g.seq;
    dim_ = g.head_dim;
    theta_ = g.rope_theta;
    const int64_t n = dim_ / 2;
    cos_.resize(seq_ * n);
    sin_.resize(seq_ * n);
    for (int64_t t = 0; t < seq_; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        attention::RopeCosSin(t, i, dim_, theta_, &cos_[t * n + i], &sin_[t * n + i]);
      }
    }
  }
  // Rotates x[d] of position t (inverse: by minus the angle).
  void Rotate(int64_t t, bool inverse, float* x) const {
    const int64_t n = dim_ / 2;
    const float* c = &cos_[t * n];
    const float* s = &sin_[t * n];
    for (int64_t i = 0; i < n; ++i) attention::RotatePair(x[i], x[i + n], c[i], s[i], inverse);
  }

 private:
  int64_t seq_ = -1, dim_ = -1;
  float theta_ = 0;
  std::vector<float> cos_, sin_;
};

// Working space of one call, kept across calls so a step allocates nothing
// once the largest shape has been seen.
struct Scratch {
  RopeTable rope;
  std::vector<float> q, k;        // rotated q or k of one head [T, d]
  std::vector<float> p, ds;       // one block's probabilities and dS [kBlock, T]
  std::vector<float> dq, dk, dv;  // [T, d] gradients of one head
};

Scratch& ThreadScratch(const attention::Geometry& g) {
  thread_local Scratch s;
  const size_t head = static_cast<size_t>(g.seq * g.head_dim);
  const size_t block = static_cast<size_t>(std::min(kBlock, g.seq) * g.seq);
  for (std::vector<float>* v : {&s.q, &s.k, &s.dq, &s.dk, &s.dv}) v->resize(head);
  for (std::vector<float>* v : {&s.p, &s.ds}) v->resize(block);
  s.rope.Fill(g);
  return s;
}

// The d columns at `offset` of batch b's q|k|v rows; rotated into `copy`
// when rope is on.
Rows HeadRows(const attention::Geometry& g, const float* qkv, int64_t b, int64_t offset,
              bool rotate, const RopeTable& rope, std::vector<float>& copy) {
  const int64_t W = g.QkvWidth(), d = g.head_dim;
  const float* base = qkv + b * g.seq * W + offset;
  if (!rotate) return {base, W};
  for (int64_t t = 0; t < g.seq; ++t) {
    float* row = &copy[t * d];
    std::copy(base + t * W, base + t * W + d, row);
    rope.Rotate(t, false, row);
  }
  return {copy.data(), d};
}

// exp(x) for x <= ~0 (the scores less their max or lse) without libm, so
// the loops vectorise and every clone gives the same bits (no FMA
// contraction): within ~1 ulp of std::exp (far below bf16's rounding of
// P, and inside the f32 oracles' tolerance); below -86 it gives exp(-86)
// (~4e-38).
inline float ExpOfScore(float x) {
  return pointwise::math::ExpNonPositive(x < -86.0f ? -86.0f : x);
}

// max (or sum) of x[0, n) over 16 lanes, then the lanes in order: an order
// fixed by n.
template <bool kMax>
inline float Reduce(const float* __restrict x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = kMax ? x[0] : 0.0f;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      lane[l] = kMax ? (x[j + l] > lane[l] ? x[j + l] : lane[l]) : lane[l] + x[j + l];
    }
  }
  float r = kMax ? x[0] : 0.0f;
  for (; j < n; ++j) r = kMax ? (x[j] > r ? x[j] : r) : r + x[j];
  for (int64_t l = 0; l < kLanes; ++l) r = kMax ? (lane[l] > r ? lane[l] : r) : r + lane[l];
  return r;
}

// sum of x[0, n) in double over 8 lanes, then the lanes in order (an
// order fixed by n): the f32 softmax's denominator, rows as long as the
// context.
inline double SumInDouble(const float* __restrict x, int64_t n) {
  constexpr int64_t kLanes = 8;
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[j + l];
  }
  double r = 0;
  for (; j < n; ++j) r += x[j];
  for (int64_t l = 0; l < kLanes; ++l) r += lane[l];
  return r;
}

// Row pr[0, i1) becomes exp(pr[j] - sub) for j < n and exact zeros after:
// the whole row with a select, not n entries, so the loop has no scalar
// tail (i1 is mostly a multiple of the vector width).
inline void ExpRow(float* __restrict pr, int64_t n, int64_t i1, float sub) {
  for (int64_t j = 0; j < i1; ++j) pr[j] = j < n ? ExpOfScore(pr[j] - sub) : 0.0f;
}

// Rows [i0, i1) of the scaled scores, S = scale Q' K'^T, into s[i1 - i0, i1]
// (keys [0, i1) only).
void BlockScores(const attention::Geometry& g, Rows q, Rows k, int64_t i0, int64_t i1,
                 float* s) {
  Sgemm(false, true, i1 - i0, i1, g.head_dim, g.Scale(), q.data + i0 * q.ld, q.ld, k.data, k.ld,
        0.0f, s, i1);
}

// In place over BlockScores' s, the backward's probabilities from the
// saved log-sum-exp: P = exp(S - lse) for j <= i, exact zeros for
// i < j < i1.
TRAINC_SIMD_CLONES
void BlockProbs(const float* lse, int64_t i0, int64_t i1, float* p) {
  for (int64_t i = i0; i < i1; ++i) ExpRow(p + (i - i0) * i1, i + 1, i1, lse[i]);
}

// In place over BlockScores' s, the forward's softmax: rows [i0, i1) of
// P = softmax over j <= i (exact zeros for i < j < i1) and their
// log-sum-exp (the sum in double: rows are as long as the context). One
// exp per score (ExpOfScore, vectorised), as a plain softmax; the
// backward's exp(S - lse) equals this P to within rounding.
TRAINC_SIMD_CLONES
void BlockSoftmax(int64_t i0, int64_t i1, float* s, float* lse) {
  for (int64_t i = i0; i < i1; ++i) {
    float* __restrict pr = s + (i - i0) * i1;
    const float m = Reduce<true>(pr, i + 1);
    ExpRow(pr, i + 1, i1, m);
    const double sum = SumInDouble(pr, i + 1);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < i1; ++j) pr[j] *= inv;
    lse[i] = static_cast<float>(m + std::log(sum));
  }
}

// In place over dP's block ds: dS = P (dP - delta[i]) scale (0 where P is).
TRAINC_SIMD_CLONES
void BlockGradScores(const float* p, const float* dh, float scale, int64_t i0, int64_t i1,
                     float* ds) {
  for (int64_t i = i0; i < i1; ++i) {
    const float* __restrict pr = p + (i - i0) * i1;
    float* __restrict dsr = ds + (i - i0) * i1;
    const float delta = dh[i];
    for (int64_t j = 0; j < i1; ++j) dsr[j] = pr[j] * (dsr[j] - delta) * scale;
  }
}

inline float Wide(float x) { return x; }
inline float Wide(uint16_t x) { return Bf16ToFloat(x); }

// delta = rowsum(dy y) of one head's T rows (in y's head columns), the
// sums in double; dy and y f32 or bf16 (widened exactly: the same sums).
template <typename Dy, typename Yv>
void RowDots(const attention::Geometry& g, const Dy* dyh, const Yv* yh, float* dh) {
  const int64_t Y = g.OutWidth();
  for (int64_t i = 0; i < g.seq; ++i) {
    double dot = 0;
    for (int64_t c = 0; c < g.head_dim; ++c) {
      dot += static_cast<double>(Wide(dyh[i * Y + c])) * Wide(yh[i * Y + c]);
    }
    dh[i] = static_cast<float>(dot);
  }
}

// One head's [T, d] gradient (rotated back when rope is on) into its
// columns of dqkv.
void StoreHead(const attention::Geometry& g, const RopeTable& rope, bool rotate,
               std::vector<float>& grad, int64_t b, int64_t offset, bool accumulate,
               float* dqkv) {
  const int64_t W = g.QkvWidth(), d = g.head_dim;
  for (int64_t t = 0; t < g.seq; ++t) {
    float* row = &grad[t * d];
    if (rotate) rope.Rotate(t, true, row);
    Store(row, d, accumulate, dqkv + (b * g.seq + t) * W + offset);
  }
}

}  // namespace

void Attention(const attention::Geometry& g, const float* qkv, float* y, float* lse) {
  Scratch& s = ThreadScratch(g);
  const int64_t T = g.seq, d = g.head_dim, Y = g.OutWidth();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t kv = 0; kv < g.kv_heads; ++kv) {
      const Rows k = HeadRows(g, qkv, b, g.KOffset(kv), g.rope, s.rope, s.k);
      const Rows v{qkv + b * T * g.QkvWidth() + g.VOffset(kv), g.QkvWidth()};
      for (int64_t h = kv * g.Group(); h < (kv + 1) * g.Group(); ++h) {
        const Rows q = HeadRows(g, qkv, b, g.QOffset(h), g.rope, s.rope, s.q);
        float* lh = lse + (b * g.heads + h) * T;
        float* yh = y + b * T * Y + h * d;
        for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
          const int64_t i1 = std::min(T, i0 + kBlock);
          BlockScores(g, q, k, i0, i1, s.p.data());
          BlockSoftmax(i0, i1, s.p.data(), lh);
          // Y[i0:i1] = P V[0:i1], into y's head columns.
          Sgemm(false, false, i1 - i0, d, i1, 1.0f, s.p.data(), i1, v.data, v.ld, 0.0f,
                yh + i0 * Y, Y);
        }
      }
    }
  }
}

void AttentionGrad(const attention::Geometry& g, const float* dy, const float* qkv,
                   const float* y, const float* lse, bool accumulate, float* dqkv,
                   float* delta) {
  Scratch& s = ThreadScratch(g);
  const int64_t T = g.seq, d = g.head_dim, Y = g.OutWidth();
  const float scale = g.Scale();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t kv = 0; kv < g.kv_heads; ++kv) {
      const Rows k = HeadRows(g, qkv, b, g.KOffset(kv), g.rope, s.rope, s.k);
      const Rows v{qkv + b * T * g.QkvWidth() + g.VOffset(kv), g.QkvWidth()};
      // dK' and dV sum over the group's heads, in increasing order.
      std::fill(s.dk.begin(), s.dk.end(), 0.0f);
      std::fill(s.dv.begin(), s.dv.end(), 0.0f);
      for (int64_t h = kv * g.Group(); h < (kv + 1) * g.Group(); ++h) {
        const Rows q = HeadRows(g, qkv, b, g.QOffset(h), g.rope, s.rope, s.q);
        const float* lh = lse + (b * g.heads + h) * T;
        const float* dyh = dy + b * T * Y + h * d;
        const float* yh = y + b * T * Y + h * d;
        float* dh = delta + (b * g.heads + h) * T;
        RowDots(g, dyh, yh, dh);
        for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
          const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
          float* p = s.p.data();
          float* ds = s.ds.data();
          BlockScores(g, q, k, i0, i1, p);
          BlockProbs(lh, i0, i1, p);
          // dP = dY V^T, then in place dS = P (dP - delta) scale (0 where P is).
          Sgemm(false, true, rows, i1, d, 1.0f, dyh + i0 * Y, Y, v.data, v.ld, 0.0f, ds, i1);
          BlockGradScores(p, dh, scale, i0, i1, ds);
          // dQ'[i0:i1] = dS K'; dK'[0:i1] += dS^T Q'; dV[0:i1] += P^T dY.
          Sgemm(false, false, rows, d, i1, 1.0f, ds, i1, k.data, k.ld, 0.0f,
                s.dq.data() + i0 * d, d);
          Sgemm(true, false, i1, d, rows, 1.0f, ds, i1, q.data + i0 * q.ld, q.ld, 1.0f,
                s.dk.data(), d);
          Sgemm(true, false, i1, d, rows, 1.0f, p, i1, dyh + i0 * Y, Y, 1.0f, s.dv.data(), d);
        }
        StoreHead(g, s.rope, g.rope, s.dq, b, g.QOffset(h), accumulate, dqkv);
      }
      StoreHead(g, s.rope, g.rope, s.dk, b, g.KOffset(kv), accumulate, dqkv);
      StoreHead(g, s.rope, false, s.dv, b, g.VOffset(kv), accumulate, dqkv);
    }
  }
}

// ---- precision = bf16: the products on oneDNN's bf16 kernels -------------
//
// The rounding points are the CUDA tensor-core kernels'
// (runtime/cuda/attention_mma.cu). q' and k' are rotated in f32 and
// rounded to nearest even bf16; v and dy are bf16 already, read as they
// are (an f32 input is rounded). S = q' k'^T is summed in f32 and scaled
// in f32; the softmax and lse are f32 (with a vectorised exp, ExpOfScore);
// delta is the f32 path's. P is rounded to bf16 for P V and P^T dY;
// dP = dY V^T is f32; dS = P (dP - delta) in f32 from the f32 P, rounded
// to bf16 for dS K' and dS^T Q', whose f32 sums are scaled after. y and
// dqkv are rounded to nearest even into their bf16 tensors (dqkv added to
// in f32 first). Read and written directly, the bf16 operands give the
// bits their f32 staging gave: rounding an exactly widened value is the
// identity.
//
// Layout. The G query heads of a key/value head share its keys, so their
// rows stack into one product: a block of rows [i0, i1) is the [G rows, d]
// matrix of those rows of every head of the group (bf16, contiguous, in a
// copy), against k'[0, i1) and v[0, i1). Up to kWholeSeq positions the
// block is the whole sequence (the square's upper half is masked: twice the
// triangle's work, on kernels fast enough for it) and one product covers
// every (batch, kv head) pair of a chunk; longer sequences go in blocks of
// kBlock rows, pair by pair. Each shape's primitive is made once
// (Bf16Gemm) and gives the same bits call after call.

namespace {

constexpr int64_t kWholeSeq = 128;
// Scores of a chunk's products, at most: C G T^2 floats (4 MiB).
constexpr int64_t kChunkScores = int64_t{1} << 20;

// How a call is cut: pairs (b, kv) per product, rows per block.
struct Tiling {
  int64_t pairs, chunk, block;
  explicit Tiling(const attention::Geometry& g) {
    pairs = g.batch * g.kv_heads;
    const bool whole = g.seq <= kWholeSeq;
    block = whole ? g.seq : kBlock;
    const int64_t scores = g.Group() * g.seq * g.seq;
    chunk = whole ? std::clamp<int64_t>(kChunkScores / scores, 1, pairs) : 1;
  }
};

struct Bf16Scratch {
  Bf16Gemm gemm;
  RopeTable rope;
  std::vector<uint16_t> q, k, v, dy;  // a chunk's rows (q and dy by blocks)
  std::vector<uint16_t> p, ds;        // a block's P and dS
  std::vector<float> s, dp, o;        // its scores, dP, and P V or dS K'
  std::vector<float> dk, dv;          // a chunk's key and value gradients
  std::vector<float> row;             // one row, rotated
};

Bf16Scratch& ThreadBf16Scratch(const attention::Geometry& g, const Tiling& t) {
  thread_local Bf16Scratch s;
  const size_t G = g.Group(), T = g.seq, d = g.head_dim, C = t.chunk;
  s.q.resize(C * G * T * d);
  s.dy.resize(C * G * T * d);
  for (std::vector<uint16_t>* v : {&s.k, &s.v}) v->resize(C * T * d);
  for (std::vector<float>* v : {&s.dk, &s.dv}) v->resize(C * T * d);
  const size_t block = C * G * std::min<size_t>(t.block, T) * T;
  for (std::vector<uint16_t>* v : {&s.p, &s.ds}) v->resize(block);
  for (std::vector<float>* v : {&s.s, &s.dp}) v->resize(block);
  s.o.resize(C * G * std::min<size_t>(t.block, T) * d);
  s.row.resize(d);
  s.rope.Fill(g);
  return s;
}

// An input of the bf16 path: a bf16 tensor, read as it is, or f32 values.
struct Input {
  const void* data;
  bool bf16;
  const uint16_t* b16(int64_t at) const { return static_cast<const uint16_t*>(data) + at; }
  const float* f32(int64_t at) const { return static_cast<const float*>(data) + at; }
};

// Where row i of head g (of the group) lies in a chunk pair's q or dy copy:
// by blocks of rows, the group's heads stacked inside each.
int64_t StackedRow(const attention::Geometry& g, const Tiling& t, int64_t head, int64_t i) {
  const int64_t i0 = i / t.block * t.block;
  const int64_t rows = std::min(g.seq, i0 + t.block) - i0;
  return i0 * g.Group() + head * rows + (i - i0);
}

// The d values of `in` at `at` (rotated by position t's angles when
// `rotate`) as bf16 into dst: a bf16 row as it is, else rounded (rotated
// in f32, from the exact f32 values of a bf16 row).
// Inlined into FillChunk's SIMD clones.
__attribute__((always_inline)) inline void RoundRow(Input in, int64_t at, int64_t d,
                                                    const RopeTable* rotate, int64_t t,
                                                    std::vector<float>& row, uint16_t* dst) {
  if (in.bf16 && rotate == nullptr) {
    std::memcpy(dst, in.b16(at), d * sizeof(uint16_t));
    return;
  }
  const float* x = in.bf16 ? nullptr : in.f32(at);
  if (rotate != nullptr) {
    if (in.bf16) {
      WidenBf16(in.b16(at), d, row.data());
    } else {
      std::copy(x, x + d, row.begin());
    }
    rotate->Rotate(t, false, row.data());
    x = row.data();
  }
  NarrowToBf16(x, d, dst);
}

// The bf16 copies of pairs [p0, p0 + n): q' (and dy when given), k', v.
TRAINC_SIMD_CLONES
void FillChunk(const attention::Geometry& g, const Tiling& t, Input qkv, const Input* dy,
               int64_t p0, int64_t n, Bf16Scratch& s) {
  const int64_t T = g.seq, d = g.head_dim, G = g.Group(), W = g.QkvWidth(), Y = g.OutWidth();
  const RopeTable* rope = g.rope ? &s.rope : nullptr;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t b = (p0 + c) / g.kv_heads, kv = (p0 + c) % g.kv_heads;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t row = (b * T + i) * W;
      RoundRow(qkv, row + g.KOffset(kv), d, rope, i, s.row, &s.k[(c * T + i) * d]);
      RoundRow(qkv, row + g.VOffset(kv), d, nullptr, i, s.row, &s.v[(c * T + i) * d]);
      for (int64_t h = 0; h < G; ++h) {
        const int64_t at = (c * G * T + StackedRow(g, t, h, i)) * d;
        RoundRow(qkv, row + g.QOffset(kv * G + h), d, rope, i, s.row, &s.q[at]);
        if (dy != nullptr) {
          RoundRow(*dy, (b * T + i) * Y + (kv * G + h) * d, d, nullptr, i, s.row, &s.dy[at]);
        }
      }
    }
  }
}

// A product of the chunk's n pairs (batched when n > 1): C[m, n] (+)= A B.
absl::Status Product(Bf16Scratch& s, int64_t n, GemmCall g, int64_t stride_a, int64_t stride_b,
                     int64_t stride_c) {
  g.batch = n;
  g.stride_a = stride_a;
  g.stride_b = stride_b;
  g.stride_c = stride_c;
  return s.gemm.Run(g);
}

GemmCall Call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
              const void* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  GemmCall g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
  g.accumulate = accumulate;
  return g;
}

// One block of the chunk: rows [i0, i1) of every head, R = G (i1 - i0)
// rows per pair; S = q' k'^T into s[n][R, i1], unscaled.
struct Block {
  int64_t i0, i1, R;
};

absl::Status BlockScoresBf16(const attention::Geometry& g, int64_t n, const Block& blk,
                             Bf16Scratch& s) {
  const int64_t T = g.seq, d = g.head_dim, G = g.Group();
  return Product(s, n,
                 Call(false, true, blk.R, blk.i1, d, &s.q[G * blk.i0 * d], d, s.k.data(), d,
                      s.s.data(), blk.i1, false),
                 G * T * d, T * d, blk.R * blk.i1);
}

// Rows [i0, i1) of one head's block of scores s[i1 - i0, i1] (unscaled,
// as BlockScoresBf16 leaves them) become P, exact zeros for i < j < i1:
// the forward's softmax over j <= i, rounded to bf16 into pb (lse[i] its
// log-sum-exp into lse_out), or, with lse_out null, the backward's
// exp(scale s - lse_in[i]), in place in f32.
TRAINC_SIMD_CLONES
void ProbRowsBf16(int64_t i0, int64_t i1, float scale, float* s, const float* lse_in,
                  float* lse_out, uint16_t* pb) {
  const bool forward = lse_out != nullptr;
  for (int64_t i = i0; i < i1; ++i) {
    float* __restrict pr = s + (i - i0) * i1;
    const int64_t n = i + 1;
    for (int64_t j = 0; j < i1; ++j) pr[j] *= scale;
    const float sub = forward ? Reduce<true>(pr, n) : lse_in[i];
    ExpRow(pr, n, i1, sub);
    if (!forward) continue;
    const float sum = Reduce<false>(pr, n);
    const float inv = 1.0f / sum;
    uint16_t* __restrict pbr = pb + (i - i0) * i1;
    for (int64_t j = 0; j < i1; ++j) pbr[j] = FloatToBf16(pr[j] * inv);
    lse_out[i] = sub + std::log(sum);
  }
}

// dS = P (dP - delta[i]) over rows [i0, i1) of [i1 - i0, i1] blocks in
// f32, rounded to bf16 into dsb, and P rounded into pb.
TRAINC_SIMD_CLONES
void GradScoresBf16(int64_t i0, int64_t i1, const float* p, const float* delta,
                    const float* dp, uint16_t* pb, uint16_t* dsb) {
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t at = (i - i0) * i1;
    const float* __restrict pr = p + at;
    const float* __restrict dr = dp + at;
    uint16_t* __restrict pbr = pb + at;
    uint16_t* __restrict dsr = dsb + at;
    const float dh = delta[i];
    for (int64_t j = 0; j < i1; ++j) {
      dsr[j] = FloatToBf16(pr[j] * (dr[j] - dh));
      pbr[j] = FloatToBf16(pr[j]);
    }
  }
}

// The chunk's blocks of S become P (ProbRowsBf16), head by head: the
// forward's into lse_out, the backward's (lse_out null) from lse_in.
void BlockProbsBf16(const attention::Geometry& g, int64_t p0, int64_t n, const Block& blk,
                    const float* lse_in, float* lse_out, Bf16Scratch& s) {
  const int64_t T = g.seq, G = g.Group(), rows = blk.i1 - blk.i0;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t b = (p0 + c) / g.kv_heads, kv = (p0 + c) % g.kv_heads;
    for (int64_t h = 0; h < G; ++h) {
      const int64_t at = (c * blk.R + h * rows) * blk.i1;
      const int64_t head = (b * g.heads + kv * G + h) * T;
      ProbRowsBf16(blk.i0, blk.i1, g.Scale(), &s.s[at], lse_in ? lse_in + head : nullptr,
                   lse_out ? lse_out + head : nullptr, &s.p[at]);
    }
  }
}

// An output of the bf16 path: a bf16 tensor, written as it is, or f32.
struct Output {
  void* data;
  bool bf16;
  uint16_t* b16(int64_t at) const { return static_cast<uint16_t*>(data) + at; }
  float* f32(int64_t at) const { return static_cast<float*>(data) + at; }
};

// d values of a bf16 output (+)= row[d]: the sum in f32, rounded to
// nearest even, as the output's staging was widened, added to and rounded.
inline void StoreBf16(const float* __restrict row, int64_t d, bool accumulate,
                      uint16_t* __restrict out) {
  if (accumulate) {
    for (int64_t e = 0; e < d; ++e) out[e] = FloatToBf16(Bf16ToFloat(out[e]) + row[e]);
  } else {
    NarrowToBf16(row, d, out);
  }
}

// `to` at `at`, d values, (+)= scale * src[d], rotated back by position t's
// angles when `rope`.
inline void StoreRow(const float* __restrict src, int64_t d, float scale, const RopeTable* rope,
                     int64_t t, bool accumulate, float* row, Output to, int64_t at) {
  if (to.bf16) {
    for (int64_t e = 0; e < d; ++e) row[e] = src[e] * scale;
    if (rope != nullptr) rope->Rotate(t, true, row);
    StoreBf16(row, d, accumulate, to.b16(at));
    return;
  }
  float* __restrict out = to.f32(at);
  if (rope != nullptr) {
    for (int64_t e = 0; e < d; ++e) row[e] = src[e] * scale;
    rope->Rotate(t, true, row);
    Store(row, d, accumulate, out);
    return;
  }
  if (accumulate) {
    for (int64_t e = 0; e < d; ++e) out[e] += src[e] * scale;
  } else {
    for (int64_t e = 0; e < d; ++e) out[e] = src[e] * scale;
  }
}

// A chunk's f32 result rows o[n][R, d] (times `scale`, rotated back when
// `rope`) into every head's columns (QOffset) of rows [i0, i1) of `out`,
// rows `width` wide: y, or dq' into dqkv.
TRAINC_SIMD_CLONES
void ScatterRows(const attention::Geometry& g, int64_t p0, int64_t n, const Block& blk,
                 float scale, const RopeTable* rope, int64_t width, bool accumulate,
                 Bf16Scratch& s, Output out) {
  const int64_t T = g.seq, d = g.head_dim, G = g.Group(), rows = blk.i1 - blk.i0;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t b = (p0 + c) / g.kv_heads, kv = (p0 + c) % g.kv_heads;
    for (int64_t h = 0; h < G; ++h) {
      for (int64_t i = blk.i0; i < blk.i1; ++i) {
        StoreRow(&s.o[(c * blk.R + h * rows + i - blk.i0) * d], d, scale, rope, i, accumulate,
                 s.row.data(), out, (b * T + i) * width + g.QOffset(kv * G + h));
      }
    }
  }
}

// A chunk's dK' (times scale, rotated back) and dV into dqkv.
TRAINC_SIMD_CLONES
void StoreKeyGrads(const attention::Geometry& g, int64_t p0, int64_t n, bool accumulate,
                   Bf16Scratch& s, Output dqkv) {
  const int64_t T = g.seq, d = g.head_dim, W = g.QkvWidth();
  const RopeTable* rope = g.rope ? &s.rope : nullptr;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t b = (p0 + c) / g.kv_heads, kv = (p0 + c) % g.kv_heads;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t at = (b * T + i) * W;
      StoreRow(&s.dk[(c * T + i) * d], d, g.Scale(), rope, i, accumulate, s.row.data(), dqkv,
               at + g.KOffset(kv));
      StoreRow(&s.dv[(c * T + i) * d], d, 1.0f, nullptr, i, accumulate, s.row.data(), dqkv,
               at + g.VOffset(kv));
    }
  }
}

absl::Status AttentionBf16(const attention::Geometry& g, Input qkv, Output y, float* lse) {
  const Tiling t(g);
  Bf16Scratch& s = ThreadBf16Scratch(g, t);
  const int64_t T = g.seq, d = g.head_dim, G = g.Group();
  for (int64_t p0 = 0; p0 < t.pairs; p0 += t.chunk) {
    const int64_t n = std::min(t.chunk, t.pairs - p0);
    FillChunk(g, t, qkv, nullptr, p0, n, s);
    for (int64_t i0 = 0; i0 < T; i0 += t.block) {
      const int64_t i1 = std::min(T, i0 + t.block);
      const Block blk{i0, i1, G * (i1 - i0)};
      if (absl::Status st = BlockScoresBf16(g, n, blk, s); !st.ok()) return st;
      BlockProbsBf16(g, p0, n, blk, nullptr, lse, s);
      // Y = P V.
      if (absl::Status st = Product(s, n,
                                    Call(false, false, blk.R, d, i1, s.p.data(), i1, s.v.data(),
                                         d, s.o.data(), d, false),
                                    blk.R * i1, T * d, blk.R * d);
          !st.ok()) {
        return st;
      }
      ScatterRows(g, p0, n, blk, 1.0f, nullptr, g.OutWidth(), false, s, y);
    }
  }
  return absl::OkStatus();
}

// One block of the backward: dQ' rows into dqkv, dK' and dV sums into the
// chunk's dk, dv (added to when `add`).
absl::Status GradBlockBf16(const attention::Geometry& g, int64_t p0, int64_t n, const Block& blk,
                           const float* lse, const float* delta, bool add, bool accumulate,
                           Bf16Scratch& s, Output dqkv) {
  const int64_t T = g.seq, d = g.head_dim, G = g.Group(), i0 = blk.i0, i1 = blk.i1, R = blk.R;
  const int64_t rows = i1 - i0;
  if (absl::Status st = BlockScoresBf16(g, n, blk, s); !st.ok()) return st;
  BlockProbsBf16(g, p0, n, blk, lse, nullptr, s);
  const uint16_t* q = &s.q[G * i0 * d];
  const uint16_t* dy = &s.dy[G * i0 * d];
  // dP = dY V^T, then in place dS = P (dP - delta), f32.
  if (absl::Status st = Product(s, n,
                                Call(false, true, R, i1, d, dy, d, s.v.data(), d, s.dp.data(),
                                     i1, false),
                                G * T * d, T * d, R * i1);
      !st.ok()) {
    return st;
  }
  for (int64_t c = 0; c < n; ++c) {
    const int64_t b = (p0 + c) / g.kv_heads, kv = (p0 + c) % g.kv_heads;
    for (int64_t h = 0; h < G; ++h) {
      const float* dh = delta + (b * g.heads + kv * G + h) * T;
      const int64_t at = (c * R + h * rows) * i1;
      GradScoresBf16(i0, i1, &s.s[at], dh, &s.dp[at], &s.p[at], &s.ds[at]);
    }
  }
  // dQ' = dS K' (scaled and rotated back as it is stored); dK' += dS^T Q';
  // dV += P^T dY.
  const GemmCall calls[] = {
      Call(false, false, R, d, i1, s.ds.data(), i1, s.k.data(), d, s.o.data(), d, false),
      Call(true, false, i1, d, R, s.ds.data(), i1, q, d, s.dk.data(), d, add),
      Call(true, false, i1, d, R, s.p.data(), i1, dy, d, s.dv.data(), d, add)};
  const int64_t strides[][3] = {{R * i1, T * d, R * d}, {R * i1, G * T * d, T * d},
                                {R * i1, G * T * d, T * d}};
  for (int e = 0; e < 3; ++e) {
    if (absl::Status st = Product(s, n, calls[e], strides[e][0], strides[e][1], strides[e][2]);
        !st.ok()) {
      return st;
    }
  }
  ScatterRows(g, p0, n, blk, g.Scale(), g.rope ? &s.rope : nullptr, g.QkvWidth(), accumulate, s,
              dqkv);
  return absl::OkStatus();
}

// delta = rowsum(dy y) of every head, dy and y f32 or bf16.
void Deltas(const attention::Geometry& g, Input dy, Input y, float* delta) {
  const int64_t T = g.seq, Y = g.OutWidth();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.heads; ++h) {
      const int64_t at = b * T * Y + h * g.head_dim;
      float* dh = delta + (b * g.heads + h) * T;
      if (dy.bf16 && y.bf16) {
        RowDots(g, dy.b16(at), y.b16(at), dh);
      } else if (dy.bf16) {
        RowDots(g, dy.b16(at), y.f32(at), dh);
      } else if (y.bf16) {
        RowDots(g, dy.f32(at), y.b16(at), dh);
      } else {
        RowDots(g, dy.f32(at), y.f32(at), dh);
      }
    }
  }
}

absl::Status AttentionGradBf16(const attention::Geometry& g, Input dy, Input qkv, Input y,
                               const float* lse, bool accumulate, Output dqkv, float* delta) {
  const Tiling t(g);
  Bf16Scratch& s = ThreadBf16Scratch(g, t);
  const int64_t T = g.seq, G = g.Group();
  Deltas(g, dy, y, delta);
  const bool blocks = t.block < T;  // sums over blocks into dk, dv
  for (int64_t p0 = 0; p0 < t.pairs; p0 += t.chunk) {
    const int64_t n = std::min(t.chunk, t.pairs - p0);
    FillChunk(g, t, qkv, &dy, p0, n, s);
    if (blocks) {
      std::fill(s.dk.begin(), s.dk.end(), 0.0f);
      std::fill(s.dv.begin(), s.dv.end(), 0.0f);
    }
    for (int64_t i0 = 0; i0 < T; i0 += t.block) {
      const int64_t i1 = std::min(T, i0 + t.block);
      const Block blk{i0, i1, G * (i1 - i0)};
      if (absl::Status st = GradBlockBf16(g, p0, n, blk, lse, delta, blocks, accumulate, s, dqkv);
          !st.ok()) {
        return st;
      }
    }
    StoreKeyGrads(g, p0, n, accumulate, s, dqkv);
  }
  return absl::OkStatus();
}

// Input j of `op` as the bf16 path reads it, and output 0 (y, dqkv) as it
// writes it.
Input InputOf(const attention::Geometry& g, const float* const* x, int j) {
  return {x[j], (g.native_inputs >> j & 1u) != 0};
}
Output OutputOf(const attention::Geometry& g, float* const* y) {
  return {y[0], (g.native_outputs & 1u) != 0};
}

// q|k|v's input: the forward's 0, the backward's 1.
int QkvInput(KernelOp op) { return op == KernelOp::kAttention ? 0 : 1; }

// Marks native every bf16 input (output) entry of k whose tensor is
// `slot` (one tensor may feed two inputs); false where it has none.
bool MarkNative(KernelArgs& k, bool output, const void* slot) {
  bool found = false;
  for (int i = 0; i < k.num_bf16; ++i) {
    if (k.bf16[i].output == output && k.bf16[i].bf16 == slot) {
      k.bf16[i].native = true;
      found = true;
    }
  }
  return found;
}

}  // namespace

std::string OwnCpuKernel(KernelOp op, const attention::Geometry& g, const float* const* x,
                         float* const* y, bool accumulate) {
  if (g.native_inputs >> QkvInput(op) & 1u) {
    const absl::Status status =
        op == KernelOp::kAttention
            ? AttentionBf16(g, InputOf(g, x, 0), OutputOf(g, y), y[1])
            : AttentionGradBf16(g, InputOf(g, x, 0), InputOf(g, x, 1), InputOf(g, x, 2), x[3],
                                accumulate, OutputOf(g, y), y[1]);
    return status.ok() ? "" : std::string(status.message());
  }
  if (g.native_inputs != 0 || g.native_outputs != 0) return "bf16 operands without a bf16 q|k|v";
  if (op == KernelOp::kAttention) {
    Attention(g, x[0], y[0], y[1]);
  } else {
    AttentionGrad(g, x[0], x[1], x[2], x[3], accumulate, y[0], y[1]);
  }
  return "";
}

void PrepareAttention(std::vector<KernelArgs>& kernels) {
  const bool products = Bf16Gemm::Native();  // the environment, read once per plan
  for (KernelArgs& k : kernels) {
    if (k.op != KernelOp::kAttention && k.op != KernelOp::kAttentionGrad) continue;
    attention::Geometry& g = k.attention;
    g.native_inputs = g.native_outputs = 0;  // staged: the f32 kernel on the widened values
    const int qkv = QkvInput(k.op);
    // q|k|v first: without it native, nothing is.
    if (!products || (g.bf16_inputs >> qkv & 1u) == 0 || !MarkNative(k, false, k.x[qkv])) {
      continue;
    }
    g.native_inputs = 1u << qkv;
    for (int j = 0; j < 3; ++j) {  // dy and y, where bf16 (lse never is)
      if (j != qkv && (g.bf16_inputs >> j & 1u) != 0 && MarkNative(k, false, k.x[j])) {
        g.native_inputs |= 1u << j;
      }
    }
    // y or dqkv (lse and delta are f32).
    if ((g.bf16_outputs & 1u) != 0 && MarkNative(k, true, k.y[0])) g.native_outputs = 1u;
  }
}

}  // namespace trainc::cpu
