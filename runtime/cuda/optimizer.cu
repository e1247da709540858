// The optimizer's CUDA kernels (compiler/ops/optimizer_family.h): fused
// steps over a bucket's flat parameter span (or this rank's shard of it),
// one read and one write of every parameter, gradient and state element. The update
// formulas follow PyTorch's single-tensor implementations operation for
// operation, so a CPU/GPU/PyTorch comparison differs only by rounding.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::OptimizerFamily::Args;

// torch.nn.utils.clip_grad_norm_'s factor, in float as torch's tensor ops:
// min(1, clip / (sqrt(sum of squares) + 1e-6)); 1 without clipping.
// A non-finite reduced gradient (clipping or skip_nonfinite computed its
// squared norm): the step changes nothing, as on the CPU.
__device__ inline bool NonFinite(const float* grad_sq) {
  return grad_sq != nullptr && !isfinite(*grad_sq);
}

__device__ inline float ClipScale(const float* grad_sq, float clip) {
  if (grad_sq == nullptr || clip <= 0.0f) return 1.0f;
  return fminf(1.0f, clip / (sqrtf(*grad_sq) + 1e-6f));
}

// torch.optim.AdamW: decoupled decay, then Adam with bias correction
// folded into the step size and the denominator. The per-element sequence
// and the scalars' rounding are the CPU reference's (runtime/cpu/kernels.cc):
// 1 - beta is formed in double and rounded once (1.0f - 0.999f is 1.3e-5
// away from float(0.001), which v would inherit), and so are the decay
// factor and the step size (on the host, OptimizerStepScalars).
__global__ void AdamWKernel(float* params, const float* grads, float* m,
                            float* v, int64_t n,
                            const OptimizerStepScalars* scalars, float b1,
                            float one_minus_b1, float b2, float one_minus_b2,
                            float eps, const float* grad_sq, float clip) {
  if (NonFinite(grad_sq)) return;
  const float scale = ClipScale(grad_sq, clip);
  const float decay = scalars->adamw_decay;
  const float neg_step_size = scalars->adamw_neg_step_size;
  const float bc2_sqrt = scalars->bias_correction2_sqrt;
  TRAINC_GRID_STRIDE(i, n) {
    const float g = grads[i] * scale;  // torch: grads.mul_(clip_coef)
    const float p = params[i] * decay;
    const float mi = m[i] * b1 + one_minus_b1 * g;
    const float vi = v[i] * b2 + one_minus_b2 * g * g;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    params[i] = p + neg_step_size * mi / denom;  // torch's addcdiv order
  }
}

// torch.optim.SGD with dampening 0: the momentum buffer starts as the
// (decayed) gradient itself on the first step.
__global__ void SgdKernel(float* params, const float* grads,
                          float* momentum_buf, int64_t n,
                          const OptimizerStepScalars* scalars, float momentum,
                          float weight_decay, bool nesterov,
                          const float* grad_sq, float clip) {
  if (NonFinite(grad_sq)) return;
  const float scale = ClipScale(grad_sq, clip);
  const float lr = scalars->lr;
  const bool first = scalars->first_step != 0;
  TRAINC_GRID_STRIDE(i, n) {
    const float p = params[i];
    float d = grads[i] * scale;
    if (weight_decay != 0.0f) d += weight_decay * p;
    if (momentum != 0.0f) {
      const float buf = first ? d : momentum * momentum_buf[i] + d;
      momentum_buf[i] = buf;
      d = nesterov ? d + momentum * buf : buf;
    }
    params[i] = p - lr * d;
  }
}

}  // namespace

const char* PrepareOptimizer(KernelOp, const Args&, int64_t*) { return nullptr; }

// AdamW or SGD over this rank's floats of the bucket (Args' shard): the
// learning rate and the step from env.scalars (AdamW's decay from the
// second copy, 1, for a bucket without weight decay).
cudaError_t LaunchOptimizer(KernelOp op, const Args& a, const float* const* x, float* const* y,
                            const UnitLaunch& env) {
  const ops::unit::OptimizerFacts& h = a.hyper;
  const int rank = a.step.rank;
  float* params = y[0] + a.ParamBegin(rank);
  const float* grads = x[1] + a.GradBegin(rank);
  const float* grad_sq = a.grad_sq >= 0 ? x[a.grad_sq] : nullptr;
  const int64_t n = a.Count();
  if (op == KernelOp::kAdamW) {
    AdamWKernel<<<ElementwiseBlocks(n), kBlockSize, 0, env.stream>>>(
        params, grads, y[1], y[2], n, env.scalars + (h.bucket_decayed ? 0 : 1),
        static_cast<float>(h.beta1), static_cast<float>(1.0 - h.beta1),
        static_cast<float>(h.beta2), static_cast<float>(1.0 - h.beta2),
        static_cast<float>(h.eps), grad_sq, a.clip);
  } else {
    SgdKernel<<<ElementwiseBlocks(n), kBlockSize, 0, env.stream>>>(
        params, grads, h.momentum != 0 ? y[1] : nullptr, n, env.scalars,
        static_cast<float>(h.momentum), static_cast<float>(h.weight_decay), h.nesterov, grad_sq,
        a.clip);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
