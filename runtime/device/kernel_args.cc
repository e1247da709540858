#include "runtime/device/kernel_args.h"

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

struct OpInfo {
  const char* name;
  KernelOp op;
  int inputs;   // minimum
  int outputs;  // minimum
};

constexpr OpInfo kOps[] = {
    {"load_batch", KernelOp::kNotCompute, 0, 0},
    {"all_reduce", KernelOp::kNotCompute, 0, 0},
    {"linear", KernelOp::kLinear, 2, 1},
    {"linear_grad_input", KernelOp::kLinearGradInput, 2, 1},
    {"linear_grad_params", KernelOp::kLinearGradParams, 2, 1},
    {"relu", KernelOp::kRelu, 1, 1},
    {"relu_grad", KernelOp::kReluGrad, 2, 1},
    {"gelu", KernelOp::kGelu, 1, 1},
    {"gelu_grad", KernelOp::kGeluGrad, 2, 1},
    {"tanh", KernelOp::kTanh, 1, 1},
    {"tanh_grad", KernelOp::kTanhGrad, 2, 1},
    {"layernorm", KernelOp::kLayerNorm, 3, 3},
    {"layernorm_grad_input", KernelOp::kLayerNormGradInput, 5, 1},
    {"layernorm_grad_params", KernelOp::kLayerNormGradParams, 4, 2},
    {"add", KernelOp::kAdd, 2, 1},
    {"copy_grad", KernelOp::kCopyGrad, 1, 1},
    {"cross_entropy", KernelOp::kCrossEntropy, 2, 2},
    {"cross_entropy_grad", KernelOp::kCrossEntropyGrad, 2, 1},
    {"mse", KernelOp::kMse, 2, 1},
    {"mse_grad", KernelOp::kMseGrad, 2, 1},
    {"optimizer", KernelOp::kAdamW, 0, 0},  // kAdamW or kSgd, from plan.optimizer
};

const OpInfo* FindOp(absl::string_view name) {
  for (const OpInfo& candidate : kOps) {
    if (name == candidate.name) return &candidate;
  }
  return nullptr;
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
  auto fptr = [&](const Buffer& b) {
    return reinterpret_cast<float*>(base + b.offset);
  };
  for (size_t j = 0; j < instr.inputs.size() && j < 5; ++j) {
    k.x[j] = fptr(in_buf(j));
  }
  for (size_t j = 0; j < instr.outputs.size() && j < 3; ++j) {
    k.y[j] = fptr(out_buf(j));
  }
  auto attr = [&](const char* name, double fallback) {
    auto it = instr.attrs.find(name);
    return it == instr.attrs.end() ? fallback : it->second;
  };
  k.accumulate = attr("accumulate", 0) != 0;

  switch (k.op) {
    case KernelOp::kLinear:
    case KernelOp::kLinearGradInput:
    case KernelOp::kLinearGradParams: {
      // The weight fixes [out, in]; the batch is whatever is left.
      const Buffer& w =
          k.op == KernelOp::kLinearGradParams ? out_buf(0) : in_buf(1);
      if (w.shape.size() != 2) return fail("weight is not [out, in]");
      k.out = w.shape[0];
      k.in = w.shape[1];
      const Buffer& batch_side = in_buf(0);  // x or dy
      const int64_t per_row = k.op == KernelOp::kLinear ? k.in : k.out;
      if (per_row == 0 || Elements(batch_side) % per_row != 0) {
        return fail("batch input does not match the weight");
      }
      k.rows = Elements(batch_side) / per_row;
      if (k.op == KernelOp::kLinear) {
        if (Elements(out_buf(0)) != k.rows * k.out) return fail("y size");
        if (instr.inputs.size() < 3) k.x[2] = nullptr;  // no bias
        else if (Elements(in_buf(2)) != k.out) return fail("bias size");
      } else if (k.op == KernelOp::kLinearGradInput) {
        if (Elements(out_buf(0)) != k.rows * k.in) return fail("dx size");
      } else {
        if (Elements(in_buf(1)) != k.rows * k.in) return fail("x size");
        if (instr.outputs.size() < 2) k.y[1] = nullptr;  // no bias
        else if (Elements(out_buf(1)) != k.out) return fail("db size");
      }
      return absl::OkStatus();
    }
    case KernelOp::kRelu:
    case KernelOp::kGelu:
    case KernelOp::kTanh:
    case KernelOp::kReluGrad:
    case KernelOp::kGeluGrad:
    case KernelOp::kTanhGrad:
    case KernelOp::kAdd:
    case KernelOp::kCopyGrad:
      k.rows = Elements(in_buf(0));
      for (int id : instr.inputs) {
        if (Elements(plan.buffers[id]) != k.rows) return fail("sizes differ");
      }
      if (Elements(out_buf(0)) != k.rows) return fail("output size");
      return absl::OkStatus();
    case KernelOp::kLayerNorm:
    case KernelOp::kLayerNormGradInput:
    case KernelOp::kLayerNormGradParams: {
      const Buffer& per_feature = k.op == KernelOp::kLayerNorm ? in_buf(1)
                                  : k.op == KernelOp::kLayerNormGradInput
                                      ? in_buf(2)
                                      : out_buf(0);
      k.in = Elements(per_feature);
      if (k.in == 0 || Elements(in_buf(0)) % k.in != 0) {
        return fail("x is not [B, d]");
      }
      k.rows = Elements(in_buf(0)) / k.in;
      k.scalar = static_cast<float>(attr("eps", 1e-5));
      return absl::OkStatus();
    }
    case KernelOp::kCrossEntropy:
    case KernelOp::kCrossEntropyGrad: {
      const Buffer& label = in_buf(1);
      if (label.dtype != DType::kI32) return fail("label is not i32");
      k.labels = reinterpret_cast<const int32_t*>(base + label.offset);
      k.rows = Elements(label);
      if (k.rows == 0 || Elements(in_buf(0)) % k.rows != 0) {
        return fail("logits are not [B, C]");
      }
      k.in = Elements(in_buf(0)) / k.rows;
      if (k.op == KernelOp::kCrossEntropy) {
        if (Elements(out_buf(0)) != 1) return fail("loss_sum is not [1]");
        if (Elements(out_buf(1)) != k.rows * k.in) return fail("probs size");
      } else {
        if (!instr.attrs.count("scale")) return fail("missing attr scale");
        k.scalar = static_cast<float>(attr("scale", 0));
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
        k.scalar = static_cast<float>(attr("scale", 0));
      } else if (Elements(out_buf(0)) != 1) {
        return fail("loss_sum is not [1]");
      }
      return absl::OkStatus();
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
      const Buffer& params = plan.buffers[bucket.param_span];
      k.rows = Elements(params);
      if (bucket.bytes < params.bytes) {
        return fail("bucket gradient slot smaller than its parameters");
      }
      // Deterministic mode leaves the reduced sum in slot 0, which starts
      // at the bucket's offset: the same pointer either way.
      k.y[0] = fptr(params);
      k.x[0] = fptr(plan.buffers[bucket.grad_buffer]);
      size_t want_state;
      if (plan.optimizer.kind == "adamw") {
        k.op = KernelOp::kAdamW;
        want_state = 2;
      } else if (plan.optimizer.kind == "sgd") {
        k.op = KernelOp::kSgd;
        want_state = plan.optimizer.momentum != 0 ? 1 : 0;
      } else {
        return fail("unknown optimizer kind \"" + plan.optimizer.kind + "\"");
      }
      if (bucket.state_spans.size() != want_state) {
        return fail(absl::StrCat("bucket has ", bucket.state_spans.size(),
                                 " state spans, ", plan.optimizer.kind,
                                 " needs ", want_state));
      }
      for (size_t s = 0; s < want_state; ++s) {
        const int id = bucket.state_spans[s];
        if (id < 0 || id >= num_buffers ||
            Elements(plan.buffers[id]) != k.rows) {
          return fail("state span does not match the parameter span");
        }
        k.state[s] = fptr(plan.buffers[id]);
      }
      return absl::OkStatus();
    }
    case KernelOp::kNotCompute:
    case KernelOp::kFused:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Fuses "y = linear(...); h = act(y)" when nothing can observe y between
// the two: they are adjacent and no event separates them.
void FuseLinearActivations(const Plan& plan, std::vector<KernelArgs>& kernels) {
  for (size_t i = 0; i + 1 < kernels.size(); ++i) {
    KernelArgs& lin = kernels[i];
    KernelArgs& act = kernels[i + 1];
    const Instruction& a = plan.instructions[i];
    const Instruction& b = plan.instructions[i + 1];
    if (lin.op != KernelOp::kLinear || !a.record_events.empty() ||
        !b.wait_events.empty() || b.inputs.empty() ||
        b.inputs[0] != a.outputs[0] || b.outputs[0] == a.outputs[0]) {
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

}  // namespace

bool IsKernelOp(absl::string_view op) {
  const OpInfo* info = FindOp(op);
  return info != nullptr && info->op != KernelOp::kNotCompute;
}

absl::StatusOr<std::vector<KernelArgs>> ResolveKernels(
    const Plan& plan, char* arena, int64_t arena_bytes,
    const std::string& device_name) {
  if (plan.arena_bytes > arena_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(device_name, ": plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", arena_bytes));
  }
  const int num_buffers = static_cast<int>(plan.buffers.size());
  for (const Buffer& b : plan.buffers) {
    if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          device_name, ": buffer ", b.name, " lies outside the arena"));
    }
  }
  std::vector<KernelArgs> kernels(plan.instructions.size());
  for (size_t i = 0; i < plan.instructions.size(); ++i) {
    const Instruction& instr = plan.instructions[i];
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          device_name, ": instruction ", i, " (", instr.op, " \"", instr.label,
          "\"): ", why));
    };
    if (instr.id != static_cast<int>(i)) return fail("id != its index");
    const OpInfo* info = FindOp(instr.op);
    if (info == nullptr) return fail("unknown op");
    if (static_cast<int>(instr.inputs.size()) < info->inputs ||
        static_cast<int>(instr.outputs.size()) < info->outputs) {
      return fail(absl::StrCat("needs at least ", info->inputs, " inputs and ",
                               info->outputs, " outputs"));
    }
    for (int id : instr.inputs) {
      if (id < 0 || id >= num_buffers) return fail("input id out of range");
    }
    for (int id : instr.outputs) {
      if (id < 0 || id >= num_buffers) return fail("output id out of range");
    }
    KernelArgs& k = kernels[i];
    k.op = info->op;
    if (k.op == KernelOp::kNotCompute) continue;
    if (instr.stream != Stream::kCompute) return fail("not on compute stream");
    absl::Status status = ResolveOne(plan, instr, arena, device_name, k);
    if (!status.ok()) return status;
  }
  FuseLinearActivations(plan, kernels);
  return kernels;
}

}  // namespace trainc
