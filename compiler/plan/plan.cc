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
