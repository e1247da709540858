// Fused optimizer steps over a bucket's flat parameter span: one read and
// one write of every parameter, gradient and state element. The update
// formulas follow PyTorch's single-tensor implementations operation for
// operation, so a CPU/GPU/PyTorch comparison differs only by rounding.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

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

cudaError_t LaunchAdamW(float* params, const float* grads, float* m, float* v,
                        int64_t n, const OptimizerStepScalars* scalars,
                        double beta1, double beta2, double eps,
                        const float* grad_sq, float clip, cudaStream_t s) {
  AdamWKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      params, grads, m, v, n, scalars, static_cast<float>(beta1),
      static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
      static_cast<float>(1.0 - beta2), static_cast<float>(eps), grad_sq, clip);
  return cudaGetLastError();
}

cudaError_t LaunchSgd(float* params, const float* grads, float* momentum_buf,
                      int64_t n, const OptimizerStepScalars* scalars,
                      float momentum, float weight_decay, bool nesterov,
                      const float* grad_sq, float clip, cudaStream_t s) {
  SgdKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      params, grads, momentum_buf, n, scalars, momentum, weight_decay,
      nesterov, grad_sq, clip);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
