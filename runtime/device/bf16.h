// bfloat16 as the CPU sees it: the top 16 bits of an IEEE float, rounded to
// nearest even (as torch's float -> bfloat16 cast and CUDA's
// __float2bfloat16_rn). Used for gradients on the wire (grad_comm = bf16)
// and bf16 tensors on the CPU (precision = bf16).
#ifndef TRAINC_RUNTIME_DEVICE_BF16_H_
#define TRAINC_RUNTIME_DEVICE_BF16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace trainc {

// Round to nearest even; NaN stays a (quiet) NaN, overflow becomes +-inf.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, set quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

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
