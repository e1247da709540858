#include "runtime/data/augment.h"

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

// A 1 x 3 x 4 image holding 1..12 row by row.
std::vector<float> Counting() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i + 1);
  return v;
}

std::vector<float> Apply(const ImageTransform& t) {
  std::vector<float> in = Counting(), out(12, -1);
  ApplyTransform(t, in.data(), 1, 3, 4, out.data());
  return out;
}

TEST(AugmentTest, IdentityShiftAndFlip) {
  EXPECT_EQ(Apply({}), Counting());
  // out(h, w) = in(h + 1, w - 1): content moves up one row and right one
  // column, zeros shifted in (torchvision's crop of the padded image).
  EXPECT_EQ(Apply({1, -1, false}),
            (std::vector<float>{0, 5, 6, 7, 0, 9, 10, 11, 0, 0, 0, 0}));
  EXPECT_EQ(Apply({0, 0, true}),
            (std::vector<float>{4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9}));
  // The crop, then the mirror (RandomCrop then RandomHorizontalFlip).
  EXPECT_EQ(Apply({0, 1, true}),
            (std::vector<float>{0, 4, 3, 2, 0, 8, 7, 6, 0, 12, 11, 10}));
}

TEST(AugmentTest, DrawsArePureAndCoverTheRange) {
  std::map<int64_t, int> dy, dx;
  int flips = 0;
  const int n = 20000;
  for (int g = 0; g < n; ++g) {
    const ImageTransform t = TransformFor(7, g, 2, true);
    const ImageTransform again = TransformFor(7, g, 2, true);
    ASSERT_EQ(t.dy, again.dy);
    ASSERT_EQ(t.dx, again.dx);
    ASSERT_EQ(t.flip, again.flip);
    ++dy[t.dy];
    ++dx[t.dx];
    flips += t.flip;
  }
  ASSERT_EQ(dy.size(), 5u);
  ASSERT_EQ(dx.size(), 5u);
  for (int64_t s = -2; s <= 2; ++s) {
    EXPECT_NEAR(dy[s], n / 5, n / 50) << s;
    EXPECT_NEAR(dx[s], n / 5, n / 50) << s;
  }
  EXPECT_NEAR(flips, n / 2, n / 50);
  // Off means off; another seed draws other transforms.
  EXPECT_FALSE(TransformFor(7, 3, 0, false).flip);
  EXPECT_EQ(TransformFor(7, 3, 0, true).dy, 0);
  int same = 0;
  for (int g = 0; g < 100; ++g) {
    const ImageTransform a = TransformFor(7, g, 2, true), b = TransformFor(8, g, 2, true);
    same += a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
  }
  EXPECT_LT(same, 20);
}


// --- The draws against a reference written here -----------------------------
//
// Philox4x32-10 as published (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11): a 4-word counter, a 2-word key,
// ten rounds of
//   (x0, x1, x2, x3) -> (hi(M1 x2) ^ x1 ^ k0, lo(M1 x2), hi(M0 x0) ^ x3 ^ k1, lo(M0 x0))
// with M0 = 0xD2511F53, M1 = 0xCD9E8D57, the key bumped by the Weyl
// constants (0x9E3779B9, 0xBB67AE85) between rounds. Written from the
// paper, not from compiler/ops/philox.h, and checked here against
// Random123's known answers before it judges anything.
struct Words {
  uint32_t w[4];
};

Words ReferencePhilox(const Words& counter, uint32_t key0, uint32_t key1) {
  uint32_t keys[10][2];
  for (int r = 0; r < 10; ++r) {
    keys[r][0] = key0 + static_cast<uint32_t>(r) * 0x9E3779B9u;
    keys[r][1] = key1 + static_cast<uint32_t>(r) * 0xBB67AE85u;
  }
  uint32_t x0 = counter.w[0], x1 = counter.w[1], x2 = counter.w[2], x3 = counter.w[3];
  for (const auto& k : keys) {
    const uint64_t a = uint64_t{x0} * 0xD2511F53u;  // M0 x0
    const uint64_t b = uint64_t{x2} * 0xCD9E8D57u;  // M1 x2
    const uint32_t y0 = static_cast<uint32_t>(b >> 32) ^ x1 ^ k[0];
    const uint32_t y1 = static_cast<uint32_t>(b & 0xFFFFFFFFu);
    const uint32_t y2 = static_cast<uint32_t>(a >> 32) ^ x3 ^ k[1];
    const uint32_t y3 = static_cast<uint32_t>(a & 0xFFFFFFFFu);
    x0 = y0, x1 = y1, x2 = y2, x3 = y3;
  }
  return Words{{x0, x1, x2, x3}};
}

TEST(AugmentReferenceTest, ReferencePhiloxMatchesRandom123KnownAnswers) {
  // Random123's kat_vectors, philox4x32 10.
  const Words zero = ReferencePhilox(Words{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.w[0], 0x6627e8d5u);
  EXPECT_EQ(zero.w[1], 0xe169c58du);
  EXPECT_EQ(zero.w[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.w[3], 0x9b00dbd8u);
  const Words pi = ReferencePhilox(
      Words{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
      0x299f31d0u);
  EXPECT_EQ(pi.w[0], 0xd16cfe09u);
  EXPECT_EQ(pi.w[1], 0x94fdccebu);
  EXPECT_EQ(pi.w[2], 0x5001e420u);
  EXPECT_EQ(pi.w[3], 0x24126ea1u);
}

// Augmentation's documented draw (augment.h): one Philox4x32-10 call per
// global example g, key = the seed (low word, high word), counter =
// (0, g low word, g high word, "AUG1" = 0x41554731); word 0 gives the
// vertical shift, word 1 the horizontal one (each uniform over the
// 2 crop + 1 shifts -crop..crop by the remainder), the top bit of word 2
// the mirror.
ImageTransform ReferenceTransform(uint64_t seed, uint64_t g, int64_t crop, bool flip) {
  const Words w = ReferencePhilox(
      Words{{0u, static_cast<uint32_t>(g & 0xFFFFFFFFu), static_cast<uint32_t>(g >> 32),
             0x41554731u}},
      static_cast<uint32_t>(seed & 0xFFFFFFFFu), static_cast<uint32_t>(seed >> 32));
  ImageTransform t;
  if (crop > 0) {
    const uint64_t n = 2 * static_cast<uint64_t>(crop) + 1;
    t.dy = static_cast<int64_t>(w.w[0] % n) - crop;
    t.dx = static_cast<int64_t>(w.w[1] % n) - crop;
  }
  t.flip = flip && (w.w[2] & 0x80000000u) != 0;
  return t;
}

// The global example index of the example at `place` in step `step`'s
// global batch (1-based steps), as the loader numbers them.
uint64_t GlobalExample(uint64_t step, uint64_t global_batch, uint64_t place) {
  return (step - 1) * global_batch + place;
}

TEST(AugmentReferenceTest, PinnedDraws) {
  // (seed, step, global batch, place, crop) -> (dy, dx, flip): values of
  // the reference above, written out so that a change of the reference
  // and the code together still shows.
  struct Case {
    uint64_t seed, step, global_batch, place;
    int64_t crop;
    int64_t dy, dx;
    bool flip;
  };
  const Case cases[] = {
      {0x0ull, 1, 256, 0, 2, -1, 2, true},  // g = 0
      {0x0ull, 1, 256, 1, 2, -2, -1, true},  // g = 1
      {0x0ull, 1, 256, 2, 2, -1, -1, true},  // g = 2
      {0x7ull, 3, 256, 17, 4, 2, 1, true},  // g = 529
      {0x7ull, 235, 256, 255, 4, 3, -2, true},  // g = 60159
      {0x2aull, 1000, 48, 5, 2, 0, 0, true},  // g = 47957
      {0x123456789ull, 2, 64, 3, 3, -2, 0, true},  // g = 67
      {0x10000000000ull, 17, 256, 100, 2, -1, 2, false},  // g = 4196
      {0x3ull, 16777218, 256, 7, 4, -1, 3, false},  // g = 4294967559
      {0x0ull, 1, 256, 3, 1, -1, 1, false},  // g = 3
  };
  for (const Case& c : cases) {
    const uint64_t g = GlobalExample(c.step, c.global_batch, c.place);
    const ImageTransform want = ReferenceTransform(c.seed, g, c.crop, true);
    SCOPED_TRACE(testing::Message() << "seed " << c.seed << " step " << c.step
                                    << " place " << c.place << " (g " << g << ")");
    EXPECT_EQ(want.dy, c.dy);
    EXPECT_EQ(want.dx, c.dx);
    EXPECT_EQ(want.flip, c.flip);
    const ImageTransform got = TransformFor(c.seed, g, c.crop, true);
    EXPECT_EQ(got.dy, c.dy);
    EXPECT_EQ(got.dx, c.dx);
    EXPECT_EQ(got.flip, c.flip);
  }
}

TEST(AugmentReferenceTest, EveryDrawMatchesTheReference) {
  // Seeds and example indices with high words set (a key or counter word
  // dropped or swapped shows), crops of 1, 2 and 4 pixels.
  const uint64_t seeds[] = {0, 1, 7, 0x123456789ull, uint64_t{1} << 40};
  const uint64_t bases[] = {0, 1000003, (uint64_t{1} << 32) - 100, uint64_t{5} << 32};
  int dx_ne_dy = 0, flips = 0, flip_bit_differs_from_word3 = 0, n = 0;
  for (const uint64_t seed : seeds) {
    for (const uint64_t base : bases) {
      for (uint64_t i = 0; i < 200; ++i) {
        const uint64_t g = base + i;
        for (const int64_t crop : {int64_t{1}, int64_t{2}, int64_t{4}}) {
          const ImageTransform want = ReferenceTransform(seed, g, crop, true);
          const ImageTransform got = TransformFor(seed, g, crop, true);
          ASSERT_EQ(got.dy, want.dy) << "seed " << seed << " g " << g << " crop " << crop;
          ASSERT_EQ(got.dx, want.dx) << "seed " << seed << " g " << g << " crop " << crop;
          ASSERT_EQ(got.flip, want.flip) << "seed " << seed << " g " << g;
          // random_flip off: never mirrored, the same shifts.
          const ImageTransform plain = TransformFor(seed, g, crop, false);
          ASSERT_FALSE(plain.flip);
          ASSERT_EQ(plain.dy, want.dy);
          ASSERT_EQ(plain.dx, want.dx);
          dx_ne_dy += want.dx != want.dy;
          flips += want.flip;
          ++n;
        }
        const Words w = ReferencePhilox(
            Words{{0u, static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32), 0x41554731u}},
            static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
        flip_bit_differs_from_word3 += (w.w[2] >> 31) != (w.w[3] >> 31);
        // random_crop off: no shift, the same mirror.
        const ImageTransform flip_only = TransformFor(seed, g, 0, true);
        ASSERT_EQ(flip_only.dy, 0);
        ASSERT_EQ(flip_only.dx, 0);
        ASSERT_EQ(flip_only.flip, (w.w[2] >> 31) != 0);
      }
    }
  }
  // The comparison can tell the words apart: the shifts differ from each
  // other, and the mirror from another word's top bit, in many draws.
  EXPECT_GT(dx_ne_dy, n / 2);
  EXPECT_GT(flips, n / 3);
  EXPECT_LT(flips, 2 * n / 3);
  EXPECT_GT(flip_bit_differs_from_word3, 100);
}

}  // namespace
}  // namespace trainc
