#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/store.h"

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
void BlockProbs(const float* lse, int64_t i0, int64_t i1, float* p) {
  for (int64_t i = i0; i < i1; ++i) {
    float* pr = p + (i - i0) * i1;
    const float l = lse[i];
    for (int64_t j = 0; j <= i; ++j) pr[j] = std::exp(pr[j] - l);
    std::fill(pr + i + 1, pr + i1, 0.0f);
  }
}

// In place over BlockScores' s, the forward's softmax: rows [i0, i1) of
// P = softmax over j <= i (exact zeros for i < j < i1) and their
// log-sum-exp (the sum in double: rows are as long as the context). One
// exp per score, as a plain softmax; the backward's exp(S - lse) equals
// this P to within rounding.
void BlockSoftmax(int64_t i0, int64_t i1, float* s, float* lse) {
  for (int64_t i = i0; i < i1; ++i) {
    float* pr = s + (i - i0) * i1;
    float m = pr[0];
    for (int64_t j = 1; j <= i; ++j) m = std::max(m, pr[j]);
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      pr[j] = std::exp(pr[j] - m);
      sum += pr[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j <= i; ++j) pr[j] *= inv;
    std::fill(pr + i + 1, pr + i1, 0.0f);
    lse[i] = static_cast<float>(m + std::log(sum));
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
        for (int64_t i = 0; i < T; ++i) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(dyh[i * Y + c]) * yh[i * Y + c];
          dh[i] = static_cast<float>(dot);
        }
        for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
          const int64_t i1 = std::min(T, i0 + kBlock), rows = i1 - i0;
          float* p = s.p.data();
          float* ds = s.ds.data();
          BlockScores(g, q, k, i0, i1, p);
          BlockProbs(lh, i0, i1, p);
          // dP = dY V^T, then in place dS = P (dP - delta) scale (0 where P is).
          Sgemm(false, true, rows, i1, d, 1.0f, dyh + i0 * Y, Y, v.data, v.ld, 0.0f, ds, i1);
          for (int64_t i = i0; i < i1; ++i) {
            const float* pr = p + (i - i0) * i1;
            float* dsr = ds + (i - i0) * i1;
            for (int64_t j = 0; j < i1; ++j) dsr[j] = pr[j] * (dsr[j] - dh[i]) * scale;
          }
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

std::string OwnCpuKernel(KernelOp op, const attention::Geometry& g, const float* const* x,
                         float* const* y, bool accumulate) {
  if (op == KernelOp::kAttention) {
    Attention(g, x[0], y[0], y[1]);
  } else {
    AttentionGrad(g, x[0], x[1], x[2], x[3], accumulate, y[0], y[1]);
  }
  return "";
}

}  // namespace trainc::cpu
