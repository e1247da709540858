// attention: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes (attention::Geometry, its Args),
// their resolution from the operands' shapes and attributes, the layout
// and rotary angles every backend computes with (attention::, below:
// host and device code), and its loops, Run<double> the float64
// reference. Its CPU kernel is the backend's own (kOwnCpuKernel): query
// blocks over the CPU's GEMM, runtime/cpu/attention.cc. The CUDA kernels
// are runtime/cuda/attention.cu; the op table entries in
// compiler/ops/op_table.cc.
//
//   attention       qkv -> y[B, T, H d], lse[B, H, T] (f32)
//   attention_grad  dy[B, T, H d], qkv, y, lse -> dqkv (+)=, delta[B, H, T]
//                   (f32, rowsum(dy y)); acc
//
// Layout. q|k|v is one tensor [B, T, (H + 2 KV) d]: H query heads, then KV
// key heads, then KV value heads, each d wide (GPT-2's c_attn when KV = H;
// Llama's q_proj|k_proj|v_proj concatenated otherwise). Query head h reads
// key/value head h / (H / KV), as transformers' repeat_kv. The output is
// y[B, T, H d] and, saved for the backward, the log-sum-exp of each row's
// scaled scores, lse[B, H, T] (always f32). Causal: row i attends to keys
// j <= i, scores scaled by 1 / sqrt(d).
//
// Rotary positions (rope = true) rotate q and k of token t before the
// product, in transformers' "rotate_half" convention (LlamaRotaryEmbedding
// and apply_rotary_pos_emb): with n = d / 2, for i < n
//   q'[i]     = q[i] cos(a_i) - q[i + n] sin(a_i)
//   q'[i + n] = q[i + n] cos(a_i) + q[i] sin(a_i)
// where a_i = t * inv_freq_i, inv_freq_i = 1 / theta^(2i / d), and both are
// rounded to f32 as transformers computes them (then cos and sin in double,
// rounded to f32), so an imported model sees the angles it was trained with.
// The backward applies the transpose (the rotation by -a_i) to dq and dk.
#ifndef TRAINC_COMPILER_OPS_ATTENTION_FAMILY_H_
#define TRAINC_COMPILER_OPS_ATTENTION_FAMILY_H_

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

#ifdef __CUDACC__
#define TRAINC_ATTN_HD __host__ __device__ __forceinline__
#else
#define TRAINC_ATTN_HD inline
#endif

namespace trainc::attention {

// The family's Args: every size its kernels need, named.
struct Geometry {
  int64_t batch = 0;     // B
  int64_t seq = 0;       // T
  int64_t heads = 0;     // H, query heads
  int64_t kv_heads = 0;  // KV, key/value heads; H % KV == 0
  int64_t head_dim = 0;  // d
  bool rope = false;
  float rope_theta = 10000.0f;
  // precision = bf16: bit j set where input j is a bf16 tensor (q|k|v, and
  // the backward's dy and y; lse never is), from the plan's facts, and
  // where output j is (y, dqkv; lse and delta never are), from the
  // resolver (compiler/ops/unit_family.h's bf16 outputs). The reference
  // and the CUDA kernels (which choose from their operands) ignore both.
  uint32_t bf16_inputs = 0;
  uint32_t bf16_outputs = 0;
  // The CPU's kernel: the subsets of those its kernel reads and writes as
  // the bf16 tensors they are, with its products on bf16, set by
  // cpu::PrepareAttention alone (runtime/cpu/attention.h). Left 0 (no one
  // prepared the plan so), every operand is the f32 its slot holds.
  uint32_t native_inputs = 0;
  uint32_t native_outputs = 0;

  // The width of one q|k|v row, (H + 2 KV) d, and of one output row, H d.
  TRAINC_ATTN_HD int64_t QkvWidth() const { return (heads + 2 * kv_heads) * head_dim; }
  TRAINC_ATTN_HD int64_t OutWidth() const { return heads * head_dim; }
  // Column offsets inside a q|k|v row.
  TRAINC_ATTN_HD int64_t QOffset(int64_t h) const { return h * head_dim; }
  TRAINC_ATTN_HD int64_t KOffset(int64_t g) const { return (heads + g) * head_dim; }
  TRAINC_ATTN_HD int64_t VOffset(int64_t g) const {
    return (heads + kv_heads + g) * head_dim;
  }
  // The key/value head query head h reads.
  TRAINC_ATTN_HD int64_t KvHeadOf(int64_t h) const { return h / (heads / kv_heads); }
  TRAINC_ATTN_HD int64_t Group() const { return heads / kv_heads; }
  // 1 / sqrt(d), the scores' scale.
  TRAINC_ATTN_HD float Scale() const {
    return static_cast<float>(1.0 / sqrt(static_cast<double>(head_dim)));
  }
};

// inv_freq_i as transformers computes it in f32:
// 1.0 / (theta ** (arange(0, d, 2).float() / d)).
TRAINC_ATTN_HD float RopeInvFreq(int64_t i, int64_t d, float theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
  const float power = static_cast<float>(pow(static_cast<double>(theta),
                                             static_cast<double>(exponent)));
  return 1.0f / power;
}

// a_i = f32(t * inv_freq_i), the angle of pair i at position t.
TRAINC_ATTN_HD float RopeAngle(int64_t t, int64_t i, int64_t d, float theta) {
  return static_cast<float>(t) * RopeInvFreq(i, d, theta);
}

// cos and sin of the angle f32(t * inv_freq), computed in double and
// rounded to f32 (the kernels', given inv_freq_i = RopeInvFreq(i, d, theta)).
TRAINC_ATTN_HD void RopeCosSinOf(int64_t t, float inv_freq, float* c, float* s) {
  const double angle = static_cast<double>(static_cast<float>(t) * inv_freq);
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
}

// cos and sin of a_i, computed in double and rounded to f32.
TRAINC_ATTN_HD void RopeCosSin(int64_t t, int64_t i, int64_t d, float theta, float* c,
                               float* s) {
  RopeCosSinOf(t, RopeInvFreq(i, d, theta), c, s);
}

// The rotation of one pair (x[i], x[i + n]) by the angle with cosine c and
// sine s; `inverse` rotates by minus the angle (the backward's transpose).
template <typename F>
TRAINC_ATTN_HD void RotatePair(F& lo, F& hi, F c, F s, bool inverse) {
  const F a = lo, b = hi;
  if (inverse) {
    lo = a * c + b * s;
    hi = b * c - a * s;
  } else {
    lo = a * c - b * s;
    hi = b * c + a * s;
  }
}

}  // namespace trainc::attention

namespace trainc::ops {

struct AttentionFamily {
  using Args = attention::Geometry;
  // The CPU runs runtime/cpu/attention.cc's blocks over its GEMM, not Run.
  static constexpr bool kOwnCpuKernel = true;

  // lse (the forward's output 1, the backward's input 3) and delta (the
  // backward's output 1) are f32 under any precision: bf16's 8 bits would
  // shift every recomputed probability.
  static bool F32Operand(KernelOp op, bool output, int j) {
    return output ? j == 1 : op == KernelOp::kAttentionGrad && j == 3;
  }

  // "" or why `in` / `out` (full buffer shapes) and `attrs` (heads,
  // kv_heads: heads when absent, rope, rope_theta) do not fit `op`; the
  // plan's facts say which inputs are bf16 (Args::bf16_inputs).
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs,
                             const unit::PlanFacts& plan, Args* a) {
    using unit::Elements;
    const bool forward = op == KernelOp::kAttention;
    a->bf16_inputs = plan.bf16_inputs & (forward ? 0b1u : 0b111u);  // not lse
    const std::vector<int64_t>& qkv = forward ? in[0] : in[1];
    const std::vector<int64_t>& y = forward ? out[0] : in[2];
    const std::vector<int64_t>& lse = forward ? out[1] : in[3];
    a->heads = static_cast<int64_t>(unit::Attr(attrs, "heads", 0));
    a->kv_heads =
        static_cast<int64_t>(unit::Attr(attrs, "kv_heads", static_cast<double>(a->heads)));
    a->rope = unit::Attr(attrs, "rope", 0) != 0;
    a->rope_theta = static_cast<float>(unit::Attr(attrs, "rope_theta", 10000));
    if (a->heads <= 0 || a->kv_heads <= 0 || a->heads % a->kv_heads != 0) {
      return "attrs heads / kv_heads are not positive with kv_heads | heads";
    }
    if (qkv.size() != 3 || qkv[2] % (a->heads + 2 * a->kv_heads) != 0) {
      return "qkv is not [B, T, (heads + 2 kv_heads) d]";
    }
    a->batch = qkv[0];
    a->seq = qkv[1];
    a->head_dim = qkv[2] / (a->heads + 2 * a->kv_heads);
    if (a->rope && a->head_dim % 2 != 0) return "rope needs an even head size";
    const int64_t rows = a->batch * a->heads * a->seq;
    if (Elements(y) != a->batch * a->seq * a->OutWidth()) return "y is not [B, T, H d]";
    if (Elements(lse) != rows) return "lse is not [B, H, T]";
    if (!forward) {
      if (Elements(in[0]) != Elements(y)) return "dy size";
      if (Elements(out[0]) != Elements(qkv)) return "dqkv size";
      if (Elements(out[1]) != rows) return "delta is not [B, H, T]";
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    if (op == KernelOp::kAttention) {
      Forward(a, x[0], y[0], y[1]);
    } else {
      Grad(a, x[0], x[1], x[2], accumulate, y[0], y[1]);
    }
  }

  // q and k (rotated when rope is on) and v of every head, in T.
  template <typename T>
  struct Heads {
    Args g;
    // [B, T, H, d] queries and [B, T, KV, d] keys and values.
    std::vector<T> q, k, v;
    T Q(int64_t b, int64_t t, int64_t h, int64_t d) const {
      return q[((b * g.seq + t) * g.heads + h) * g.head_dim + d];
    }
    T K(int64_t b, int64_t t, int64_t h, int64_t d) const {
      return k[((b * g.seq + t) * g.kv_heads + g.KvHeadOf(h)) * g.head_dim + d];
    }
    T V(int64_t b, int64_t t, int64_t h, int64_t d) const {
      return v[((b * g.seq + t) * g.kv_heads + g.KvHeadOf(h)) * g.head_dim + d];
    }
    // The index of (b, h, t) in lse and delta.
    int64_t Row(int64_t b, int64_t h, int64_t t) const { return (b * g.heads + h) * g.seq + t; }
  };

  // Rotates one head's row x[d] of position t (the inverse: the transpose).
  template <typename T>
  static void RopeRow(const Args& g, int64_t t, bool inverse, T* x) {
    if (!g.rope) return;
    const int64_t n = g.head_dim / 2;
    for (int64_t i = 0; i < n; ++i) {
      const double angle = attention::RopeAngle(t, i, g.head_dim, g.rope_theta);
      attention::RotatePair(x[i], x[i + n], static_cast<T>(std::cos(angle)),
                            static_cast<T>(std::sin(angle)), inverse);
    }
  }

  template <typename T>
  static Heads<T> ReadHeads(const Args& g, const T* qkv) {
    Heads<T> a{g, {}, {}, {}};
    const int64_t d = g.head_dim;
    a.q.resize(g.batch * g.seq * g.heads * d);
    a.k.resize(g.batch * g.seq * g.kv_heads * d);
    a.v.resize(a.k.size());
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t t = 0; t < g.seq; ++t) {
        const T* row = qkv + (b * g.seq + t) * g.QkvWidth();
        for (int64_t h = 0; h < g.heads; ++h) {
          T* q = &a.q[((b * g.seq + t) * g.heads + h) * d];
          std::copy(row + g.QOffset(h), row + g.QOffset(h) + d, q);
          RopeRow(g, t, false, q);
        }
        for (int64_t h = 0; h < g.kv_heads; ++h) {
          T* k = &a.k[((b * g.seq + t) * g.kv_heads + h) * d];
          std::copy(row + g.KOffset(h), row + g.KOffset(h) + d, k);
          RopeRow(g, t, false, k);
          std::copy(row + g.VOffset(h), row + g.VOffset(h) + d,
                    &a.v[((b * g.seq + t) * g.kv_heads + h) * d]);
        }
      }
    }
    return a;
  }

  // Softmax row i of (b, h): p[j] for j <= i, and its log-sum-exp.
  template <typename T>
  static T SoftmaxRow(const Heads<T>& a, int64_t b, int64_t h, int64_t i, std::vector<T>& p) {
    const Args& g = a.g;
    const T scale = static_cast<T>(1 / std::sqrt(static_cast<double>(g.head_dim)));
    T m = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      T dot = 0;
      for (int64_t d = 0; d < g.head_dim; ++d) dot += a.Q(b, i, h, d) * a.K(b, j, h, d);
      p[j] = dot * scale;
      m = std::max(m, p[j]);
    }
    T sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - m);
    for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(p[j] - m) / sum;
    return m + std::log(sum);
  }

  // qkv -> y[B, T, H d], lse[B, H, T]: every row's softmax from its
  // definition, no blocks.
  template <typename T>
  static void Forward(const Args& g, const T* qkv, T* y, T* lse) {
    const Heads<T> a = ReadHeads(g, qkv);
    std::vector<T> p(g.seq);
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t h = 0; h < g.heads; ++h) {
        for (int64_t i = 0; i < g.seq; ++i) {
          lse[a.Row(b, h, i)] = SoftmaxRow(a, b, h, i, p);
          for (int64_t d = 0; d < g.head_dim; ++d) {
            T sum = 0;
            for (int64_t j = 0; j <= i; ++j) sum += p[j] * a.V(b, j, h, d);
            y[(b * g.seq + i) * g.OutWidth() + h * g.head_dim + d] = sum;
          }
        }
      }
    }
  }

  // dy, qkv, y -> dqkv (+)=, delta = rowsum(dy y). Per (b, h), from the
  // probabilities P recomputed here and s = 1/sqrt(d):
  //   dV = P^T dY, dP = dY V^T, dS = P (dP - rowsum(dP P)),
  //   dQ' = s dS K', dK' = s dS^T Q' (' rotated; dQ, dK rotate back).
  template <typename T>
  static void Grad(const Args& g, const T* dy, const T* qkv, const T* y, bool accumulate,
                   T* dqkv, T* delta) {
    const Heads<T> a = ReadHeads(g, qkv);
    const int64_t D = g.head_dim;
    const T scale = static_cast<T>(1 / std::sqrt(static_cast<double>(D)));
    std::vector<T> dq(a.q.size(), T(0)), dk(a.k.size(), T(0)), dv(a.v.size(), T(0));
    std::vector<T> p(g.seq), dp(g.seq);
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t h = 0; h < g.heads; ++h) {
        const int64_t kvh = g.KvHeadOf(h);
        auto dY = [&](int64_t t, int64_t d) {
          return dy[(b * g.seq + t) * g.OutWidth() + h * D + d];
        };
        for (int64_t i = 0; i < g.seq; ++i) {
          SoftmaxRow(a, b, h, i, p);
          T row = 0, dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += dY(i, d) * y[(b * g.seq + i) * g.OutWidth() + h * D + d];
          }
          delta[a.Row(b, h, i)] = dot;
          for (int64_t j = 0; j <= i; ++j) {
            dp[j] = 0;
            for (int64_t d = 0; d < D; ++d) dp[j] += dY(i, d) * a.V(b, j, h, d);
            row += dp[j] * p[j];
          }
          for (int64_t j = 0; j <= i; ++j) {
            const T ds = p[j] * (dp[j] - row) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dv[((b * g.seq + j) * g.kv_heads + kvh) * D + d] += p[j] * dY(i, d);
              dq[((b * g.seq + i) * g.heads + h) * D + d] += ds * a.K(b, j, h, d);
              dk[((b * g.seq + j) * g.kv_heads + kvh) * D + d] += ds * a.Q(b, i, h, d);
            }
          }
        }
      }
    }
    StoreGrads(g, dq, dk, dv, accumulate, dqkv);
  }

  // dq and dk rotated back, and dv, into their columns of dqkv (+)=.
  template <typename T>
  static void StoreGrads(const Args& g, std::vector<T>& dq, std::vector<T>& dk,
                         const std::vector<T>& dv, bool accumulate, T* dqkv) {
    const int64_t D = g.head_dim;
    auto set = [&](int64_t i, T v) { dqkv[i] = accumulate ? dqkv[i] + v : v; };
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t t = 0; t < g.seq; ++t) {
        const int64_t row = (b * g.seq + t) * g.QkvWidth();
        for (int64_t h = 0; h < g.heads; ++h) {
          T* x = &dq[((b * g.seq + t) * g.heads + h) * D];
          RopeRow(g, t, true, x);
          for (int64_t d = 0; d < D; ++d) set(row + g.QOffset(h) + d, x[d]);
        }
        for (int64_t h = 0; h < g.kv_heads; ++h) {
          T* x = &dk[((b * g.seq + t) * g.kv_heads + h) * D];
          RopeRow(g, t, true, x);
          for (int64_t d = 0; d < D; ++d) {
            set(row + g.KOffset(h) + d, x[d]);
            set(row + g.VOffset(h) + d, dv[((b * g.seq + t) * g.kv_heads + h) * D + d]);
          }
        }
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_ATTENTION_FAMILY_H_
