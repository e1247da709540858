// FNV-1a, 64 bits: a hash that is the same on every machine and in every
// process (absl::Hash is seeded per process), for what ranks compare (the
// plan handshake) and files record (a plan's identity in a trace).
//
//   uint64_t h = Fnv1a().Bytes(text).value();   // FNV-1a's published values
//   Fnv1a w; w.Int(n).Words(weights, bytes);     // 8 bytes a step, for arrays
//   std::string hex = HashHex(h);                // "af63dc4c8601ec8c"
#ifndef TRAINC_COMPILER_UTIL_FNV_H_
#define TRAINC_COMPILER_UTIL_FNV_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trainc {

class Fnv1a {
 public:
  // One step per byte: FNV-1a itself (Fnv1a().Bytes("a").value() is
  // 0xaf63dc4c8601ec8c).
  Fnv1a& Bytes(absl::string_view bytes);
  // One step per 8 bytes (little-endian words; the tail a byte a step):
  // 8 times fewer steps over weights and data, not FNV-1a's published
  // values.
  Fnv1a& Words(const void* data, size_t n);
  // One step: a number (a size, a label).
  Fnv1a& Int(uint64_t v) {
    h_ = (h_ ^ v) * 0x100000001b3ull;
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// 16 lowercase hex digits.
std::string HashHex(uint64_t hash);

}  // namespace trainc

#endif  // TRAINC_COMPILER_UTIL_FNV_H_
