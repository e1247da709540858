// CudaDeviceImpl's causal attention: the entry points of the kernel table
// (cuda_kernels.cc) over attention.cu's tiled kernels, and the bf16
// operands those kernels read and write themselves.
#include "runtime/cuda/cuda_device_impl.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels.h"

namespace trainc::cuda_internal {

void UseBf16Attention(Kernel& k) {
  if (k.op != Op::kAttention && k.op != Op::kAttentionGrad) return;
  // forward: qkv -> y (lse f32); backward: dy, qkv, y -> dqkv (lse, delta
  // f32). Inputs are recorded first, in x order, then the outputs: all of
  // these or none (mixed operands keep the f32 staging).
  const int inputs = k.op == Op::kAttention ? 1 : 3;
  if (k.num_bf16 != inputs + 1) return;
  for (int i = 0; i < inputs; ++i) {
    if (k.bf16[i].output || k.bf16[i].bf16 != k.x[i]) return;
  }
  const Bf16Operand& out = k.bf16[inputs];
  if (!out.output || out.bf16 != k.y[0]) return;
  for (int i = 0; i < inputs; ++i) k.attention_bf16_in[i] = k.bf16[i].bf16;
  k.attention_bf16_out = out.bf16;
  for (int i = 0; i < k.num_bf16; ++i) k.bf16[i].native = true;
}

// qkv -> y, lse.
absl::Status CudaDeviceImpl::RunAttention(const Kernel& k) {
  const bool bf16 = k.attention_bf16_out != nullptr;
  const void* qkv = bf16 ? k.attention_bf16_in[0] : k.x[0];
  void* y = bf16 ? k.attention_bf16_out : k.y[0];
  CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(k.attention, qkv, y, k.y[1], bf16, compute_));
  return absl::OkStatus();
}

// dy, qkv, y, lse -> dqkv (accumulated when k.accumulate), delta.
absl::Status CudaDeviceImpl::RunAttentionGrad(const Kernel& k) {
  const bool bf16 = k.attention_bf16_out != nullptr;
  const void* in[3];
  for (int i = 0; i < 3; ++i) in[i] = bf16 ? k.attention_bf16_in[i] : k.x[i];
  void* dqkv = bf16 ? k.attention_bf16_out : k.y[0];
  CUDA_RETURN_IF_ERROR(cuda::LaunchAttentionGrad(k.attention, in[0], in[1], in[2], k.x[3], dqkv,
                                                 k.y[1], k.accumulate, bf16, compute_));
  return absl::OkStatus();
}

}  // namespace trainc::cuda_internal
