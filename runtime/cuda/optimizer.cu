// Fused optimizer steps over a bucket's flat parameter span: one read and
// one write of every parameter, gradient and state element. The update
// formulas follow PyTorch's single-tensor implementations operation for
// operation, so a CPU/GPU/PyTorch comparison differs only by rounding.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

// torch.optim.AdamW: decoupled decay, then Adam with bias correction
// folded into the step size and the denominator.
__global__ void AdamWKernel(float* params, const float* grads, float* m,
                            float* v, int64_t n,
                            const OptimizerStepScalars* scalars, float beta1,
                            float beta2, float eps, float weight_decay) {
  const float lr = scalars->lr;
  const float step_size = lr / scalars->bias_correction1;
  const float bc2_sqrt = scalars->bias_correction2_sqrt;
  TRAINC_GRID_STRIDE(i, n) {
    const float g = grads[i];
    float p = params[i] * (1.0f - lr * weight_decay);
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p -= step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    params[i] = p;
  }
}

// torch.optim.SGD with dampening 0: the momentum buffer starts as the
// (decayed) gradient itself on the first step.
__global__ void SgdKernel(float* params, const float* grads,
                          float* momentum_buf, int64_t n,
                          const OptimizerStepScalars* scalars, float momentum,
                          float weight_decay, bool nesterov) {
  const float lr = scalars->lr;
  const bool first = scalars->first_step != 0;
  TRAINC_GRID_STRIDE(i, n) {
    const float p = params[i];
    float d = grads[i];
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
                        float beta1, float beta2, float eps,
                        float weight_decay, cudaStream_t s) {
  AdamWKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      params, grads, m, v, n, scalars, beta1, beta2, eps, weight_decay);
  return cudaGetLastError();
}

cudaError_t LaunchSgd(float* params, const float* grads, float* momentum_buf,
                      int64_t n, const OptimizerStepScalars* scalars,
                      float momentum, float weight_decay, bool nesterov,
                      cudaStream_t s) {
  SgdKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      params, grads, momentum_buf, n, scalars, momentum, weight_decay,
      nesterov);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
