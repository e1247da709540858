#include "runtime/metrics/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace trainc {

uint32_t Crc32c(absl::string_view data) {
  // crc32_iscsi neither inverts its seed nor its result: with ~0 in and the
  // result inverted it is the standard CRC-32C. It takes an int length.
  uint32_t crc = 0xFFFFFFFFu;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    const size_t n = std::min<size_t>(left, INT_MAX);
    crc = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), crc);
    p += n;
    left -= n;
  }
  return ~crc;
}

uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace trainc
