#include "runtime/device/kernel_args.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

// The kernel of each instruction op of the op table
// (compiler/ops/op_table.h), which also says its operand counts. cast and
// optimizer name their first kernel; ResolveOne picks between the two.
struct KernelOfInstruction {
  const char* name;
  KernelOp op;
};

#define TRAINC_POINTWISE_ENTRY(op, Name, arity) {#op, KernelOp::k##Name},
#define TRAINC_KERNEL_ENTRY(Name, op) {#op, KernelOp::k##Name},
constexpr KernelOfInstruction kKernels[] = {
    {"load_batch", KernelOp::kNotCompute},
    {"all_reduce", KernelOp::kNotCompute},
    {"reduce_scatter", KernelOp::kNotCompute},
    {"all_gather", KernelOp::kNotCompute},
    TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_ENTRY)
    TRAINC_KERNEL_OPS(TRAINC_KERNEL_ENTRY)
};
#undef TRAINC_POINTWISE_ENTRY
#undef TRAINC_KERNEL_ENTRY

const KernelOfInstruction* FindKernel(absl::string_view name) {
  for (const KernelOfInstruction& candidate : kKernels) {
    if (name == candidate.name) return &candidate;
  }
  return nullptr;
}

// ZeRO-1 (attr shard = 1): the kernel covers one rank's shard of the
// bucket (k.shard floats at rank * k.shard). Returns why not, or "".
std::string ResolveShard(const Bucket& bucket, bool shard, KernelArgs& k) {
  if (!shard) return "";
  if (bucket.shard_elems <= 0) return "attr shard on a bucket without shards";
  if (bucket.shard_elems > k.rows) return "shard larger than its bucket";
  k.shard = bucket.shard_elems;
  return "";
}

// The gradients an optimizer or sum_squares reads: the bucket (slot 0),
// or under ZeRO-2 its gradient shard, which holds this rank's shard alone
// (k.grads_sharded). Returns why not, or "".
std::string ResolveGrads(const Plan& plan, const Bucket& bucket, int id, KernelArgs& k) {
  if (id == bucket.grad_buffer) {
    if (k.rows > plan.buffers[id].bytes / 4) return "bucket larger than its buffer";
    return "";
  }
  if (id != bucket.grad_shard || bucket.grad_shard < 0) {
    return "the gradients are neither its bucket nor its gradient shard";
  }
  if (k.shard == 0) return "a gradient shard needs attr shard";
  if (plan.buffers[id].bytes != k.shard * 4) return "gradient shard of the wrong size";
  k.grads_sharded = true;
  return "";
}

// An op with a workspace (ops::OpDef::workspace): its last output, the
// plan's reservation, as KernelArgs::workspace rather than a y slot.
template <typename Fail>
absl::Status TakeWorkspace(const Plan& plan, const Instruction& instr, const Fail& fail,
                           KernelArgs& k) {
  const size_t last = instr.outputs.size() - 1;
  const Buffer& workspace = plan.buffers[instr.outputs[last]];
  if (workspace.kind != BufferKind::kWorkspace) {
    return fail("the last output is not a workspace buffer");
  }
  k.workspace = reinterpret_cast<char*>(k.y[last]);
  k.y[last] = nullptr;  // at most 4 outputs
  k.workspace_bytes = workspace.bytes;
  return absl::OkStatus();
}

// Convolution and pooling: the geometry from the image-side buffer, the
// weight and the attributes, checked against the other side.
template <typename Fail>
absl::Status ResolveWindow(const Plan& plan, const Instruction& instr,
                           const Fail& fail, KernelArgs& k) {
  auto in_buf = [&](int j) -> const Buffer& { return plan.buffers[instr.inputs[j]]; };
  auto out_buf = [&](int j) -> const Buffer& { return plan.buffers[instr.outputs[j]]; };
  auto attr = [&](const char* name) {
    auto it = instr.attrs.find(name);
    return it == instr.attrs.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  };
  RETURN_IF_ERROR(TakeWorkspace(plan, instr, fail, k));

  WindowGeometry& g = k.window;
  const bool conv = k.op == KernelOp::kConv2d || k.op == KernelOp::kConv2dGradInput ||
                    k.op == KernelOp::kConv2dGradParams;
  // The image side: x for the forward ops and grad_params, dx otherwise.
  const bool image_is_output = k.op == KernelOp::kConv2dGradInput ||
                               k.op == KernelOp::kMaxPool2dGrad ||
                               k.op == KernelOp::kAvgPool2dGrad;
  const Buffer& image = image_is_output ? out_buf(0)
                        : k.op == KernelOp::kConv2dGradParams ? in_buf(1)
                                                              : in_buf(0);
  const Buffer& other = k.op == KernelOp::kConv2d || k.op == KernelOp::kMaxPool2d ||
                                k.op == KernelOp::kAvgPool2d
                            ? out_buf(0)
                            : in_buf(0);
  if (image.shape.size() != 4) return fail("the image is not [N, C, H, W]");
  g.n = image.shape[0];
  g.c = image.shape[1];
  g.h = image.shape[2];
  g.w = image.shape[3];
  g.stride = attr("stride");
  g.padding = attr("padding");
  if (conv) {
    const Buffer& weight = k.op == KernelOp::kConv2dGradParams ? out_buf(0) : in_buf(1);
    if (weight.shape.size() != 4 || weight.shape[1] != g.c) {
      return fail("the weight is not [O, C, kh, kw] for the image's C");
    }
    g.o = weight.shape[0];
    g.kh = weight.shape[2];
    g.kw = weight.shape[3];
    if (k.op == KernelOp::kConv2d) {
      g.has_bias = instr.inputs.size() == 3;
      if (g.has_bias && Elements(in_buf(2)) != g.o) return fail("bias size");
      if (!g.has_bias) k.x[2] = nullptr;
    } else if (k.op == KernelOp::kConv2dGradParams) {
      g.has_bias = instr.outputs.size() == 3;
      if (g.has_bias && Elements(out_buf(1)) != g.o) return fail("db size");
    }
  } else {
    g.o = g.c;
    g.kh = attr("kernel_h");
    g.kw = attr("kernel_w");
  }
  if (g.stride < 1 || g.padding < 0 || g.kh < 1 || g.kw < 1) {
    return fail("attrs stride, padding and the kernel size are missing or out of range");
  }
  const int64_t span_h = g.h + 2 * g.padding - g.kh, span_w = g.w + 2 * g.padding - g.kw;
  if (span_h < 0 || span_w < 0 || span_h % g.stride || span_w % g.stride) {
    return fail("the windows do not tile the padded image");
  }
  g.oh = span_h / g.stride + 1;
  g.ow = span_w / g.stride + 1;
  if (Elements(other) != g.n * g.o * g.oh * g.ow) {
    return fail(absl::StrCat("the output side holds ", Elements(other),
                             " elements, the geometry gives ", g.n, "x", g.o, "x", g.oh,
                             "x", g.ow));
  }
  if (k.op == KernelOp::kMaxPool2d || k.op == KernelOp::kMaxPool2dGrad) {
    const Buffer& argmax = k.op == KernelOp::kMaxPool2d ? out_buf(1) : in_buf(3);
    if (argmax.dtype != DType::kI32 || Elements(argmax) != Elements(other)) {
      return fail("argmax is not i32 shaped like y");
    }
  }
  if (k.op == KernelOp::kMaxPool2dGrad &&
      (Elements(in_buf(1)) != g.n * g.c * g.h * g.w || Elements(in_buf(2)) != Elements(other))) {
    return fail("x or y does not match the geometry");
  }
  return absl::OkStatus();
}

// Fills `k` for `instr` (already checked for arity and ids).
absl::Status ResolveOne(const Plan& plan, const Instruction& instr,
                        char* base, const std::string& device_name,
                        KernelArgs& k) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_name, ": instruction ", instr.id, " (", instr.op,
                     " \"", instr.label, "\"): ", why));
  };
  const int num_buffers = static_cast<int>(plan.buffers.size());
  auto in_buf = [&](int j) -> const Buffer& {
    return plan.buffers[instr.inputs[j]];
  };
  auto out_buf = [&](int j) -> const Buffer& {
    return plan.buffers[instr.outputs[j]];
  };
  // Without an arena (DescribeKernel) every pointer stays null.
  auto fptr = [&](const Buffer& b) {
    return base == nullptr ? nullptr : reinterpret_cast<float*>(base + b.offset);
  };
  for (size_t j = 0; j < instr.inputs.size() && j < std::size(k.x); ++j) {
    k.x[j] = fptr(in_buf(j));
  }
  for (size_t j = 0; j < instr.outputs.size() && j < std::size(k.y); ++j) {
    k.y[j] = fptr(out_buf(j));
  }
  auto attr = [&](const char* name, double fallback) {
    auto it = instr.attrs.find(name);
    return it == instr.attrs.end() ? fallback : it->second;
  };
  k.accumulate = attr("accumulate", 0) != 0;

  switch (k.op) {
    case KernelOp::kLinear:
    case KernelOp::kLinearGelu:
    case KernelOp::kLinearGradInput:
    case KernelOp::kLinearGradInputGelu:
    case KernelOp::kLinearGradParams: {
      // The weight fixes [out, in]; the batch is whatever is left.
      const Buffer& w =
          k.op == KernelOp::kLinearGradParams ? out_buf(0) : in_buf(1);
      if (w.shape.size() != 2) return fail("weight is not [out, in]");
      k.out = w.shape[0];
      k.in = w.shape[1];
      const Buffer& batch_side = in_buf(0);  // x or dy
      const bool forward = k.op == KernelOp::kLinear || k.op == KernelOp::kLinearGelu;
      const int64_t per_row = forward ? k.in : k.out;
      if (per_row == 0 || Elements(batch_side) % per_row != 0) {
        return fail("batch input does not match the weight");
      }
      k.rows = Elements(batch_side) / per_row;
      if (forward) {
        // linear_gelu: y[0] is pre (the linear's output), y[1] its gelu.
        if (Elements(out_buf(0)) != k.rows * k.out) return fail("y size");
        if (k.op == KernelOp::kLinearGelu && Elements(out_buf(1)) != k.rows * k.out) {
          return fail("gelu output size");
        }
        if (instr.inputs.size() < 3) k.x[2] = nullptr;  // no bias
        else if (Elements(in_buf(2)) != k.out) return fail("bias size");
      } else if (k.op == KernelOp::kLinearGradInput) {
        if (Elements(out_buf(0)) != k.rows * k.in) return fail("dx size");
      } else if (k.op == KernelOp::kLinearGradInputGelu) {
        // dy, w, pre -> dpre, workspace (dh where dpre accumulates).
        if (Elements(in_buf(2)) != k.rows * k.in) return fail("pre size");
        if (Elements(out_buf(0)) != k.rows * k.in) return fail("dpre size");
        RETURN_IF_ERROR(TakeWorkspace(plan, instr, fail, k));
      } else {
        if (Elements(in_buf(1)) != k.rows * k.in) return fail("x size");
        if (instr.outputs.size() < 2) k.y[1] = nullptr;  // no bias
        else if (Elements(out_buf(1)) != k.out) return fail("db size");
      }
      return absl::OkStatus();
    }
#define TRAINC_POINTWISE_CASE(op, Name, arity) case KernelOp::k##Name:
    TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_CASE)
#undef TRAINC_POINTWISE_CASE
      k.rows = Elements(in_buf(0));
      for (int id : instr.inputs) {
        if (Elements(plan.buffers[id]) != k.rows) return fail("sizes differ");
      }
      if (Elements(out_buf(0)) != k.rows) return fail("output size");
      return absl::OkStatus();
    case KernelOp::kLayerNorm:
    case KernelOp::kLayerNormGradInput:
    case KernelOp::kLayerNormGradParams:
    case KernelOp::kAddLayerNorm:
    case KernelOp::kRmsNorm:
    case KernelOp::kRmsNormGradInput:
    case KernelOp::kRmsNormGradParams: {
      // The weight (or its gradient) is [d]; rows are the rest of x (of
      // add_layernorm: of a).
      const Buffer& per_feature =
          k.op == KernelOp::kLayerNorm || k.op == KernelOp::kRmsNorm ? in_buf(1)
          : k.op == KernelOp::kLayerNormGradInput                   ? in_buf(2)
          : k.op == KernelOp::kRmsNormGradInput                     ? in_buf(2)
          : k.op == KernelOp::kAddLayerNorm                         ? in_buf(2)
                                                                    : out_buf(0);
      k.in = Elements(per_feature);
      if (k.in == 0 || Elements(in_buf(0)) % k.in != 0) {
        return fail("x is not [B, d]");
      }
      k.rows = Elements(in_buf(0)) / k.in;
      k.eps = static_cast<float>(attr("eps", 1e-5));
      if (k.op == KernelOp::kAddLayerNorm) {
        // a, b, weight, bias -> sum, y, mean, rstd.
        const int64_t n = k.rows * k.in;
        if (Elements(in_buf(1)) != n) return fail("a and b differ in size");
        if (Elements(in_buf(3)) != k.in) return fail("bias size");
        if (Elements(out_buf(0)) != n || Elements(out_buf(1)) != n) {
          return fail("sum or y is not the size of a");
        }
        if (Elements(out_buf(2)) != k.rows || Elements(out_buf(3)) != k.rows) {
          return fail("mean or rstd is not one per row");
        }
      }
      return absl::OkStatus();
    }
    case KernelOp::kCrossEntropy:
    case KernelOp::kCrossEntropyGrad:
    case KernelOp::kCrossEntropyFused: {
      const Buffer& label = in_buf(1);
      if (label.dtype != DType::kI32) return fail("label is not i32");
      k.labels = reinterpret_cast<const int32_t*>(fptr(label));
      k.rows = Elements(label);
      if (k.rows == 0 || Elements(in_buf(0)) % k.rows != 0) {
        return fail("logits are not [B, C]");
      }
      k.in = Elements(in_buf(0)) / k.rows;
      if (k.op != KernelOp::kCrossEntropyGrad) {
        if (Elements(out_buf(0)) != 1) return fail("loss_sum is not [1]");
        if (Elements(out_buf(1)) != k.rows * k.in) return fail("probs size");
      }
      if (k.op != KernelOp::kCrossEntropy) {
        if (!instr.attrs.count("scale")) return fail("missing attr scale");
        k.loss_scale = static_cast<float>(attr("scale", 0));
      }
      return absl::OkStatus();
    }
    case KernelOp::kMse:
    case KernelOp::kMseGrad: {
      const Buffer& pred = in_buf(0);
      if (pred.shape.empty() || pred.shape[0] == 0) return fail("pred shape");
      k.rows = pred.shape[0];
      k.in = Elements(pred) / k.rows;
      if (Elements(in_buf(1)) != Elements(pred)) return fail("target size");
      if (k.op == KernelOp::kMseGrad) {
        if (!instr.attrs.count("scale")) return fail("missing attr scale");
        k.loss_scale = static_cast<float>(attr("scale", 0));
      } else if (Elements(out_buf(0)) != 1) {
        return fail("loss_sum is not [1]");
      }
      return absl::OkStatus();
    }
    case KernelOp::kDropout:
    case KernelOp::kDropoutGrad: {
      const Buffer& x = in_buf(0);
      if (x.shape.empty() || x.shape[0] == 0) return fail("x has no batch axis");
      if (Elements(out_buf(0)) != Elements(x)) return fail("output size");
      k.rows = x.shape[0];
      k.in = Elements(x) / k.rows;
      k.dropout.p = static_cast<float>(attr("p", -1));
      if (!(k.dropout.p >= 0 && k.dropout.p < 1)) return fail("attr p outside [0, 1)");
      k.dropout.key = static_cast<uint32_t>(attr("key", 0));
      k.dropout.micro = std::max(instr.micro_step, 0);
      return absl::OkStatus();
    }
    case KernelOp::kSoftmax:
    case KernelOp::kSoftmaxGrad: {
      const Buffer& x = in_buf(0);
      if (x.shape.empty() || x.shape.back() == 0) return fail("x has no axis");
      k.in = x.shape.back();
      k.rows = Elements(x) / k.in;
      for (int id : instr.inputs) {
        if (Elements(plan.buffers[id]) != Elements(x)) return fail("sizes differ");
      }
      if (Elements(out_buf(0)) != Elements(x)) return fail("output size");
      return absl::OkStatus();
    }
    case KernelOp::kEmbedding:
    case KernelOp::kEmbeddingGrad: {
      const bool forward = k.op == KernelOp::kEmbedding;
      const Buffer& ids = forward ? in_buf(0) : in_buf(1);
      const Buffer& table = forward ? in_buf(1) : out_buf(0);
      if (ids.dtype != DType::kI32) return fail("ids are not i32");
      if (table.shape.size() != 2) return fail("table is not [V, C]");
      k.ids = reinterpret_cast<const int32_t*>(fptr(ids));
      k.rows = Elements(ids);
      k.in = table.shape[0];
      k.out = table.shape[1];
      const Buffer& rows = forward ? out_buf(0) : in_buf(0);
      if (Elements(rows) != k.rows * k.out) return fail("y is not [ids, C]");
      if (!forward) k.x[1] = nullptr;  // ids are k.ids
      return absl::OkStatus();
    }
    case KernelOp::kPositionEmbedding:
    case KernelOp::kPositionEmbeddingGrad: {
      const bool forward = k.op == KernelOp::kPositionEmbedding;
      const Buffer& table = forward ? in_buf(0) : out_buf(0);
      const Buffer& batched = forward ? out_buf(0) : in_buf(0);
      if (table.shape.size() != 2) return fail("table is not [T, C]");
      k.in = table.shape[0];
      k.out = table.shape[1];
      if (Elements(table) == 0 || Elements(batched) % Elements(table) != 0) {
        return fail("y is not [B, T, C]");
      }
      k.rows = Elements(batched) / Elements(table);
      return absl::OkStatus();
    }
    case KernelOp::kAttention:
    case KernelOp::kAttentionGrad: {
      // forward: qkv -> y, lse; backward: dy, qkv, y, lse -> dqkv, delta.
      const bool forward = k.op == KernelOp::kAttention;
      const Buffer& qkv = forward ? in_buf(0) : in_buf(1);
      const Buffer& y = forward ? out_buf(0) : in_buf(2);
      const Buffer& lse = forward ? out_buf(1) : in_buf(3);
      attention::Geometry& g = k.attention;
      g = attention::FromAttrs(instr.attrs);
      if (g.heads <= 0 || g.kv_heads <= 0 || g.heads % g.kv_heads != 0) {
        return fail("attrs heads / kv_heads are not positive with kv_heads | heads");
      }
      if (qkv.shape.size() != 3 || qkv.shape[2] % (g.heads + 2 * g.kv_heads) != 0) {
        return fail("qkv is not [B, T, (heads + 2 kv_heads) d]");
      }
      g.batch = qkv.shape[0];
      g.seq = qkv.shape[1];
      g.head_dim = qkv.shape[2] / (g.heads + 2 * g.kv_heads);
      if (g.rope && g.head_dim % 2 != 0) return fail("rope needs an even head size");
      k.rows = g.batch;
      k.in = g.seq;
      k.out = g.OutWidth();
      const int64_t rows = g.batch * g.heads * g.seq;
      if (Elements(y) != g.batch * g.seq * g.OutWidth()) return fail("y is not [B, T, H d]");
      if (Elements(lse) != rows || lse.dtype != DType::kF32) {
        return fail("lse is not f32 [B, H, T]");
      }
      if (!forward) {
        if (Elements(in_buf(0)) != Elements(y)) return fail("dy size");
        if (Elements(out_buf(0)) != Elements(qkv)) return fail("dqkv size");
        if (Elements(out_buf(1)) != rows || out_buf(1).dtype != DType::kF32) {
          return fail("delta is not f32 [B, H, T]");
        }
      }
      return absl::OkStatus();
    }
    case KernelOp::kConv2d:
    case KernelOp::kConv2dGradInput:
    case KernelOp::kConv2dGradParams:
    case KernelOp::kMaxPool2d:
    case KernelOp::kMaxPool2dGrad:
    case KernelOp::kAvgPool2d:
    case KernelOp::kAvgPool2dGrad:
      return ResolveWindow(plan, instr, fail, k);
    case KernelOp::kReshape:
      k.rows = Elements(in_buf(0));
      if (Elements(out_buf(0)) != k.rows) return fail("sizes differ");
      return absl::OkStatus();
    case KernelOp::kCastToBf16:
    case KernelOp::kCastToF32: {
      const DType from = in_buf(0).dtype, to = out_buf(0).dtype;
      if (from == DType::kF32 && to == DType::kBF16) {
        k.op = KernelOp::kCastToBf16;
      } else if (from == DType::kBF16 && to == DType::kF32) {
        k.op = KernelOp::kCastToF32;
      } else {
        return fail(absl::StrCat("no cast from ", DTypeName(from), " to ", DTypeName(to)));
      }
      k.rows = Elements(in_buf(0));
      if (Elements(out_buf(0)) != k.rows) return fail("sizes differ");
      return absl::OkStatus();
    }
    case KernelOp::kSumSquares: {
      const int b = static_cast<int>(attr("bucket", -1));
      if (b < 0 || b >= static_cast<int>(plan.buckets.size())) {
        return fail("attr bucket out of range");
      }
      // Slot 0 only: deterministic mode leaves the reduced sum there.
      k.rows = plan.buckets[b].bytes / 4;
      if (Elements(out_buf(0)) != 1) return fail("grad_sq is not [1]");
      std::string why = ResolveShard(plan.buckets[b], attr("shard", 0) != 0, k);
      if (why.empty()) why = ResolveGrads(plan, plan.buckets[b], instr.inputs[0], k);
      return why.empty() ? absl::OkStatus() : fail(why);
    }
    case KernelOp::kAdamW:
    case KernelOp::kSgd: {
      const int b = static_cast<int>(attr("bucket", -1));
      if (b < 0 || b >= static_cast<int>(plan.buckets.size())) {
        return fail("attr bucket out of range");
      }
      const Bucket& bucket = plan.buckets[b];
      if (bucket.param_span < 0 || bucket.param_span >= num_buffers ||
          bucket.grad_buffer < 0 || bucket.grad_buffer >= num_buffers) {
        return fail("bucket has no parameter span or gradient buffer");
      }
      k.optimizer.weight_decay = bucket.weight_decay;
      // With clipping or skip_nonfinite the step's squared gradient norm is
      // the last operand (a step scalar).
      const double clip = attr("clip", -1);
      const Buffer& last = in_buf(static_cast<int>(instr.inputs.size()) - 1);
      if (clip > 0 && last.kind != BufferKind::kStepScalar) {
        return fail("clipping needs the grad_sq step scalar as last input");
      }
      if (last.kind == BufferKind::kStepScalar) {
        if (Elements(last) != 1) return fail("grad_sq is not [1]");
        k.optimizer.grad_sq = fptr(last);
        k.optimizer.clip_norm = static_cast<float>(std::max(clip, 0.0));
      }
      const Buffer& params = plan.buffers[bucket.param_span];
      k.rows = Elements(params);
      if (bucket.bytes < params.bytes) {
        return fail("bucket gradient slot smaller than its parameters");
      }
      std::string why = ResolveShard(bucket, attr("shard", 0) != 0, k);
      if (why.empty() && instr.inputs.size() < 2) why = "no gradients";
      if (why.empty()) why = ResolveGrads(plan, bucket, instr.inputs[1], k);
      if (!why.empty()) return fail(why);
      // ZeRO-3 updates the rank's parameter shard, as its gradient shard.
      if (instr.inputs[0] == bucket.param_shard && bucket.param_shard >= 0) {
        if (k.shard == 0 || !k.grads_sharded) {
          return fail("a parameter shard needs attr shard and the gradient shard");
        }
        if (in_buf(0).bytes != k.shard * 4) return fail("parameter shard of the wrong size");
        k.params_sharded = true;
        k.y[0] = fptr(in_buf(0));
      } else if (instr.inputs[0] != bucket.param_span) {
        return fail("the parameters are neither its bucket's span nor its shard");
      } else {
        // Deterministic mode leaves the reduced sum in slot 0, which starts
        // at the bucket's offset: the same pointer either way.
        k.y[0] = fptr(params);
      }
      k.x[0] = fptr(in_buf(1));
      size_t want_state;
      switch (plan.optimizer.kind) {
        case OptimizerKind::kAdamW:
          k.op = KernelOp::kAdamW;
          want_state = 2;
          break;
        case OptimizerKind::kSgd:
          k.op = KernelOp::kSgd;
          want_state = plan.optimizer.momentum != 0 ? 1 : 0;
          break;
        default:
          return fail(absl::StrCat("unknown optimizer kind ",
                                   static_cast<int>(plan.optimizer.kind)));
      }
      if (bucket.state_spans.size() != want_state) {
        return fail(absl::StrCat("bucket has ", bucket.state_spans.size(),
                                 " state spans, ", EnumName(plan.optimizer.kind),
                                 " needs ", want_state));
      }
      for (size_t s = 0; s < want_state; ++s) {
        const int id = bucket.state_spans[s];
        if (id < 0 || id >= num_buffers ||
            Elements(plan.buffers[id]) != (k.shard > 0 ? k.shard : k.rows)) {
          return fail("state span does not match the parameter span");
        }
        k.optimizer.state[s] = fptr(plan.buffers[id]);
      }
      return absl::OkStatus();
    }
    case KernelOp::kNotCompute:
    case KernelOp::kFused:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

bool OverlapsOperands(const Plan& plan, const Buffer& h, const Instruction& instr) {
  for (const std::vector<int>* ids : {&instr.inputs, &instr.outputs}) {
    for (int id : *ids) {
      const Buffer& b = plan.buffers[id];
      if (b.offset < h.offset + h.bytes && h.offset < b.offset + b.bytes) return true;
    }
  }
  return false;
}

namespace {

// Fuses "y = linear(...); h = act(y)" when nothing can observe y between
// the two: they are adjacent and no event separates them; and h, which the
// fused kernel writes while the linear still reads its operands, shares no
// bytes with them (the memory plan may give h the bytes of an operand the
// linear reads last: ZeRO-3's gathered bias).
void FuseLinearActivations(const Plan& plan, std::vector<KernelArgs>& kernels) {
  for (size_t i = 0; i + 1 < kernels.size(); ++i) {
    KernelArgs& lin = kernels[i];
    KernelArgs& act = kernels[i + 1];
    const Instruction& a = plan.instructions[i];
    const Instruction& b = plan.instructions[i + 1];
    // Under bf16 the activation reads the rounded y: not fusible.
    if (lin.num_bf16 > 0 || act.num_bf16 > 0) continue;
    if (lin.op != KernelOp::kLinear || !a.record_events.empty() ||
        !b.wait_events.empty() || b.inputs.empty() ||
        b.inputs[0] != a.outputs[0] || b.outputs[0] == a.outputs[0] ||
        OverlapsOperands(plan, plan.buffers[b.outputs[0]], a)) {
      continue;
    }
    Activation kind;
    if (act.op == KernelOp::kRelu) kind = Activation::kRelu;
    else if (act.op == KernelOp::kGelu) kind = Activation::kGelu;
    else if (act.op == KernelOp::kTanh) kind = Activation::kTanh;
    else continue;
    lin.act = kind;
    lin.y[1] = act.y[0];
    act.op = KernelOp::kFused;
  }
}

// precision = bf16: the operands a kernel reads or writes as bf16, to be
// staged in f32 around it. A cast converts by itself; the optimizer and
// the other persistent-state ops never see bf16 (plan validation).
template <typename Fail>
absl::Status RecordBf16Operands(const Plan& plan, const Instruction& instr, char* base,
                                const Fail& fail, KernelArgs& k) {
  if (k.op == KernelOp::kCastToBf16 || k.op == KernelOp::kCastToF32) return absl::OkStatus();
  auto add = [&](const Buffer& b, float* slot, bool output) {
    Bf16Operand& o = k.bf16[k.num_bf16++];
    o.bf16 = slot;
    o.elems = Elements(b);
    o.output = output;
  };
  for (size_t j = 0; j < instr.inputs.size(); ++j) {
    const Buffer& b = plan.buffers[instr.inputs[j]];
    if (b.dtype != DType::kBF16) continue;
    if (j >= std::size(k.x) ||
        (base != nullptr && k.x[j] != reinterpret_cast<float*>(base + b.offset))) {
      return fail(absl::StrCat("input ", j, " (", b.name, ") is bf16, which this op cannot read"));
    }
    add(b, const_cast<float*>(k.x[j]), false);
  }
  for (size_t j = 0; j < instr.outputs.size(); ++j) {
    const Buffer& b = plan.buffers[instr.outputs[j]];
    if (b.dtype != DType::kBF16) continue;
    if (j >= std::size(k.y) ||
        (base != nullptr && k.y[j] != reinterpret_cast<float*>(base + b.offset))) {
      return fail(absl::StrCat("output ", j, " (", b.name, ") is bf16, which this op cannot write"));
    }
    add(b, k.y[j], true);
  }
  return absl::OkStatus();
}

// Checks `instr` against the op table (arity, ids, stream) and fills `k`;
// `base` null: no arena, pointers stay null.
absl::Status ResolveInstruction(const Plan& plan, const Instruction& instr,
                                char* base, const std::string& device_name,
                                KernelArgs& k) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        device_name, ": instruction ", instr.id, " (", instr.op, " \"", instr.label,
        "\"): ", why));
  };
  if (instr.id < 0 || instr.id >= static_cast<int>(plan.instructions.size()) ||
      &plan.instructions[instr.id] != &instr) {
    return fail("id != its index");
  }
  const ops::OpDef* def = ops::FindOp(instr.op);
  const KernelOfInstruction* kernel = FindKernel(instr.op);
  if (def == nullptr || kernel == nullptr) {
    return fail(def == nullptr ? "unknown op" : "no kernel for this op");
  }
  const int n_in = static_cast<int>(instr.inputs.size());
  const int n_out = static_cast<int>(instr.outputs.size());
  if (n_in < def->min_inputs || (def->max_inputs >= 0 && n_in > def->max_inputs) ||
      n_out < def->min_outputs || (def->max_outputs >= 0 && n_out > def->max_outputs)) {
    return fail(absl::StrCat("has ", n_in, " inputs and ", n_out,
                             " outputs; ", def->name, " takes ", def->doc));
  }
  const int num_buffers = static_cast<int>(plan.buffers.size());
  for (int id : instr.inputs) {
    if (id < 0 || id >= num_buffers) return fail("input id out of range");
  }
  for (int id : instr.outputs) {
    if (id < 0 || id >= num_buffers) return fail("output id out of range");
  }
  k.op = kernel->op;
  if (k.op == KernelOp::kNotCompute) return absl::OkStatus();
  if (instr.stream != Stream::kCompute) return fail("not on compute stream");
  RETURN_IF_ERROR(ResolveOne(plan, instr, base, device_name, k));
  return RecordBf16Operands(plan, instr, base, fail, k);
}

}  // namespace

absl::StatusOr<KernelArgs> DescribeKernel(const Plan& plan, const Instruction& instr,
                                          const std::string& device_name) {
  KernelArgs k;
  RETURN_IF_ERROR(ResolveInstruction(plan, instr, nullptr, device_name, k));
  return k;
}

namespace {

// An operand written over an earlier one (an in-place output over its
// input, ops::OpDef::in_place) shares that operand's staging: the index of
// the earlier operand, or -1.
int SharedStaging(const KernelArgs& k, int i) {
  for (int j = 0; j < i; ++j) {
    if (!k.bf16[j].native && k.bf16[j].bf16 == k.bf16[i].bf16 &&
        k.bf16[j].elems == k.bf16[i].elems) {
      return j;
    }
  }
  return -1;
}

}  // namespace

int64_t Bf16StagingBytes(const KernelArgs& k) {
  int64_t bytes = 0;
  for (int i = 0; i < k.num_bf16; ++i) {
    if (!k.bf16[i].native && SharedStaging(k, i) < 0) {
      bytes += (k.bf16[i].elems * 4 + 63) / 64 * 64;
    }
  }
  return bytes;
}

int64_t Bf16StagingBytes(const std::vector<KernelArgs>& kernels) {
  int64_t most = 0;
  for (const KernelArgs& k : kernels) most = std::max(most, Bf16StagingBytes(k));
  return most;
}

void AssignBf16Staging(std::vector<KernelArgs>& kernels, char* staging) {
  for (KernelArgs& k : kernels) AssignBf16Staging(k, staging);
}

void AssignBf16Staging(KernelArgs& k, char* staging) {
  int64_t at = 0;
  for (int i = 0; i < k.num_bf16; ++i) {
    Bf16Operand& o = k.bf16[i];
    if (o.native) continue;  // read and written as bf16 by the kernel
    const int shared = SharedStaging(k, i);
    if (shared >= 0) {
      o.f32 = k.bf16[shared].f32;
    } else {
      o.f32 = reinterpret_cast<float*>(staging + at);
      at += (o.elems * 4 + 63) / 64 * 64;
    }
    // Point the kernel's own operand slot (the one that held the bf16
    // address) at the staging.
    for (auto& x : k.x) {
      if (x == o.bf16 && !o.output) x = o.f32;
    }
    for (auto& y : k.y) {
      if (y == o.bf16 && o.output) y = o.f32;
    }
  }
}

int64_t LinearGradInputGeluWorkspaceBytes(const KernelArgs& k) {
  return k.accumulate ? k.rows * k.in * static_cast<int64_t>(sizeof(float)) : 0;
}

const Bf16Operand* StagedOutput(const KernelArgs& k, int j) {
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output && o.f32 != nullptr && o.f32 == k.y[j]) return &o;
  }
  return nullptr;
}

absl::Status MissingKernelError(const Instruction& instr, KernelOp op,
                                const std::string& device_name) {
  return absl::UnimplementedError(absl::StrCat(
      device_name, ": no kernel for op ", instr.op, " (", KernelOpName(op),
      ") on this backend; instruction ", instr.id, " \"", instr.label, "\" needs it"));
}

bool IsWindowOp(KernelOp op) {
  switch (op) {
    case KernelOp::kConv2d:
    case KernelOp::kConv2dGradInput:
    case KernelOp::kConv2dGradParams:
    case KernelOp::kMaxPool2d:
    case KernelOp::kMaxPool2dGrad:
    case KernelOp::kAvgPool2d:
    case KernelOp::kAvgPool2dGrad:
      return true;
    default:
      return false;
  }
}

bool IsKernelOp(absl::string_view op) {
  const KernelOfInstruction* kernel = FindKernel(op);
  return kernel != nullptr && kernel->op != KernelOp::kNotCompute;
}

absl::StatusOr<std::vector<KernelArgs>> ResolveKernels(
    const Plan& plan, char* arena, int64_t arena_bytes,
    const std::string& device_name) {
  if (plan.arena_bytes > arena_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(device_name, ": plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", arena_bytes));
  }
  for (const Buffer& b : plan.buffers) {
    if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          device_name, ": buffer ", b.name, " lies outside the arena"));
    }
  }
  std::vector<KernelArgs> kernels(plan.instructions.size());
  for (size_t i = 0; i < plan.instructions.size(); ++i) {
    RETURN_IF_ERROR(ResolveInstruction(plan, plan.instructions[i], arena, device_name,
                                       kernels[i]));
  }
  FuseLinearActivations(plan, kernels);
  return kernels;
}

}  // namespace trainc
