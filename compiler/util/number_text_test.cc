#include "compiler/util/number_text.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(ShortestDouble, ShortWhereThatReadsBackExactWhereItDoesNot) {
  EXPECT_EQ(ShortestDouble(0.001), "0.001");
  EXPECT_EQ(ShortestDouble(10000), "10000");
  EXPECT_EQ(ShortestDouble(1e-6), "1e-06");
  const double sum = 0.1 + 0.2;  // 15 digits read back as 0.3: 17 needed
  EXPECT_EQ(ShortestDouble(sum), "0.30000000000000004");
  EXPECT_EQ(std::strtod(ShortestDouble(sum).c_str(), nullptr), sum);
  const double scale = 1.0 / 255;
  EXPECT_EQ(std::strtod(ShortestDouble(scale).c_str(), nullptr), scale);
}

}  // namespace
}  // namespace trainc
