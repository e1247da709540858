// bfloat16 as the CPU sees it: arrays of compiler/ops/bf16.h's
// conversions. Used for gradients on the wire (grad_comm = bf16) and bf16
// tensors on the CPU (precision = bf16).
#ifndef TRAINC_RUNTIME_DEVICE_BF16_H_
#define TRAINC_RUNTIME_DEVICE_BF16_H_

#include <cstddef>
#include <cstdint>

#include "compiler/ops/bf16.h"  // FloatToBf16, Bf16ToFloat

namespace trainc {

inline void WidenBf16(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

inline void NarrowToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

// x[i] = bf16(x[i] + y[i]), the sum in float: one reduction step of a
// bf16 collective.
inline void Bf16Sum(uint16_t* x, const uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    x[i] = FloatToBf16(Bf16ToFloat(x[i]) + Bf16ToFloat(y[i]));
  }
}

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_BF16_H_
