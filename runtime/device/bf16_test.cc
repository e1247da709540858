#include "runtime/device/bf16.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace trainc {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Values whose bf16 rounding is known by hand: exact ones, halfway cases
// (ties to even, both ways), just above and below halfway, the largest
// finite value rounding to infinity, subnormals, signs.
TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: down to 1.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);
  // Just above and below halfway.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fff)), 0x3f80);
  // The largest float rounds up to infinity; infinities stay.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A subnormal keeps its top bits.
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000)), 0x0001);
}

TEST(Bf16Test, NanStaysNan) {
  // A NaN whose payload sits in the low bits only would round to infinity
  // by the carry; it must stay a NaN.
  const float nan_low = FromBits(0x7f800001);
  ASSERT_TRUE(std::isnan(nan_low));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(nan_low))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

TEST(Bf16Test, WidensExactlyAndSumsInFloat) {
  for (uint32_t h : {0x3f80u, 0xc0a0u, 0x0001u, 0x7f7fu}) {
    EXPECT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(h))), h);
  }
  // 1 + 1/256: the sum is formed in float, then rounded once (to 1, even).
  uint16_t x[2] = {FloatToBf16(1.0f), FloatToBf16(3.0f)};
  const uint16_t y[2] = {FloatToBf16(1.0f / 256), FloatToBf16(5.0f)};
  Bf16Sum(x, y, 2);
  EXPECT_EQ(Bf16ToFloat(x[0]), 1.0f);
  EXPECT_EQ(Bf16ToFloat(x[1]), 8.0f);
}

}  // namespace
}  // namespace trainc
