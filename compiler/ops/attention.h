// Causal attention's geometry and rotary positions, written once for the
// CPU and CUDA kernels (runtime/cpu/attention.cc, runtime/cuda/attention.cu)
// and the float64 reference (compiler/autodiff/reference_eval.cc).
//
// Layout. q|k|v is one tensor [B, T, (H + 2 KV) d]: H query heads, then KV
// key heads, then KV value heads, each d wide (GPT-2's c_attn when KV = H;
// Llama's q_proj|k_proj|v_proj concatenated otherwise). Query head h reads
// key/value head h / (H / KV), as transformers' repeat_kv. The output is
// y[B, T, H d] and, saved for the backward, the log-sum-exp of each row's
// scaled scores, lse[B, H, T] (always f32).
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
#ifndef TRAINC_COMPILER_OPS_ATTENTION_H_
#define TRAINC_COMPILER_OPS_ATTENTION_H_

#include <math.h>

#include <cstdint>
#include <map>
#include <string>

#ifdef __CUDACC__
#define TRAINC_ATTN_HD __host__ __device__ __forceinline__
#else
#define TRAINC_ATTN_HD inline
#endif

namespace trainc::attention {

struct Geometry {
  int64_t batch = 0;
  int64_t seq = 0;       // T
  int64_t heads = 0;     // H, query heads
  int64_t kv_heads = 0;  // KV, key/value heads; H % KV == 0
  int64_t head_dim = 0;  // d
  bool rope = false;
  float rope_theta = 10000.0f;

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

// The heads and rotary positions an attention instruction's attributes
// say (op_table.cc's rule writes them: kv_heads absent means heads, rope
// absent means off); the sizes are the caller's to fill from the buffers.
inline Geometry FromAttrs(const std::map<std::string, double>& attrs) {
  auto get = [&](const char* name, double fallback) {
    auto it = attrs.find(name);
    return it == attrs.end() ? fallback : it->second;
  };
  Geometry g;
  g.heads = static_cast<int64_t>(get("heads", 0));
  g.kv_heads = static_cast<int64_t>(get("kv_heads", static_cast<double>(g.heads)));
  g.rope = get("rope", 0) != 0;
  g.rope_theta = static_cast<float>(get("rope_theta", 10000));
  return g;
}

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

// cos and sin of a_i, computed in double and rounded to f32 (the kernels').
TRAINC_ATTN_HD void RopeCosSin(int64_t t, int64_t i, int64_t d, float theta, float* c,
                               float* s) {
  const double angle = static_cast<double>(RopeAngle(t, i, d, theta));
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
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

#endif  // TRAINC_COMPILER_OPS_ATTENTION_H_
