// CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), the
// checksum of TFRecord files, and TFRecord's "masked" form of it.
//
//   uint32_t crc = Crc32c("123456789");       // 0xE3069283
//   uint32_t stored = MaskedCrc32c(bytes);    // what a TFRecord carries
//
// Computed by ISA-L's crc32_iscsi (Debian's libisal-dev; see
// third_party/system/isal.BUILD).
#ifndef TRAINC_RUNTIME_METRICS_CRC32C_H_
#define TRAINC_RUNTIME_METRICS_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace trainc {

uint32_t Crc32c(absl::string_view data);

// TFRecord stores checksums rotated and offset, because the CRC of data
// that itself contains CRCs is weak: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc32c(uint32_t crc);
inline uint32_t MaskedCrc32c(absl::string_view data) {
  return MaskCrc32c(Crc32c(data));
}

}  // namespace trainc

#endif  // TRAINC_RUNTIME_METRICS_CRC32C_H_
