// bfloat16 as the CPU sees it: the top 16 bits of an IEEE float, rounded to
// nearest even (as torch's float -> bfloat16 cast and CUDA's
// __float2bfloat16_rn). Used for gradients on the wire (grad_comm = bf16).
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

// x[i] = bf16(x[i] + y[i]), the sum in float: one reduction step of a
// bf16 collective.
inline void Bf16Sum(uint16_t* x, const uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    x[i] = FloatToBf16(Bf16ToFloat(x[i]) + Bf16ToFloat(y[i]));
  }
}

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_BF16_H_
