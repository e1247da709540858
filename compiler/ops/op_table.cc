#include "compiler/ops/op_table.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trainc::ops {
namespace {

// ---------------------------------------------------------------------------
// Cost rules. Shapes hold 4-byte elements.

int64_t Elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

double Bytes(const std::vector<Shape>& a, const std::vector<Shape>& b) {
  double n = 0;
  for (const Shape& s : a) n += Elements(s);
  for (const Shape& s : b) n += Elements(s);
  return 4 * n;
}

// `flops_per_element` per element of output 0 (or input 0 for no outputs).
template <int kFlopsPerElement>
Cost Elementwise(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Shape& s = out.empty() ? in[0] : out[0];
  return {double(kFlopsPerElement) * Elements(s), Bytes(in, out)};
}

// cross_entropy_fused: softmax, the loss and the gradient over every logit
// (exp, sum, log, scale, subtract: about 8 per element), reading the
// logits once and writing their gradient once.
Cost ClassifierCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return {8.0 * Elements(in[0]), Bytes(in, out)};
}

// linear: x[.., in] w[out, in]; the gradients are the same product size.
Cost MatmulOfWeight(const std::vector<Shape>& in,
                    const std::vector<Shape>& out, const Shape& w) {
  const int64_t features = w.size() == 2 ? w[1] : 1;
  const int64_t rows = features > 0 ? Elements(in[0]) / features : 0;
  return {2.0 * rows * Elements(w), Bytes(in, out)};
}
Cost LinearCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return MatmulOfWeight(in, out, in[1]);
}
// linear_gelu: the linear's flops and the gelu's over its output; bytes
// are what the one instruction moves (x, w, b read; pre and y written:
// pre is not read back, which is the fusion's saving).
Cost LinearGeluCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Cost product = MatmulOfWeight(in, out, in[1]);
  const Cost gelu = Elementwise<20>({out[0]}, {out[1]});
  return {product.flops + gelu.flops, Bytes(in, out)};
}
// linear_relu, linear_tanh, linear_gelu_erf: the linear's flops and the
// activation's over its output y (the last); bytes are what the one
// instruction moves (pre, when kept, is written, not read back).
template <int kActivationFlops>
Cost LinearActivationCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Cost product = MatmulOfWeight(in, out, in[1]);
  return {product.flops + double(kActivationFlops) * Elements(out.back()), Bytes(in, out)};
}
// add_layernorm: the add's flops over the sum and the layernorm's over
// y; bytes are what the one pass moves (a, b, weight, bias read; sum, y,
// mean, rstd written: the sum is not read back, which is the fusion's
// saving).
Cost AddLayerNormCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Cost add = Elementwise<1>({in[0], in[1]}, {out[0]});
  const Cost norm = Elementwise<8>({out[0], in[2], in[3]}, {out[1], out[2], out[3]});
  return {add.flops + norm.flops, Bytes(in, out)};
}
// swiglu: silu's flops and the product's over y; bytes are what the one
// pass moves (gate and up read, y written: silu's output is neither
// written nor read back, which is the fusion's saving).
Cost SwiGluCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return {6.0 * Elements(out[0]), Bytes(in, out)};
}
// swiglu_grad: the two mul_grads, silu_grad and silu recomputed, per
// element; dy, gate and up read once, dgate and dup written (ds and silu's
// output neither written nor read back).
Cost SwiGluGradCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return {15.0 * Elements(out[0]), Bytes(in, out)};
}
// The gradients: dy[.., out] against w[out, in], rows = |dy| / out.
Cost LinearGrad(const std::vector<Shape>& in, const std::vector<Shape>& out,
                const Shape& w) {
  const int64_t rows = w.empty() || w[0] == 0 ? 0 : Elements(in[0]) / w[0];
  return {2.0 * rows * Elements(w), Bytes(in, out)};
}
Cost LinearGradInputCost(const std::vector<Shape>& in,
                         const std::vector<Shape>& out) {
  return LinearGrad(in, out, in[1]);
}
Cost LinearGradParamsCost(const std::vector<Shape>& in,
                          const std::vector<Shape>& out) {
  return LinearGrad(in, out, out[0]);
}
// linear_grad_input_gelu: linear_grad_input's flops and gelu_tanh_grad's
// over dpre; bytes are what the one instruction moves (dy, w, pre read;
// dpre written: dh, the product, is neither written nor read back, which
// is the fusion's saving; the workspace, empty unless dpre accumulates, is
// not counted).
Cost LinearGradInputGeluCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Cost product = LinearGrad(in, {out[0]}, in[1]);
  const Cost gelu = Elementwise<25>({out[0], in[2]}, {out[0]});
  return {product.flops + gelu.flops, Bytes(in, {out[0]})};
}
// attention: qkv[B, T, (H + 2 KV) d] -> y[B, T, H d], lse[B, H, T]. The
// products skip the tiles above the diagonal on both backends: Q K^T and
// P V over the causal triangle, 2 B H d T (T + 1) / 2 flops each. The
// backward recomputes the scores and does four more products of that size
// (dP, dV, dK, dQ): five, as FlashAttention counts it. (The CUDA backward
// also recomputes S and dP for dQ rather than add dQ with atomics; its
// measured profile, not this count, carries that.)
Cost AttentionCostOf(const Shape& qkv, const Shape& y, const Shape& lse,
                     double products, const std::vector<Shape>& in,
                     const std::vector<Shape>& out) {
  if (qkv.size() != 3 || y.size() != 3 || lse.size() != 3) return {0, Bytes(in, out)};
  const double b = qkv[0], t = qkv[1], hd = y[2];
  const double pairs = t * (t + 1) / 2;
  return {products * 2.0 * b * pairs * hd, Bytes(in, out)};
}
Cost AttentionCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return AttentionCostOf(in[0], out[0], out[1], 2, in, out);
}
Cost AttentionGradCost(const std::vector<Shape>& in,
                       const std::vector<Shape>& out) {
  return AttentionCostOf(in[1], in[2], in[3], 5, in, out);
}

// conv2d: x[B, C, H, W], w[O, C, kh, kw] -> y[B, O, OH, OW]: each output
// element is a C kh kw dot product; both gradients are products of the same
// size (dy against w, dy against x).
Cost ConvOf(const std::vector<Shape>& in, const std::vector<Shape>& out,
            const Shape& y, const Shape& w) {
  const int64_t per_output = w.empty() || w[0] == 0 ? 0 : Elements(w) / w[0];
  return {2.0 * Elements(y) * per_output, Bytes(in, out)};
}
Cost ConvCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return ConvOf(in, out, out[0], in[1]);
}
// conv2d_relu: the convolution's flops and the relu's over y.
Cost ConvReluCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Cost conv = ConvOf(in, out, out[0], in[1]);
  return {conv.flops + double(Elements(out[0])), conv.bytes};
}
Cost ConvGradInputCost(const std::vector<Shape>& in,
                       const std::vector<Shape>& out) {
  return ConvOf(in, out, in[0], in[1]);
}
Cost ConvGradParamsCost(const std::vector<Shape>& in,
                        const std::vector<Shape>& out) {
  return ConvOf(in, out, in[0], out[0]);
}
// Pooling reads each input element about once per window covering it.
Cost PoolCost(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  return {double(Elements(in[0])), Bytes(in, out)};
}

// ---------------------------------------------------------------------------
// Instruction ops.

// Categories, short for the table below.
constexpr OpCategory kData = OpCategory::kData, kMatmul = OpCategory::kMatmul,
                     kElem = OpCategory::kElementwise, kNorm = OpCategory::kNormalization,
                     kEmbed = OpCategory::kEmbedding, kAttn = OpCategory::kAttention,
                     kLoss = OpCategory::kLoss, kConv = OpCategory::kConvolution,
                     kPool = OpCategory::kPooling;

// The step's input.
std::vector<OpDef> DataOps() {
  return {
      {"load_batch", 0, 0, 0, -1, false, kData,
       "-> every input and label buffer, in declaration order; attrs: micro"},
  };
}

// The matrix products and their fused forms.
std::vector<OpDef> MatmulOps() {
  return {
      {"linear", 2, 3, 1, 1, false, kMatmul,
       "x[.., in], w[out, in], b[out] (optional) -> y[.., out]",
       {},
       {{"linear_grad_params", {kDy, In(0)}, {1, 2}},
        {"linear_grad_input", {kDy, In(1)}, {0}}},
       false, LinearCost},
      {"linear_grad_input", 2, 2, 1, 1, false, kMatmul,
       "dy[.., out], w[out, in] -> dx[.., in]; acc", {}, {}, false,
       LinearGradInputCost},
      {"linear_grad_params", 2, 2, 1, 2, false, kMatmul,
       "dy[.., out], x[.., in] -> dw[out, in], db[out] (optional); acc", {},
       {}, false, LinearGradParamsCost},
      {"linear_gelu", 2, 3, 2, 2, false, kMatmul,
       "x[.., in], w[out, in], b[out] (optional) -> pre[.., out], y[.., out]: "
       "pre = linear(x, w, b), y = gelu_tanh(pre), one instruction; pre is what "
       "the backward's gelu_tanh_grad reads; made by the linear-gelu fusion "
       "(compiler/graph/fuse_linear_gelu.h), never differentiated",
       {}, {}, false, LinearGeluCost, false, {}, /*fused=*/true},
      {"linear_relu", 2, 3, 1, 2, false, kMatmul,
       "x[.., in], w[out, in], b[out] (optional) -> pre[.., out] (optional), y[.., out]: "
       "pre = linear(x, w, b), y = relu(pre), one instruction; pre is an output only "
       "when another instruction reads it (y is what relu_grad reads); made by the "
       "linear-activation fusion (compiler/graph/fuse_activation.h), never "
       "differentiated",
       {}, {}, false, LinearActivationCost<1>, false, {}, /*fused=*/true},
      {"linear_tanh", 2, 3, 1, 2, false, kMatmul,
       "x[.., in], w[out, in], b[out] (optional) -> pre[.., out] (optional), y[.., out]: "
       "as linear_relu with y = tanh(pre) (y is what tanh_grad reads)",
       {}, {}, false, LinearActivationCost<10>, false, {}, /*fused=*/true},
      {"linear_gelu_erf", 2, 3, 1, 2, false, kMatmul,
       "x[.., in], w[out, in], b[out] (optional) -> pre[.., out] (optional), y[.., out]: "
       "as linear_relu with y = gelu(pre), erf form (pre is what gelu_grad reads, so a "
       "trained plan keeps it)",
       {}, {}, false, LinearActivationCost<20>, false, {}, /*fused=*/true},
      {"linear_grad_input_gelu", 3, 3, 2, 2, false, kMatmul,
       "dy[.., out], w[out, in], pre[.., in] -> dpre[.., in], workspace: dh = "
       "linear_grad_input(dy, w), dpre = gelu_tanh_grad(dh, pre), one instruction; dh "
       "has dpre's dtype (under bf16 the product is rounded to bf16 before the gelu's "
       "gradient reads it) and is not stored; the workspace holds dh where dpre "
       "accumulates (sized by the backend, empty otherwise); made by the backward "
       "linear-gelu fusion (compiler/graph/fuse_linear_gelu_grad.h), never "
       "differentiated; acc",
       {}, {}, false, LinearGradInputGeluCost, /*workspace=*/true, {}, /*fused=*/true},
  };
}

// Elementwise ops and their gradients.
std::vector<OpDef> ElementwiseOps() {
  return {
      {"relu", 1, 1, 1, 1, false, kElem, "x -> y", {},
       {{"relu_grad", {kDy, Out(0)}, {0}}}, false, Elementwise<1>},
      {"relu_grad", 2, 2, 1, 1, false, kElem, "dy, y -> dx; acc", {}, {}, false,
       Elementwise<1>},
      {"gelu", 1, 1, 1, 1, false, kElem, "x -> y (erf form)", {},
       {{"gelu_grad", {kDy, In(0)}, {0}}}, false, Elementwise<20>},
      {"gelu_grad", 2, 2, 1, 1, false, kElem, "dy, x -> dx; acc", {}, {}, false,
       Elementwise<25>},
      {"gelu_tanh", 1, 1, 1, 1, false, kElem, "x -> y (tanh approximation)", {},
       {{"gelu_tanh_grad", {kDy, In(0)}, {0}}}, false, Elementwise<20>},
      {"gelu_tanh_grad", 2, 2, 1, 1, false, kElem, "dy, x -> dx; acc", {}, {},
       false, Elementwise<25>},
      {"silu", 1, 1, 1, 1, false, kElem, "x -> y = x sigmoid(x)", {},
       {{"silu_grad", {kDy, In(0)}, {0}}}, false, Elementwise<5>},
      {"silu_grad", 2, 2, 1, 1, false, kElem, "dy, x -> dx; acc", {}, {}, false,
       Elementwise<8>},
      {"tanh", 1, 1, 1, 1, false, kElem, "x -> y", {},
       {{"tanh_grad", {kDy, Out(0)}, {0}}}, false, Elementwise<10>},
      {"tanh_grad", 2, 2, 1, 1, false, kElem, "dy, y -> dx; acc", {}, {}, false,
       Elementwise<3>},
      {"dropout", 1, 1, 1, 1, false, kElem,
       "x[B, ..] -> y: x times 0 (probability p) or 1/(1-p), the mask a "
       "Philox function of (seed, key, global example, element); identity "
       "in evaluation; attrs: p, key",
       {}, {{"dropout_grad", {kDy}, {0}}}, false, Elementwise<2>},
      {"dropout_grad", 1, 1, 1, 1, false, kElem,
       "dy -> dx: the forward's mask regenerated; acc; attrs: p, key", {}, {},
       false, Elementwise<2>},
      {"add", 2, 2, 1, 1, false, kElem, "a, b -> y (same shapes)", {},
       {{"copy_grad", {kDy}, {0}}, {"copy_grad", {kDy}, {1}}}, false,
       Elementwise<1>},
      {"copy_grad", 1, 1, 1, 1, false, kElem, "dy -> dx; acc", {}, {}, false,
       Elementwise<1>},
      {"mul", 2, 2, 1, 1, false, kElem, "a, b -> y = a b (same shapes)", {},
       {{"mul_grad", {kDy, In(1)}, {0}}, {"mul_grad", {kDy, In(0)}, {1}}}, false,
       Elementwise<1>},
      {"mul_grad", 2, 2, 1, 1, false, kElem, "dy, other -> dx = dy other; acc", {}, {},
       false, Elementwise<1>},
      {"swiglu", 2, 2, 1, 1, false, kElem,
       "gate, up -> y = silu(gate) up (same shapes), one pass: silu's output is not "
       "stored (under bf16 it is rounded to bf16 before the product, as the unfused "
       "plan's tensor); made by the SwiGLU fusion (compiler/graph/fuse_swiglu.h) from "
       "silu and mul, never differentiated: the fusion turns their gradients into "
       "swiglu_grad",
       {}, {}, false, SwiGluCost, false, {}, /*fused=*/true},
      {"swiglu_grad", 3, 3, 2, 2, false, kElem,
       "dy, gate, up -> dgate = silu_grad(dy up, gate), dup = dy silu(gate): both "
       "gradients of swiglu in one pass, silu(gate) recomputed (under bf16 dy up and "
       "silu(gate) rounded to bf16 before they are read, as the unfused plan's tensors); "
       "made by the SwiGLU fusion from mul's two mul_grads and silu_grad; acc",
       {}, {}, false, SwiGluGradCost, false, {}, /*fused=*/true},
      {"softmax", 1, 1, 1, 1, false, kElem, "x[.., n] -> y, over the last axis",
       {}, {{"softmax_grad", {kDy, Out(0)}, {0}}}, false, Elementwise<5>},
      {"softmax_grad", 2, 2, 1, 1, false, kElem, "dy, y -> dx; acc", {}, {},
       false, Elementwise<4>},
  };
}

// Normalizations: layernorm (and its residual fusion), rmsnorm, group_norm.
std::vector<OpDef> NormalizationOps() {
  return {
      {"layernorm", 3, 3, 3, 3, false, kNorm,
       "x[.., d], weight[d], bias[d] -> y, mean[..], rstd[..]; attrs: eps",
       {},
       {{"layernorm_grad_params", {kDy, In(0), Out(1), Out(2)}, {1, 2}},
        {"layernorm_grad_input", {kDy, In(0), In(1), Out(1), Out(2)}, {0}}},
       false, Elementwise<8>},
      {"add_layernorm", 4, 4, 4, 4, false, kNorm,
       "a[.., d], b[.., d], weight[d], bias[d] -> sum = a + b, y, mean[..], rstd[..] = "
       "layernorm(sum): the residual add and the layernorm of its sum in one pass over "
       "the rows (sum written, and normalized as it is stored: under bf16 its dtype is "
       "the add's, rounded before it is normalized); the backward reads sum, mean and "
       "rstd as the layernorm's x, mean and rstd; made by the residual-layernorm fusion "
       "(compiler/graph/fuse_add_layernorm.h), never differentiated; y may take b's "
       "bytes (each row of b is read before its y is written); attrs: eps",
       {}, {}, false, AddLayerNormCost, false, {}, /*fused=*/true, /*in_place=*/{1, 1}},
      {"layernorm_grad_input", 5, 5, 1, 1, false, kNorm,
       "dy, x, weight, mean, rstd -> dx; acc", {}, {}, false, Elementwise<10>},
      {"layernorm_grad_params", 4, 4, 2, 2, false, kNorm,
       "dy, x, mean, rstd -> dweight, dbias; acc", {}, {}, false,
       Elementwise<5>},
      {"rmsnorm", 2, 2, 2, 2, false, kNorm,
       "x[.., d], weight[d] -> y = x rstd weight, rstd[..] = 1 / sqrt(mean(x^2) + eps); "
       "attrs: eps",
       {},
       {{"rmsnorm_grad_params", {kDy, In(0), Out(1)}, {1}},
        {"rmsnorm_grad_input", {kDy, In(0), In(1), Out(1)}, {0}}},
       false, Elementwise<5>},
      {"rmsnorm_grad_input", 4, 4, 1, 1, false, kNorm, "dy, x, weight, rstd -> dx; acc", {},
       {}, false, Elementwise<7>},
      {"rmsnorm_grad_params", 3, 3, 1, 1, false, kNorm, "dy, x, rstd -> dweight; acc", {}, {},
       false, Elementwise<3>},
      {"group_norm", 3, 3, 3, 3, false, kNorm,
       "x[N, C, H, W] or [N, T, C], weight[C], bias[C] -> y, mean[N, G], rstd[N, G]: "
       "each sample's group of C / G channels normalized over its elements "
       "(compiler/ops/group_norm_family.h); attrs: groups, eps",
       {},
       {{"group_norm_grad_params", {kDy, In(0), Out(1), Out(2)}, {1, 2}},
        {"group_norm_grad_input", {kDy, In(0), In(1), Out(1), Out(2)}, {0}}},
       false, Elementwise<8>},
      {"group_norm_grad_input", 5, 5, 1, 1, false, kNorm,
       "dy, x, weight, mean, rstd -> dx; acc; attrs: groups", {}, {}, false, Elementwise<10>},
      {"group_norm_grad_params", 4, 4, 2, 2, false, kNorm,
       "dy, x, mean, rstd -> dweight, dbias; acc; attrs: groups", {}, {}, false,
       Elementwise<5>},
  };
}

// Token and position embeddings.
std::vector<OpDef> EmbeddingOps() {
  return {
      {"embedding", 2, 2, 1, 1, false, kEmbed,
       "ids i32[..], table[V, C] -> y[.., C]", {0},
       {{"embedding_grad", {kDy, In(0)}, {1}}}, false, Elementwise<0>},
      {"embedding_grad", 2, 2, 1, 1, false, kEmbed,
       "dy[.., C], ids i32[..] -> dtable[V, C]; acc (rows added in order)", {},
       {}, false, Elementwise<1>},
      {"position_embedding", 1, 1, 1, 1, false, kEmbed,
       "table[T, C] -> y[B, T, C] (the table for every sample)", {},
       {{"position_embedding_grad", {kDy}, {0}}}, false, Elementwise<0>},
      {"position_embedding_grad", 1, 1, 1, 1, false, kEmbed,
       "dy[B, T, C] -> dtable[T, C]; acc (summed over B in order)", {}, {},
       false, Elementwise<1>},
  };
}

// Causal attention.
std::vector<OpDef> AttentionOps() {
  return {
      {"attention", 1, 1, 2, 2, false, kAttn,
       "qkv[B, T, (H + 2 KV) d] -> y[B, T, H d], lse[B, H, T] (f32); attrs: "
       "heads, kv_heads, rope, rope_theta. Causal, scaled by 1/sqrt(d); q, "
       "k, v heads along the last axis (compiler/ops/attention_family.h); no "
       "[T, T] tensor is stored",
       {},
       {{"attention_grad", {kDy, In(0), Out(0), Out(1)}, {0}, false,
         /*workspace_like=*/1}},
       false, AttentionCost, false, /*f32_outputs=*/{1}},
      {"attention_grad", 4, 4, 2, 2, false, kAttn,
       "dy[B, T, H d], qkv, y, lse -> dqkv, delta[B, H, T] (f32, rowsum(dy "
       "y)); acc; attrs as attention. Recomputes the scores tile by tile",
       {}, {}, false, AttentionGradCost},
  };
}

// Convolution and pooling (NCHW, PyTorch's layouts); then the copies that
// change a dtype or a shape.
std::vector<OpDef> ConvolutionOps() {
  return {
      {"conv2d", 2, 3, 2, 2, false, kConv,
       "x[B, C, H, W], w[O, C, kh, kw], b[O] (optional) -> y[B, O, OH, OW], "
       "workspace; attrs: stride, padding (both axes)",
       {},
       {{"conv2d_grad_params", {kDy, In(0)}, {1, 2}},
        {"conv2d_grad_input", {kDy, In(1)}, {0}}},
       false, ConvCost, /*workspace=*/true},
      {"conv2d_relu", 2, 3, 2, 2, false, kConv,
       "x[B, C, H, W], w[O, C, kh, kw], b[O] (optional) -> y[B, O, OH, OW], workspace: "
       "y = relu(conv2d(x, w, b)), one instruction, the convolution's own output never "
       "stored (oneDNN's relu post-op); made by the convolution-relu fusion "
       "(compiler/graph/fuse_activation.h) where nothing else reads that output, never "
       "differentiated; attrs: stride, padding",
       {}, {}, false, ConvReluCost, /*workspace=*/true, {}, /*fused=*/true},
      {"conv2d_grad_input", 2, 2, 2, 2, false, kConv,
       "dy[B, O, OH, OW], w -> dx[B, C, H, W], workspace; acc; attrs: "
       "stride, padding",
       {}, {}, false, ConvGradInputCost, true},
      {"conv2d_grad_params", 2, 2, 2, 3, false, kConv,
       "dy[B, O, OH, OW], x -> dw[O, C, kh, kw], db[O] (optional), workspace; "
       "acc; attrs: stride, padding",
       {}, {}, false, ConvGradParamsCost, true},
      {"max_pool2d", 1, 1, 3, 3, false, kPool,
       "x[B, C, H, W] -> y[B, C, OH, OW], argmax i32[B, C, OH, OW] (the "
       "backend's own encoding), workspace; attrs: kernel_h, kernel_w, "
       "stride, padding (padding never wins the max)",
       {},
       {{"max_pool2d_grad", {kDy, In(0), Out(0), Out(1)}, {0}}},
       false, PoolCost, true},
      {"max_pool2d_grad", 4, 4, 2, 2, false, kPool,
       "dy, x, y, argmax -> dx, workspace: dy to the max of each window; acc; "
       "attrs as max_pool2d",
       {}, {}, false, PoolCost, true},
      {"avg_pool2d", 1, 1, 2, 2, false, kPool,
       "x[B, C, H, W] -> y[B, C, OH, OW], workspace: window means, padding "
       "counted as zeros (PyTorch's count_include_pad); attrs: kernel_h, "
       "kernel_w, stride, padding",
       {}, {{"avg_pool2d_grad", {kDy}, {0}}}, false, PoolCost, true},
      {"avg_pool2d_grad", 1, 1, 2, 2, false, kPool,
       "dy -> dx[B, C, H, W], workspace; acc; attrs as avg_pool2d", {}, {},
       false, PoolCost, true},
      {"cast", 1, 1, 1, 1, false, kElem,
       "x -> y: x's values in y's dtype (f32 -> bf16 rounds to nearest "
       "even); made by precision = bf16, never differentiated",
       {}, {}, false, Elementwise<0>},
      {"reshape", 1, 1, 1, 1, false, kElem,
       "x -> y: the same elements under another shape (a copy)", {},
       {{"copy_grad", {kDy}, {0}}}, false, Elementwise<0>},
  };
}

// Losses and their gradients.
std::vector<OpDef> LossOps() {
  return {
      {"cross_entropy", 2, 2, 2, 2, false, kLoss,
       "logits[.., C], label i32[..] -> loss_sum[1], probs[.., C]: the sum "
       "over every row of -log softmax(logits)[label]",
       {1},
       {{"cross_entropy_grad", {Out(1), In(1)}, {0}, /*scaled=*/true}},
       true, Elementwise<6>},
      {"cross_entropy_grad", 2, 2, 1, 1, false, kLoss,
       "probs, label -> dlogits = scale (probs - onehot(label)); acc; attrs: "
       "scale",
       {}, {}, false, Elementwise<2>},
      {"cross_entropy_fused", 2, 2, 2, 2, false, kLoss,
       "logits[.., C], label i32[..] -> loss_sum[1], dlogits[.., C] = scale "
       "(softmax(logits) - onehot(label)): cross_entropy and its gradient in one "
       "instruction, the probabilities never stored; made by the classifier "
       "fusion (compiler/graph/fuse_classifier.h), never differentiated; "
       "dlogits may take the logits' bytes; in evaluation it gets the logits "
       "back, not the gradient; attrs: scale",
       {1}, {}, true, ClassifierCost, false, {}, /*fused=*/true, /*in_place=*/{1, 0}},
      {"mse", 2, 2, 1, 1, false, kLoss,
       "pred[B, n], target[B, n] -> loss_sum[1] = sum_b mean_j (pred - "
       "target)^2",
       {1},
       {{"mse_grad", {In(0), In(1)}, {0}, /*scaled=*/true}},
       true, Elementwise<3>},
      {"mse_grad", 2, 2, 1, 1, false, kLoss,
       "pred, target -> dpred = scale 2 (pred - target) / n; acc; attrs: scale",
       {}, {}, false, Elementwise<3>},
  };
}

// The step's tail: collectives and the optimizer.
std::vector<OpDef> StepTailOps() {
  return {
      {"all_reduce", 1, 1, 1, 1, true, OpCategory::kCollective,
       "bucket grads -> the same buffer, summed over ranks; attrs: bucket"},
      {"reduce_scatter", 1, 1, 1, 1, true, OpCategory::kCollective,
       "bucket grads -> the same buffer, this rank's shard summed over ranks "
       "(ZeRO-1); attrs: bucket"},
      {"all_gather", 1, 1, 1, 1, true, OpCategory::kCollective,
       "params span -> the same buffer, every rank's shard to every rank "
       "(ZeRO-1); attrs: bucket"},
      {"sum_squares", 1, 1, 1, 1, false, OpCategory::kOptimizer,
       "bucket grads -> grad_sq[1] (+)= sum of squares, in double; acc; "
       "attrs: bucket, shard (1: this rank's ZeRO-1 shard only)"},
      {"optimizer", 2, -1, 1, -1, false, OpCategory::kOptimizer,
       "params span, grads, state spans[, grad_sq] -> params, state spans; "
       "attrs: bucket, clip (> 0: grads scaled by min(1, clip / (sqrt(grad_sq) "
       "+ 1e-6))), shard (1: this rank's ZeRO-1 shard only)"},
  };
}

// Every op, group after group, in the order above.
std::vector<OpDef> MakeOps() {
  std::vector<OpDef> ops;
  for (std::vector<OpDef> (*group)() :
       {&DataOps, &MatmulOps, &ElementwiseOps, &NormalizationOps, &EmbeddingOps,
        &AttentionOps, &ConvolutionOps, &LossOps, &StepTailOps}) {
    for (OpDef& op : group()) ops.push_back(std::move(op));
  }
  return ops;
}

// ---------------------------------------------------------------------------
// Model op rules.

using Kind = ArgDef::Kind;

ShapeError Error(int arg, std::string message, std::string hint = "") {
  return {arg, std::move(message), std::move(hint)};
}

Shape Leading(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// A parameter slot: the call's own, or the one passed as `arg_name`.
// Fails when a passed parameter's shape is not `shape`.
std::optional<ShapeError> Slot(const OpCall& call, const ModelOpDef& def,
                               const char* arg_name, const char* suffix,
                               Shape shape, Init init, double scale,
                               Lowering* out) {
  ParamSlot slot{suffix, shape, init, scale, ""};
  auto shared = call.shared_parameters.find(arg_name);
  if (shared != call.shared_parameters.end()) {
    if (shared->second != shape) {
      return Error(def.ArgIndex(arg_name),
                   std::string(def.name) + " needs " + arg_name + " of shape " +
                       ShapeText(shape) + ", got one of " +
                       ShapeText(shared->second));
    }
    slot.shared_arg = arg_name;
  }
  out->params.push_back(std::move(slot));
  return std::nullopt;
}


std::variant<Lowering, ShapeError> LinearRule(const OpCall& call) {
  const Shape& x = call.values[0];
  if (x.empty()) return Error(0, "linear needs an input with a feature axis");
  const int64_t in = x.back(), out = call.Int("out_features");
  Lowering l;
  l.instruction = "linear";
  l.shape = x;
  l.shape.back() = out;
  const ModelOpDef& def = DefOf(ModelOp::kLinear);
  // init = normal(std): N(0, std^2) weights and zero biases (GPT-2's and
  // Llama's reference initialisation); else nn.Linear's uniform.
  const double std = call.constants.count("init") ? call.Float("init") : 0.0;
  const bool normal = std > 0;
  if (auto e = Slot(call, def, "weight", "weight", {out, in},
                    normal ? Init::kNormal : Init::kUniformFanIn, normal ? std : double(in),
                    &l)) {
    return *e;
  }
  if (call.Bool("bias")) {
    l.params.push_back({"bias", {out}, normal ? Init::kZeros : Init::kUniformFanIn,
                        normal ? 0.0 : double(in), ""});
  }
  return l;
}

std::variant<Lowering, ShapeError> Unary(const OpCall& call,
                                         const char* instruction) {
  Lowering l;
  l.instruction = instruction;
  l.shape = call.values[0];
  return l;
}
std::variant<Lowering, ShapeError> ReluRule(const OpCall& c) {
  return Unary(c, "relu");
}
std::variant<Lowering, ShapeError> TanhRule(const OpCall& c) {
  return Unary(c, "tanh");
}
std::variant<Lowering, ShapeError> SiluRule(const OpCall& c) {
  return Unary(c, "silu");
}
std::variant<Lowering, ShapeError> GeluRule(const OpCall& call) {
  const std::string& form = call.String("approximate");
  if (form != "none" && form != "tanh") {
    return Error(DefOf(ModelOp::kGelu).ArgIndex("approximate"),
                 "gelu's approximate must be \"none\" (erf) or \"tanh\", got \"" +
                     form + "\"");
  }
  return Unary(call, form == "tanh" ? "gelu_tanh" : "gelu");
}
// 32-bit FNV-1a of the value's name: a dropout op's key, stable across
// splits, runs and plans (two dropouts of one model draw different masks).
uint32_t NameKey(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}

std::variant<Lowering, ShapeError> DropoutRule(const OpCall& call) {
  const double p = call.Float("p");
  if (!(p >= 0 && p < 1)) {
    return Error(DefOf(ModelOp::kDropout).ArgIndex("p"),
                 "dropout's p must be in [0, 1), got " + std::to_string(p));
  }
  Lowering l = std::get<Lowering>(Unary(call, "dropout"));
  l.attrs["p"] = p;
  l.attrs["key"] = static_cast<double>(NameKey(call.name));
  return l;
}

std::variant<Lowering, ShapeError> SoftmaxRule(const OpCall& call) {
  if (call.values[0].empty()) return Error(0, "softmax needs an axis");
  return Unary(call, "softmax");
}

std::variant<Lowering, ShapeError> LayerNormRule(const OpCall& call) {
  const Shape& x = call.values[0];
  if (x.empty()) {
    return Error(0, "layernorm needs an input with a feature axis");
  }
  const double eps = call.Float("eps");
  if (!(eps > 0)) return Error(DefOf(ModelOp::kLayerNorm).ArgIndex("eps"), "eps must be > 0");
  Lowering l;
  l.instruction = "layernorm";
  l.shape = x;
  l.attrs["eps"] = eps;
  l.params.push_back({"weight", {x.back()}, Init::kOnes, 0, ""});
  l.params.push_back({"bias", {x.back()}, Init::kZeros, 0, ""});
  l.saved = {{"mean", Leading(x)}, {"rstd", Leading(x)}};
  return l;
}

std::variant<Lowering, ShapeError> RmsNormRule(const OpCall& call) {
  const Shape& x = call.values[0];
  if (x.empty()) return Error(0, "rmsnorm needs an input with a feature axis");
  const double eps = call.Float("eps");
  if (!(eps > 0)) return Error(DefOf(ModelOp::kRmsNorm).ArgIndex("eps"), "eps must be > 0");
  Lowering l;
  l.instruction = "rmsnorm";
  l.shape = x;
  l.attrs["eps"] = eps;
  l.params.push_back({"weight", {x.back()}, Init::kOnes, 0, ""});
  l.saved = {{"rstd", Leading(x)}};
  return l;
}

// GroupNorm of an image [C, H, W] (channels first) or a sequence [T, C]
// (channels last), as torch.nn.GroupNorm.
std::variant<Lowering, ShapeError> GroupNormRule(const OpCall& call) {
  const Shape& x = call.values[0];
  if (x.size() != 2 && x.size() != 3) {
    return Error(0, "group_norm needs an image [C, H, W] or a sequence [T, C], got " +
                        ShapeText(x));
  }
  const int64_t channels = x.size() == 3 ? x[0] : x[1];
  const int64_t groups = call.Int("groups");
  if (channels % groups != 0) {
    return Error(DefOf(ModelOp::kGroupNorm).ArgIndex("groups"),
                 "groups (" + std::to_string(groups) + ") must divide the " +
                     std::to_string(channels) + " channels");
  }
  const double eps = call.Float("eps");
  if (!(eps > 0)) return Error(DefOf(ModelOp::kGroupNorm).ArgIndex("eps"), "eps must be > 0");
  Lowering l;
  l.instruction = "group_norm";
  l.shape = x;
  l.attrs["groups"] = static_cast<double>(groups);
  l.attrs["eps"] = eps;
  l.params.push_back({"weight", {channels}, Init::kOnes, 0, ""});
  l.params.push_back({"bias", {channels}, Init::kZeros, 0, ""});
  l.saved = {{"mean", {groups}}, {"rstd", {groups}}};
  return l;
}

// "'h1' is [256]", or "[256]" when the call's names are unknown.
std::string Named(const OpCall& call, size_t i) {
  const std::string shape = ShapeText(call.values[i]);
  return i < call.value_names.size() ? "'" + call.value_names[i] + "' is " + shape
                                     : shape;
}

std::variant<Lowering, ShapeError> AddRule(const OpCall& call) {
  if (call.values[0] != call.values[1]) {
    return Error(-1,
                 "add: shapes differ: " + Named(call, 0) + " but " +
                     Named(call, 1),
                 "add sums element-wise: both sides need the same shape");
  }
  return Unary(call, "add");
}

std::variant<Lowering, ShapeError> MulRule(const OpCall& call) {
  if (call.values[0] != call.values[1]) {
    return Error(-1, "mul: shapes differ: " + Named(call, 0) + " but " + Named(call, 1),
                 "mul multiplies element-wise: both sides need the same shape");
  }
  return Unary(call, "mul");
}

std::variant<Lowering, ShapeError> EmbeddingRule(const OpCall& call) {
  Lowering l;
  l.instruction = "embedding";
  l.shape = call.values[0];
  l.shape.push_back(call.Int("dim"));
  // GPT-2's N(0, 0.02), not nn.Embedding's N(0, 1): with tied output
  // weights the latter starts with logits of std ~sqrt(C).
  if (auto e = Slot(call, DefOf(ModelOp::kEmbedding), "weight", "weight",
                    {call.Int("vocab"), call.Int("dim")}, Init::kNormal, 0.02,
                    &l)) {
    return *e;
  }
  return l;
}

std::variant<Lowering, ShapeError> PositionEmbeddingRule(const OpCall& call) {
  Lowering l;
  l.instruction = "position_embedding";
  l.shape = {call.Int("positions"), call.Int("dim")};
  l.params.push_back({"weight", l.shape, Init::kNormal, 0.02, ""});
  return l;
}

std::string FormatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::variant<Lowering, ShapeError> AttentionRule(const OpCall& call) {
  const Shape& qkv = call.values[0];
  const int64_t heads = call.Int("heads");
  const int64_t kv_heads = call.Int("kv_heads") == 0 ? heads : call.Int("kv_heads");
  const int kv_index = DefOf(ModelOp::kCausalAttention).ArgIndex("kv_heads");
  if (heads % kv_heads != 0) {
    return Error(kv_index,
                 std::to_string(heads) + " heads cannot be shared evenly by " +
                     std::to_string(kv_heads) + " kv_heads",
                 "kv_heads must divide heads (grouped-query attention)");
  }
  const int64_t slots = heads + 2 * kv_heads;
  if (kv_heads == heads && qkv.size() == 2 && qkv[1] % 3 == 0 && (qkv[1] / 3) % heads != 0) {
    return Error(DefOf(ModelOp::kCausalAttention).ArgIndex("heads"),
                 "width " + std::to_string(qkv[1] / 3) + " (= " + std::to_string(qkv[1]) +
                     " / 3) is not divisible by " + std::to_string(heads) + " heads");
  }
  if (qkv.size() != 2 || qkv[1] % slots != 0) {
    return Error(0,
                 "causal_attention with " + std::to_string(heads) + " heads and " +
                     std::to_string(kv_heads) + " kv_heads needs q|k|v as [T, " +
                     std::to_string(slots) + " d], got " + ShapeText(qkv),
                 kv_heads == heads
                     ? "e.g. qkv = linear(x, 3 * width)"
                     : "q|k|v: heads query heads, then kv_heads key and kv_heads "
                       "value heads, each d wide");
  }
  const int64_t t = qkv[0], d = qkv[1] / slots;
  const bool rope = call.Bool("rope");
  if (rope && d % 2 != 0) {
    return Error(DefOf(ModelOp::kCausalAttention).ArgIndex("rope"),
                 "rope rotates pairs of a head's features, and the head size " +
                     std::to_string(d) + " is odd");
  }
  const double theta = call.Float("rope_theta");
  if (!(theta > 1)) {
    return Error(DefOf(ModelOp::kCausalAttention).ArgIndex("rope_theta"),
                 "rope_theta must be above 1, got " + FormatNumber(theta));
  }
  Lowering l;
  l.instruction = "attention";
  l.shape = {t, heads * d};
  l.attrs["heads"] = double(heads);
  l.attrs["kv_heads"] = double(kv_heads);
  if (rope) {
    l.attrs["rope"] = 1;
    l.attrs["rope_theta"] = theta;
  }
  l.saved = {{"lse", {heads, t}}};
  return l;
}

// One spatial axis of a convolution or pooling window:
//   out = (size + 2 padding - kernel) / stride + 1,
// where the division must be exact (PyTorch floors, silently dropping the
// last rows; here that is an error that shows the arithmetic).
std::optional<ShapeError> WindowAxis(const char* op, const char* axis,
                                     int64_t size, int64_t kernel,
                                     int64_t stride, int64_t padding,
                                     int kernel_arg, int stride_arg,
                                     int64_t* out) {
  const std::string sum = std::to_string(size) + " - " +
                          std::to_string(kernel) + " + 2\u00b7" +
                          std::to_string(padding);
  const int64_t span = size - kernel + 2 * padding;
  if (span < 0) {
    return Error(kernel_arg,
                 std::string(op) + ": kernel " + std::to_string(kernel) +
                     " is larger than the padded " + axis + " " +
                     std::to_string(size) + " + 2\u00b7" +
                     std::to_string(padding) + " = " +
                     std::to_string(size + 2 * padding));
  }
  if (span % stride != 0) {
    const int64_t lower = span / stride * stride, upper = lower + stride;
    return Error(stride_arg,
                 std::string(op) + ": " + axis + ": " + sum + " = " +
                     std::to_string(span) + " is not divisible by stride " +
                     std::to_string(stride),
                 "the windows must tile the " + std::string(axis) +
                     " exactly: change padding, kernel or stride so that " +
                     std::to_string(span) + " becomes a multiple of " +
                     std::to_string(stride) + " (e.g. " +
                     std::to_string(lower) + " or " + std::to_string(upper) +
                     ")");
  }
  *out = span / stride + 1;
  return std::nullopt;
}

// x must be an image [C, H, W].
std::optional<ShapeError> NeedImage(const OpCall& call, const char* op) {
  if (call.values[0].size() == 3) return std::nullopt;
  return Error(0,
               std::string(op) + " needs an image [channels, height, width], " +
                   Named(call, 0),
               "declare images with their shape, e.g. input image: "
               "f32[1, 28, 28]");
}

std::variant<Lowering, ShapeError> Conv2dRule(const OpCall& call) {
  if (auto e = NeedImage(call, "conv2d")) return *e;
  const ModelOpDef& def = DefOf(ModelOp::kConv2d);
  const Shape& x = call.values[0];
  const int64_t c = x[0], out = call.Int("out_channels"),
                k = call.Int("kernel"), stride = call.Int("stride"),
                padding = call.Int("padding");
  const int ka = def.ArgIndex("kernel"), sa = def.ArgIndex("stride");
  int64_t oh = 0, ow = 0;
  if (auto e = WindowAxis("conv2d", "height", x[1], k, stride, padding, ka,
                          sa, &oh)) {
    return *e;
  }
  if (auto e = WindowAxis("conv2d", "width", x[2], k, stride, padding, ka, sa,
                          &ow)) {
    return *e;
  }
  Lowering l;
  l.instruction = "conv2d";
  l.shape = {out, oh, ow};
  l.attrs["stride"] = double(stride);
  l.attrs["padding"] = double(padding);
  // nn.Conv2d's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C kh kw.
  const double fan_in = double(c * k * k);
  if (auto e = Slot(call, def, "weight", "weight", {out, c, k, k},
                    Init::kUniformFanIn, fan_in, &l)) {
    return *e;
  }
  if (call.Bool("bias")) {
    l.params.push_back({"bias", {out}, Init::kUniformFanIn, fan_in, ""});
  }
  return l;
}

std::variant<Lowering, ShapeError> PoolRule(const OpCall& call, ModelOp pool) {
  const ModelOpDef& def = DefOf(pool);
  const char* op = def.name;  // the instruction has the model op's name
  if (auto e = NeedImage(call, op)) return *e;
  const Shape& x = call.values[0];
  const int64_t k = call.Int("kernel"), padding = call.Int("padding");
  // stride = 0: the kernel size, as PyTorch's default.
  const int64_t stride = call.Int("stride") == 0 ? k : call.Int("stride");
  if (2 * padding > k) {
    return Error(def.ArgIndex("padding"),
                 std::string(op) + ": padding " + std::to_string(padding) +
                     " is more than half the kernel " + std::to_string(k),
                 "a window would then hold only padding");
  }
  const int ka = def.ArgIndex("kernel"), sa = def.ArgIndex("stride");
  int64_t oh = 0, ow = 0;
  if (auto e = WindowAxis(op, "height", x[1], k, stride, padding, ka, sa, &oh)) {
    return *e;
  }
  if (auto e = WindowAxis(op, "width", x[2], k, stride, padding, ka, sa, &ow)) {
    return *e;
  }
  Lowering l;
  l.instruction = op;
  l.shape = {x[0], oh, ow};
  l.attrs["kernel_h"] = double(k);
  l.attrs["kernel_w"] = double(k);
  l.attrs["stride"] = double(stride);
  l.attrs["padding"] = double(padding);
  if (pool == ModelOp::kMaxPool2d) {
    l.saved = {{"argmax", l.shape, /*i32=*/true}};
  }
  return l;
}
std::variant<Lowering, ShapeError> MaxPoolRule(const OpCall& call) {
  return PoolRule(call, ModelOp::kMaxPool2d);
}
std::variant<Lowering, ShapeError> AvgPoolRule(const OpCall& call) {
  return PoolRule(call, ModelOp::kAvgPool2d);
}

// The mean over each channel's whole image: one avg_pool2d window.
std::variant<Lowering, ShapeError> GlobalAvgPoolRule(const OpCall& call) {
  if (auto e = NeedImage(call, "global_avg_pool")) return *e;
  const Shape& x = call.values[0];
  Lowering l;
  l.instruction = "avg_pool2d";
  l.shape = {x[0]};
  l.attrs["kernel_h"] = double(x[1]);
  l.attrs["kernel_w"] = double(x[2]);
  l.attrs["stride"] = 1;
  l.attrs["padding"] = 0;
  return l;
}

std::variant<Lowering, ShapeError> FlattenRule(const OpCall& call) {
  Lowering l;
  l.instruction = "reshape";
  l.shape = {Elements(call.values[0])};
  return l;
}

std::variant<Lowering, ShapeError> CrossEntropyRule(const OpCall& call) {
  // The checker has matched the label to the logits (see model_checker):
  // labels hold one class index per row of logits.
  const Shape& logits = call.values[0];
  if (logits.empty()) return Error(0, "cross_entropy logits need a class axis");
  Lowering l;
  l.instruction = "cross_entropy";
  l.shape = {};
  l.saved = {{"probs", logits}};
  l.loss_terms = 1;
  for (size_t i = 0; i + 1 < logits.size(); ++i) l.loss_terms *= logits[i];
  return l;
}

std::variant<Lowering, ShapeError> MseRule(const OpCall& call) {
  if (call.values[0] != call.values[1]) {
    return Error(-1,
                 "mse: shapes differ: prediction " + Named(call, 0) +
                     " but target " + Named(call, 1),
                 "mse compares element-wise: prediction and target need the "
                 "same shape");
  }
  Lowering l;
  l.instruction = "mse";
  l.shape = {};
  l.loss_terms = 1;
  return l;
}

// Linear and the activations, element by element (dropout too).
std::vector<ModelOpDef> LinearAndActivationModelOps() {
  return {
      {ModelOp::kLinear,
       {{"x", Kind::kValue},
        {"out_features", Kind::kInt},
        {"bias", Kind::kBool, "true"},
        {"weight", Kind::kParameter},
        {"init", Kind::kInit, "0"}},
       false,
       "y = x W^T + b over the last axis; <name>.weight [out, in], "
       "<name>.bias [out], U(-1/sqrt(in), 1/sqrt(in)) as nn.Linear; with "
       "init = normal(std), N(0, std^2) and a zero bias, as GPT-2 and Llama",
       LinearRule},
      {ModelOp::kRelu, {{"x", Kind::kValue}}, false, "max(x, 0)", ReluRule},
      {ModelOp::kGelu,
       {{"x", Kind::kValue}, {"approximate", Kind::kString, "\"none\""}},
       false, "GELU, erf form or approximate = \"tanh\" (GPT-2)", GeluRule},
      {ModelOp::kTanh, {{"x", Kind::kValue}}, false, "tanh(x)", TanhRule},
      {ModelOp::kSilu, {{"x", Kind::kValue}}, false, "x sigmoid(x) (SiLU, swish)",
       SiluRule},
      {ModelOp::kSoftmax, {{"x", Kind::kValue}}, false, "softmax over the last axis",
       SoftmaxRule},
      {ModelOp::kDropout, {{"x", Kind::kValue}, {"p", Kind::kFloat, "0.1"}}, false,
       "zeroes each element with probability p in training (scaling the rest "
       "by 1/(1-p)); the same elements whatever the split",
       DropoutRule},
  };
}

// The normalizations, each with its weight (and bias).
std::vector<ModelOpDef> NormalizationModelOps() {
  return {
      {ModelOp::kLayerNorm, {{"x", Kind::kValue}, {"eps", Kind::kFloat, "1e-5"}},
       false,
       "LayerNorm over the last axis; <name>.weight (ones), <name>.bias "
       "(zeros)",
       LayerNormRule},
      {ModelOp::kRmsNorm, {{"x", Kind::kValue}, {"eps", Kind::kFloat, "1e-6"}}, false,
       "RMSNorm over the last axis (Llama's): x / sqrt(mean(x^2) + eps) * weight; "
       "<name>.weight (ones)",
       RmsNormRule},
      {ModelOp::kGroupNorm,
       {{"x", Kind::kValue}, {"groups", Kind::kInt}, {"eps", Kind::kFloat, "1e-5"}},
       false,
       "GroupNorm of an image [C, H, W] or a sequence [T, C] (channels last): each "
       "group of C / groups channels normalized over its elements, as nn.GroupNorm; "
       "<name>.weight (ones), <name>.bias (zeros)",
       GroupNormRule},
  };
}

// Two tensors into one, and the lookups of learned tables.
std::vector<ModelOpDef> CombiningModelOps() {
  return {
      {ModelOp::kAdd, {{"a", Kind::kValue}, {"b", Kind::kValue}}, false,
       "a + b (same shapes); also written a + b", AddRule, "+"},
      {ModelOp::kMul, {{"a", Kind::kValue}, {"b", Kind::kValue}}, false,
       "a * b element-wise (same shapes; SwiGLU's silu(gate) * up); also written a * b",
       MulRule, "*"},
      {ModelOp::kEmbedding,
       {{"ids", Kind::kIndices},
        {"vocab", Kind::kInt},
        {"dim", Kind::kInt},
        {"weight", Kind::kParameter}},
       false, "table lookup; <name>.weight [vocab, dim], N(0, 0.02)",
       EmbeddingRule},
      {ModelOp::kPositionEmbedding, {{"positions", Kind::kInt}, {"dim", Kind::kInt}},
       false,
       "a learned [positions, dim] table, the same for every sample; "
       "<name>.weight, N(0, 0.02)",
       PositionEmbeddingRule},
  };
}

// Attention over a sequence.
std::vector<ModelOpDef> AttentionModelOps() {
  return {
      {ModelOp::kCausalAttention,
       {{"qkv", Kind::kValue},
        {"heads", Kind::kInt},
        {"kv_heads", Kind::kCount, "0"},
        {"rope", Kind::kBool, "false"},
        {"rope_theta", Kind::kFloat, "10000"}},
       false,
       "causal self-attention over q|k|v [T, (heads + 2 kv_heads) d] -> "
       "[T, heads d], softmax(q k^T / sqrt(d)) v per head; kv_heads < heads: "
       "grouped-query (0: heads); rope: rotary positions on q and k "
       "(transformers' rotate_half); stores no [T, T] tensor",
       AttentionRule},
  };
}

// Images [C, H, W]: convolution, pooling, flattening.
std::vector<ModelOpDef> ImageModelOps() {
  return {
      {ModelOp::kConv2d,
       {{"x", Kind::kValue},
        {"out_channels", Kind::kInt},
        {"kernel", Kind::kInt},
        {"stride", Kind::kInt, "1"},
        {"padding", Kind::kCount, "0"},
        {"bias", Kind::kBool, "true"},
        {"weight", Kind::kParameter}},
       false,
       "2-D convolution of an image [C, H, W], square kernel; <name>.weight "
       "[out_channels, C, kernel, kernel], <name>.bias [out_channels], "
       "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as nn.Conv2d",
       Conv2dRule},
      {ModelOp::kMaxPool2d,
       {{"x", Kind::kValue},
        {"kernel", Kind::kInt},
        {"stride", Kind::kCount, "0"},
        {"padding", Kind::kCount, "0"}},
       false,
       "the maximum of each kernel x kernel window of an image (stride 0: "
       "the kernel size)",
       MaxPoolRule},
      {ModelOp::kAvgPool2d,
       {{"x", Kind::kValue},
        {"kernel", Kind::kInt},
        {"stride", Kind::kCount, "0"},
        {"padding", Kind::kCount, "0"}},
       false,
       "the mean of each kernel x kernel window of an image, padding counted "
       "as zeros (stride 0: the kernel size)",
       AvgPoolRule},
      {ModelOp::kGlobalAvgPool, {{"x", Kind::kValue}}, false,
       "the mean of each channel of an image: [C, H, W] -> [C]",
       GlobalAvgPoolRule},
      {ModelOp::kFlatten, {{"x", Kind::kValue}}, false,
       "the same values as one axis: [C, H, W] -> [C H W], in PyTorch's "
       "(row-major) order",
       FlattenRule},
  };
}

// The losses (ModelOpDef::is_loss).
std::vector<ModelOpDef> LossModelOps() {
  return {
      {ModelOp::kCrossEntropy, {{"logits", Kind::kValue}, {"label", Kind::kIndices}},
       true, "mean over every row (token) of -log softmax(logits)[label]",
       CrossEntropyRule},
      {ModelOp::kMse, {{"prediction", Kind::kValue}, {"target", Kind::kValue}}, true,
       "mean squared error", MseRule},
  };
}

// Every model op's definition (AllModelOps puts them in ModelOp order).
std::vector<ModelOpDef> MakeModelOps() {
  std::vector<ModelOpDef> ops;
  using Part = std::vector<ModelOpDef> (*)();
  for (Part part : {LinearAndActivationModelOps, NormalizationModelOps, CombiningModelOps,
                    AttentionModelOps, ImageModelOps, LossModelOps}) {
    for (ModelOpDef& def : part()) ops.push_back(std::move(def));
  }
  return ops;
}

}  // namespace

std::string ShapeText(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::optional<ArgValue> DefaultValue(const ArgDef& def) {
  if (def.default_value == nullptr) return std::nullopt;
  const std::string text = def.default_value;
  switch (def.kind) {
    case ArgDef::Kind::kBool:
      return ArgValue::Bool(text == "true");
    case ArgDef::Kind::kString:
      return ArgValue::String(text.size() >= 2 ? text.substr(1, text.size() - 2)
                                               : text);
    case ArgDef::Kind::kInt:
    case ArgDef::Kind::kCount:
      return ArgValue::Int(std::stoll(text));
    case ArgDef::Kind::kFloat:
    case ArgDef::Kind::kInit:
      return ArgValue::Float(std::stod(text));
    default:
      return std::nullopt;
  }
}

const char* OpCategoryName(OpCategory category) {
  switch (category) {
    case OpCategory::kData: return "data";
    case OpCategory::kMatmul: return "matmul";
    case OpCategory::kElementwise: return "elementwise";
    case OpCategory::kNormalization: return "normalization";
    case OpCategory::kEmbedding: return "embedding";
    case OpCategory::kAttention: return "attention";
    case OpCategory::kConvolution: return "convolution";
    case OpCategory::kPooling: return "pooling";
    case OpCategory::kLoss: return "loss";
    case OpCategory::kCollective: return "collective";
    case OpCategory::kOptimizer: return "optimizer";
  }
  return "?";
}

Precision PrecisionOf(const OpDef& def) {
  switch (def.category) {
    case OpCategory::kMatmul:
    case OpCategory::kAttention:
    case OpCategory::kConvolution:
      return Precision::kLowPrecision;
    case OpCategory::kElementwise:
    case OpCategory::kPooling: {
      // Softmax is an exponential and a sum: f32, as autocast has it.
      const std::string_view name = def.name;
      if (name == "softmax" || name == "softmax_grad") return Precision::kFp32;
      return Precision::kFollow;
    }
    default:
      return Precision::kFp32;
  }
}

const std::vector<OpDef>& AllOps() {
  static const auto* ops = new std::vector<OpDef>(MakeOps());
  return *ops;
}

const OpDef* FindOp(std::string_view name) {
  for (const OpDef& op : AllOps()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

Cost EstimateCost(const OpDef& def, const std::vector<Shape>& inputs,
                  const std::vector<Shape>& outputs) {
  if (def.cost != nullptr) return def.cost(inputs, outputs);
  return {0, Bytes(inputs, outputs)};
}

#define TRAINC_MODEL_OP_NAME(Name, spelling) #spelling,
constexpr const char* kModelOpNames[] = {TRAINC_MODEL_OPS(TRAINC_MODEL_OP_NAME)};
#undef TRAINC_MODEL_OP_NAME
constexpr int kNumModelOps = sizeof(kModelOpNames) / sizeof(const char*);

const char* ModelOpName(ModelOp op) { return kModelOpNames[static_cast<int>(op)]; }

// In ModelOp order, each named by its enumerator (a definition missing
// from MakeModelOps keeps a null rule: op_table_test names it).
const std::vector<ModelOpDef>& AllModelOps() {
  static const auto* ops = [] {
    auto* table = new std::vector<ModelOpDef>(kNumModelOps);
    for (int i = 0; i < kNumModelOps; ++i) (*table)[i].op = static_cast<ModelOp>(i);
    for (ModelOpDef& def : MakeModelOps()) (*table)[static_cast<int>(def.op)] = std::move(def);
    for (ModelOpDef& def : *table) def.name = ModelOpName(def.op);
    return table;
  }();
  return *ops;
}

const ModelOpDef& DefOf(ModelOp op) { return AllModelOps()[static_cast<int>(op)]; }

const ModelOpDef* FindModelOp(std::string_view name) {
  for (const ModelOpDef& op : AllModelOps()) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

const ModelOpDef* FindInfixOp(std::string_view op) {
  for (const ModelOpDef& def : AllModelOps()) {
    if (def.infix != nullptr && op == def.infix) return &def;
  }
  return nullptr;
}

std::vector<std::string> ModelOpNames() {
  std::vector<std::string> names;
  for (const ModelOpDef& op : AllModelOps()) names.push_back(op.name);
  return names;
}

std::string ModelOpDef::Signature() const {
  std::string out = std::string(name) + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) out += ", ";
    out += args[i].name;
    if (args[i].kind == ArgDef::Kind::kParameter) {
      out += " = <parameter>";
    } else if (args[i].kind == ArgDef::Kind::kInit) {
      out += " = normal(std)";
    } else if (args[i].default_value != nullptr) {
      out += std::string(" = ") + args[i].default_value;
    }
  }
  return out + ")";
}

int ModelOpDef::ArgIndex(std::string_view arg) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (arg == args[i].name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace trainc::ops
