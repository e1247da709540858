#include "compiler/plan/plan.h"

namespace trainc {

int64_t DTypeBytes(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
      return 2;
  }
  return 4;
}

namespace {

// What buffer `id` is to `bucket`.
ops::unit::BucketRole RoleOf(const Plan& plan, const Bucket& bucket, int id) {
  using Role = ops::unit::BucketRole;
  if (id == bucket.grad_buffer) return Role::kGrads;
  if (id == bucket.grad_shard) return Role::kGradShard;
  if (id == bucket.param_span) return Role::kParams;
  if (id == bucket.param_shard) return Role::kParamShard;
  for (int s : bucket.state_spans) {
    if (id == s) return Role::kState;
  }
  if (id >= 0 && id < static_cast<int>(plan.buffers.size()) &&
      plan.buffers[id].kind == BufferKind::kStepScalar) {
    return Role::kStepScalar;
  }
  return Role::kOther;
}

ops::unit::OptimizerFacts OptimizerFactsOf(const Plan& plan, const Bucket& bucket) {
  const OptimizerConfig& o = plan.optimizer;
  ops::unit::OptimizerFacts f;
  using Kind = ops::unit::OptimizerFacts::Kind;
  f.kind = o.kind == OptimizerKind::kAdamW ? Kind::kAdamW
           : o.kind == OptimizerKind::kSgd ? Kind::kSgd
                                           : Kind::kOther;
  f.beta1 = o.beta1, f.beta2 = o.beta2, f.eps = o.eps;
  f.weight_decay = o.weight_decay, f.momentum = o.momentum, f.nesterov = o.nesterov;
  f.bucket_decayed = bucket.weight_decay;
  const int n = static_cast<int>(plan.buffers.size());
  if (bucket.param_span >= 0 && bucket.param_span < n && bucket.grad_buffer >= 0 &&
      bucket.grad_buffer < n) {
    const Buffer& span = plan.buffers[bucket.param_span];
    f.param_elems = span.bytes / DTypeBytes(span.dtype);
  }
  return f;
}

}  // namespace

ops::unit::PlanFacts UnitFactsOf(const Plan& plan, const Instruction& instr) {
  ops::unit::PlanFacts f;
  f.seed = static_cast<uint64_t>(plan.seed);
  f.global_batch = plan.global_batch;
  f.micro_batch = plan.micro_batch;
  f.accumulate = plan.accumulate;
  f.micro_step = instr.micro_step > 0 ? instr.micro_step : 0;
  auto mark = [&](const std::vector<int>& ids, uint32_t* f32, uint32_t* bf16) {
    for (size_t j = 0; j < ids.size() && j < 32; ++j) {
      if (ids[j] < 0 || ids[j] >= static_cast<int>(plan.buffers.size())) continue;
      const DType t = plan.buffers[ids[j]].dtype;
      if (t == DType::kF32) *f32 |= 1u << j;
      if (t == DType::kBF16) *bf16 |= 1u << j;
    }
  };
  mark(instr.inputs, &f.f32_inputs, &f.bf16_inputs);
  mark(instr.outputs, &f.f32_outputs, &f.bf16_outputs);
  auto it = instr.attrs.find("bucket");
  if (it == instr.attrs.end() || it->second < 0 ||
      it->second >= static_cast<double>(plan.buckets.size())) {
    return f;
  }
  const Bucket& bucket = plan.buckets[static_cast<size_t>(it->second)];
  f.bucket_elems = bucket.bytes / 4;
  f.optimizer = OptimizerFactsOf(plan, bucket);
  f.shard_elems = bucket.shard_elems;
  for (size_t j = 0; j < instr.inputs.size() && j < ops::unit::PlanFacts::kMaxInputs; ++j) {
    f.inputs[j] = RoleOf(plan, bucket, instr.inputs[j]);
  }
  return f;
}

const char* BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kInput: return "input";
    case BufferKind::kLabel: return "label";
    case BufferKind::kParameter: return "parameter";
    case BufferKind::kGradient: return "gradient";
    case BufferKind::kOptimizerState: return "optimizer_state";
    case BufferKind::kActivation: return "activation";
    case BufferKind::kActivationGrad: return "activation_grad";
    case BufferKind::kLoss: return "loss";
    case BufferKind::kBucket: return "bucket";
    case BufferKind::kParameterSpan: return "parameter_span";
    case BufferKind::kStateSpan: return "state_span";
    case BufferKind::kStepScalar: return "step_scalar";
    case BufferKind::kWorkspace: return "workspace";
    case BufferKind::kParameterCopy: return "parameter_copy";
    case BufferKind::kGradShard: return "grad_shard";
    case BufferKind::kParamShard: return "param_shard";
  }
  return "unknown";
}

const char* StreamName(Stream stream) {
  switch (stream) {
    case Stream::kCompute: return "compute";
    case Stream::kComm: return "comm";
  }
  return "unknown";
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kComm: return "comm";
    case Phase::kOptimizer: return "optimizer";
  }
  return "unknown";
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kBF16: return "bf16";
  }
  return "unknown";
}

}  // namespace trainc
