#include "runtime/data/augment.h"

#include <map>
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

}  // namespace
}  // namespace trainc
