// bfloat16: the top 16 bits of an IEEE float, rounded to nearest even (as
// torch's float -> bfloat16 cast and CUDA's __float2bfloat16_rn). One
// element's conversions, for the families' loops (cast, and the rounding
// points of layer_norm and swiglu) and the runtime's
// (runtime/device/bf16.h).
#ifndef TRAINC_COMPILER_OPS_BF16_H_
#define TRAINC_COMPILER_OPS_BF16_H_

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

// f as a bf16 tensor holds it, read back as a float: FloatToBf16's
// rounding, widened.
inline float RoundedToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace trainc

#endif  // TRAINC_COMPILER_OPS_BF16_H_
