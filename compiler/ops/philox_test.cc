#include "compiler/ops/philox.h"

#include <cmath>
#include <cstdint>

#include "gtest/gtest.h"

namespace trainc {
namespace {

// Known-answer vectors of Random123 (kat_vectors, philox4x32 10).
TEST(Philox, MatchesRandom123KnownAnswers) {
  const Philox4 zero = Philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4 ones = Philox4x32_10(
      Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
      0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const Philox4 pi = Philox4x32_10(
      Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
      0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(Philox, DropoutDropsAboutPAndScalesTheRest) {
  const float p = 0.25f;
  int64_t dropped = 0, n = 0;
  for (uint64_t example = 0; example < 64; ++example) {
    for (uint64_t element = 0; element < 1000; ++element, ++n) {
      const float f = DropoutFactor(7, 3, example, element, p);
      if (f == 0.0f) {
        ++dropped;
      } else {
        EXPECT_EQ(f, 1.0f / 0.75f);
      }
    }
  }
  // 64000 Bernoulli(0.25): sd ~110; 6 sd either way.
  EXPECT_NEAR(static_cast<double>(dropped), 0.25 * n, 660.0);
}

TEST(Philox, EveryKeyPartChangesTheMask) {
  auto mask = [](uint64_t seed, uint32_t key, uint64_t example) {
    uint64_t bits = 0;
    for (int e = 0; e < 64; ++e) {
      bits |= uint64_t{DropoutFactor(seed, key, example, e, 0.5f) == 0.0f} << e;
    }
    return bits;
  };
  const uint64_t base = mask(1, 2, 3);
  EXPECT_EQ(mask(1, 2, 3), base);  // a pure function
  EXPECT_NE(mask(2, 2, 3), base);
  EXPECT_NE(mask(1, 3, 3), base);
  EXPECT_NE(mask(1, 2, 4), base);
  EXPECT_NE(mask(1, 2, 3 + (uint64_t{1} << 32)), base);
  EXPECT_NE(mask(uint64_t{1} << 40, 2, 3), base);
  EXPECT_EQ(DropoutFactor(1, 2, 3, 5, 0.0f), 1.0f);  // p = 0 keeps all
}

}  // namespace
}  // namespace trainc
