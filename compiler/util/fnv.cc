#include "compiler/util/fnv.h"

#include <cstdio>
#include <cstring>

namespace trainc {

Fnv1a& Fnv1a::Bytes(absl::string_view bytes) {
  for (const char c : bytes) Int(static_cast<unsigned char>(c));
  return *this;
}

Fnv1a& Fnv1a::Words(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    Int(word);
  }
  for (; i < n; ++i) Int(p[i]);
  return *this;
}

std::string HashHex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace trainc
