#include "runtime/metrics/crc32c.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace trainc {
namespace {

// Bit by bit from the definition (reflected polynomial 0x82F63B78), to
// check the library on data of every length against something independent.
uint32_t ReferenceCrc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the catalogue's check value
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32cTest, MatchesTheDefinitionOnEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::string data(3000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t n = 0; n + start <= data.size(); n += n < 70 ? 1 : 97) {
      const std::string piece = data.substr(start, n);
      ASSERT_EQ(Crc32c(piece), ReferenceCrc32c(piece)) << start << " " << n;
    }
  }
}

TEST(Crc32cTest, MaskIsTfRecords) {
  // TensorFlow's crc32c::Mask: rotate right by 15, add 0xa282ead8.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0xE3069283u),
            ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
  EXPECT_EQ(MaskedCrc32c("123456789"), MaskCrc32c(0xE3069283u));
}

}  // namespace
}  // namespace trainc
