// fp32 <-> bf16 casts on a stream, for NCCL's bf16 gradient collectives
// (grad_comm = bf16). Round to nearest even, as runtime/device/bf16.h.
#ifndef TRAINC_RUNTIME_COMM_NCCL_BF16_CAST_H_
#define TRAINC_RUNTIME_COMM_NCCL_BF16_CAST_H_

#include <cstdint>

#include <cuda_runtime.h>

namespace trainc::nccl {

// bf16[i] = round(f32[i]); bf16 holds n 16-bit values.
cudaError_t LaunchToBf16(const float* f32, void* bf16, int64_t n,
                         cudaStream_t stream);
// f32[i] = bf16[i].
cudaError_t LaunchFromBf16(const void* bf16, float* f32, int64_t n,
                           cudaStream_t stream);

}  // namespace trainc::nccl

#endif  // TRAINC_RUNTIME_COMM_NCCL_BF16_CAST_H_
