#include <algorithm>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "compiler/ops/unit_family.h"
#include "compiler/util/status_macros.h"
#include "runtime/device/resolve.h"

namespace trainc::resolve {

absl::Status Resolving::Fail(const std::string& why) const {
  return absl::InvalidArgumentError(absl::StrCat(device_name, ": instruction ", instr.id, " (",
                                                 instr.op, " \"", instr.label, "\"): ", why));
}

namespace {

// ZeRO-1 (attr shard = 1): the kernel covers one rank's shard of the
// bucket (k.shard floats at rank * k.shard). Returns why not, or "".
std::string ResolveShard(const Bucket& bucket, bool shard, KernelArgs& k) {
  if (!shard) return "";
  if (bucket.shard_elems <= 0) return "attr shard on a bucket without shards";
  if (bucket.shard_elems > k.rows) return "shard larger than its bucket";
  k.shard = bucket.shard_elems;
  return "";
}

// The gradients an optimizer reads (sum_squares': its family's GradsOf): the bucket (slot 0),
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
absl::Status TakeWorkspace(const Resolving& r, KernelArgs& k) {
  const size_t last = r.instr.outputs.size() - 1;
  const Buffer& workspace = r.out(static_cast<int>(last));
  if (workspace.kind != BufferKind::kWorkspace) {
    return r.Fail("the last output is not a workspace buffer");
  }
  k.workspace = reinterpret_cast<char*>(k.y[last]);
  k.y[last] = nullptr;  // at most 4 outputs
  k.workspace_bytes = workspace.bytes;
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolvePointwise(const Resolving& r, KernelArgs& k) {
  k.rows = Elements(r.in(0));
  for (int id : r.instr.inputs) {
    if (Elements(r.plan.buffers[id]) != k.rows) return r.Fail("sizes differ");
  }
  if (Elements(r.out(0)) != k.rows) return r.Fail("output size");
  return absl::OkStatus();
}

namespace {

// The optimizer's bucket, step scalar, gradients and parameters.
absl::Status ResolveOptimizerOperands(const Resolving& r, const Bucket& bucket, KernelArgs& k) {
  if (bucket.param_span < 0 || bucket.param_span >= r.num_buffers() ||
      bucket.grad_buffer < 0 || bucket.grad_buffer >= r.num_buffers()) {
    return r.Fail("bucket has no parameter span or gradient buffer");
  }
  k.optimizer.weight_decay = bucket.weight_decay;
  // With clipping or skip_nonfinite the step's squared gradient norm is
  // the last operand (a step scalar).
  const double clip = r.attr("clip", -1);
  const Buffer& last = r.in(static_cast<int>(r.instr.inputs.size()) - 1);
  if (clip > 0 && last.kind != BufferKind::kStepScalar) {
    return r.Fail("clipping needs the grad_sq step scalar as last input");
  }
  if (last.kind == BufferKind::kStepScalar) {
    if (Elements(last) != 1) return r.Fail("grad_sq is not [1]");
    k.optimizer.grad_sq = r.ptr(last);
    k.optimizer.clip_norm = static_cast<float>(std::max(clip, 0.0));
  }
  const Buffer& params = r.plan.buffers[bucket.param_span];
  k.rows = Elements(params);
  if (bucket.bytes < params.bytes) {
    return r.Fail("bucket gradient slot smaller than its parameters");
  }
  std::string why = ResolveShard(bucket, r.attr("shard", 0) != 0, k);
  if (why.empty() && r.instr.inputs.size() < 2) why = "no gradients";
  if (why.empty()) why = ResolveGrads(r.plan, bucket, r.instr.inputs[1], k);
  if (!why.empty()) return r.Fail(why);
  // ZeRO-3 updates the rank's parameter shard, as its gradient shard.
  if (r.instr.inputs[0] == bucket.param_shard && bucket.param_shard >= 0) {
    if (k.shard == 0 || !k.grads_sharded) {
      return r.Fail("a parameter shard needs attr shard and the gradient shard");
    }
    if (r.in(0).bytes != k.shard * 4) return r.Fail("parameter shard of the wrong size");
    k.params_sharded = true;
    k.y[0] = r.ptr(r.in(0));
  } else if (r.instr.inputs[0] != bucket.param_span) {
    return r.Fail("the parameters are neither its bucket's span nor its shard");
  } else {
    // Deterministic mode leaves the reduced sum in slot 0, which starts
    // at the bucket's offset: the same pointer either way.
    k.y[0] = r.ptr(params);
  }
  k.x[0] = r.ptr(r.in(1));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveOptimizer(const Resolving& r, KernelArgs& k) {
  const int b = static_cast<int>(r.attr("bucket", -1));
  if (b < 0 || b >= static_cast<int>(r.plan.buckets.size())) {
    return r.Fail("attr bucket out of range");
  }
  const Bucket& bucket = r.plan.buckets[b];
  RETURN_IF_ERROR(ResolveOptimizerOperands(r, bucket, k));
  size_t want_state;
  switch (r.plan.optimizer.kind) {
    case OptimizerKind::kAdamW:
      k.op = KernelOp::kAdamW;
      want_state = 2;
      break;
    case OptimizerKind::kSgd:
      k.op = KernelOp::kSgd;
      want_state = r.plan.optimizer.momentum != 0 ? 1 : 0;
      break;
    default:
      return r.Fail(absl::StrCat("unknown optimizer kind ",
                               static_cast<int>(r.plan.optimizer.kind)));
  }
  if (bucket.state_spans.size() != want_state) {
    return r.Fail(absl::StrCat("bucket has ", bucket.state_spans.size(),
                             " state spans, ", EnumName(r.plan.optimizer.kind),
                             " needs ", want_state));
  }
  for (size_t s = 0; s < want_state; ++s) {
    const int id = bucket.state_spans[s];
    if (id < 0 || id >= r.num_buffers() ||
        Elements(r.plan.buffers[id]) != (k.shard > 0 ? k.shard : k.rows)) {
      return r.Fail("state span does not match the parameter span");
    }
    k.optimizer.state[s] = r.ptr(r.plan.buffers[id]);
  }
  return absl::OkStatus();
}

// The operands a unit family's kernels read or write as f32 under any
// precision (compiler/ops/unit_family.h) are f32 tensors.
template <typename Family>
absl::Status CheckF32Operands(const Resolving& r, KernelOp op) {
  if constexpr (ops::unit::HasF32Operands<Family>::value) {
    for (bool output : {false, true}) {
      const std::vector<int>& ids = output ? r.instr.outputs : r.instr.inputs;
      for (size_t j = 0; j < ids.size(); ++j) {
        const Buffer& b = r.plan.buffers[ids[j]];
        if (Family::F32Operand(op, output, static_cast<int>(j)) && b.dtype != DType::kF32) {
          return r.Fail(absl::StrCat(output ? "output " : "input ", j, " (", b.name,
                                     ") is not f32"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// A unit family's sizes: its Resolve (compiler/ops/kernel_families.h) over
// the operands' shapes, into KernelArgs::<snake>; and, where its Args asks,
// which outputs are bf16 tensors.
template <typename Family>
absl::Status ResolveUnit(const Resolving& r, KernelArgs& k, typename Family::Args& args) {
  const ops::unit::PlanFacts facts = UnitFactsOf(r.plan, r.instr);
  k.op = ops::unit::KernelOfUnit<Family>(k.op, facts);
  // The i32 operand, if any (compiler/ops/unit_family.h): read through
  // Args, not its x slot.
  const int ids = ops::unit::IdsInputOf<Family>(k.op);
  if (ids >= 0) {
    if (r.in(ids).dtype != DType::kI32) return r.Fail("ids are not i32");
    if constexpr (ops::unit::HasIds<Family>::value) {
      args.*Family::kIds = reinterpret_cast<const int32_t*>(r.ptr(r.in(ids)));
    }
    k.x[ids] = nullptr;
  }
  std::vector<std::vector<int64_t>> in, out;
  for (int id : r.instr.inputs) in.push_back(r.plan.buffers[id].shape);
  for (int id : r.instr.outputs) out.push_back(r.plan.buffers[id].shape);
  const std::string why =
      ops::unit::ResolveUnit<Family>(k.op, in, out, r.instr.attrs, facts, &args);
  if (!why.empty()) return r.Fail(why);
  RETURN_IF_ERROR(CheckF32Operands<Family>(r, k.op));
  if constexpr (ops::unit::HasBf16Outputs<typename Family::Args>::value) {
    args.bf16_outputs = 0;
    for (size_t j = 0; j < r.instr.outputs.size() && j < 32; ++j) {
      if (r.out(static_cast<int>(j)).dtype == DType::kBF16) args.bf16_outputs |= 1u << j;
    }
  }
  return absl::OkStatus();
}
#define TRAINC_UNIT_RESOLVER(Fam, snake)                             \
  absl::Status Resolve##Fam(const Resolving& r, KernelArgs& k) {         \
    return ResolveUnit<ops::Fam##Family>(r, k, k.snake);              \
  }
TRAINC_UNIT_FAMILIES(TRAINC_UNIT_RESOLVER)
#undef TRAINC_UNIT_RESOLVER

// The linear family's sizes (ops::LinearFamily::Resolve) into
// KernelArgs::linear (an absent bias or db leaves its slot null, as every
// absent operand's); linear_grad_input_gelu's last output is its workspace.
absl::Status ResolveLinear(const Resolving& r, KernelArgs& k) {
  RETURN_IF_ERROR(ResolveUnit<ops::LinearFamily>(r, k, k.linear));
  if (k.op == KernelOp::kLinearGradInputGelu) RETURN_IF_ERROR(TakeWorkspace(r, k));
  return absl::OkStatus();
}

// Convolution and pooling: the family's Resolve (compiler/ops/window_family.h)
// over the operands' shapes; the last output is the workspace, argmax i32.
absl::Status ResolveWindow(const Resolving& r, KernelArgs& k) {
  RETURN_IF_ERROR(TakeWorkspace(r, k));
  RETURN_IF_ERROR(ResolveUnit<ops::WindowFamily>(r, k, k.window));
  if (k.op == KernelOp::kMaxPool2d || k.op == KernelOp::kMaxPool2dGrad) {
    const Buffer& argmax = k.op == KernelOp::kMaxPool2d ? r.out(1) : r.in(3);
    const WindowGeometry& g = k.window;
    if (argmax.dtype != DType::kI32 || Elements(argmax) != g.n * g.o * g.oh * g.ow) {
      return r.Fail("argmax is not i32 shaped like y");
    }
  }
  return absl::OkStatus();
}

Resolver ResolverOf(KernelOp op) {
#define TRAINC_RESOLVER_ENTRY(Family) &Resolve##Family,
  static constexpr Resolver kResolvers[] = {nullptr,
                                            TRAINC_KERNEL_FAMILIES(TRAINC_RESOLVER_ENTRY)};
#undef TRAINC_RESOLVER_ENTRY
  return kResolvers[static_cast<int>(FamilyOf(op))];
}

}  // namespace trainc::resolve
