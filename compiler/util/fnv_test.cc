#include "compiler/util/fnv.h"

#include <cstring>

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(Fnv1aTest, BytesGiveTheHashsPublishedValues) {
  // The same on every machine and in every process: traces record them.
  EXPECT_EQ(Fnv1a().value(), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a().Bytes("a").value(), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a().Bytes("foobar").value(), 0x85944171f73967e8ull);
  EXPECT_EQ(HashHex(Fnv1a().Bytes("a").value()), "af63dc4c8601ec8c");
  EXPECT_EQ(HashHex(1), "0000000000000001");
}

TEST(Fnv1aTest, WordsTakeEightBytesAStepAndTheTailAByteAStep) {
  const char data[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  uint64_t word;
  std::memcpy(&word, data, 8);
  EXPECT_EQ(Fnv1a().Words(data, 11).value(), Fnv1a().Int(word).Int(9).Int(10).Int(11).value());
  // Every byte counts.
  char other[11];
  std::memcpy(other, data, 11);
  other[7] = 0;
  EXPECT_NE(Fnv1a().Words(data, 11).value(), Fnv1a().Words(other, 11).value());
}

}  // namespace
}  // namespace trainc
