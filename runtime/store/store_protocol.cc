#include "runtime/store/store_protocol.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "absl/strings/escaping.h"

namespace trainc {
namespace store {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

}  // namespace

FrameWriter& FrameWriter::U8(uint8_t v) {
  body_.push_back(static_cast<char>(v));
  return *this;
}

FrameWriter& FrameWriter::U32(uint32_t v) {
  PutU32(&body_, v);
  return *this;
}

FrameWriter& FrameWriter::Bytes(absl::string_view b) {
  body_.append(b.data(), b.size());
  return *this;
}

FrameWriter& FrameWriter::String(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  return Bytes(s);
}

std::string FrameWriter::Frame() const {
  std::string frame;
  PutU32(&frame, static_cast<uint32_t>(body_.size()));
  return frame + body_;
}

uint32_t ReadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

bool FrameReader::U8(uint8_t* v) {
  if (rest_.empty()) return false;
  *v = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return true;
}

bool FrameReader::U32(uint32_t* v) {
  if (rest_.size() < 4) return false;
  *v = ReadU32(rest_.data());
  rest_.remove_prefix(4);
  return true;
}

bool FrameReader::Bytes(size_t n, std::string* out) {
  if (rest_.size() < n) return false;
  out->assign(rest_.data(), n);
  rest_.remove_prefix(n);
  return true;
}

bool FrameReader::String(size_t max, std::string* out) {
  uint32_t n = 0;
  return U32(&n) && n <= max && Bytes(n, out);
}

std::string JobKey(absl::string_view secret, absl::string_view job) {
  return HmacSha256(secret, std::string("trainc job store v1\n") + std::string(job));
}

std::string Proof(absl::string_view key, absl::string_view role,
                  absl::string_view server_nonce, absl::string_view client_nonce,
                  uint32_t rank) {
  std::string data(role);
  data.push_back('\n');
  data.append(server_nonce.data(), server_nonce.size());
  data.append(client_nonce.data(), client_nonce.size());
  PutU32(&data, rank);
  return HmacSha256(key, data);
}

bool SameBytes(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    // No entropy: a nonce that repeats still proves the key (the HMAC
    // needs it); it only lets a recorded answer be replayed.
    std::memset(out.data(), 0, n);
  }
  return out;
}

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

}  // namespace store
}  // namespace trainc
