// The wire format of the job's key-value store (store_server.h,
// store_client.h), and the token that lets a rank in.
//
// Every message is a frame: a little-endian uint32 byte count, then that
// many bytes: one op byte and its fields (uint32 little-endian integers,
// strings as a uint32 length and the bytes). The server speaks first:
// kMagic and a fresh random nonce (kNonceBytes). The client answers
//   kAuth  rank, client nonce, Proof(key, "client", ...)
// and the server replies kOk with Proof(key, "server", ...) (the client
// checks it: a rank tells nothing to a store of another job) or kError and
// closes. Only then are the requests below served:
//   kSet   key, value             -> kOk
//   kGet   key                    -> kValue value | kNotFound
//   kWait  timeout_ms, n, keys    -> kOk when all exist | kTimeout n, the missing keys
//   kCheck n, keys                -> kOk uint8 (1: all exist)
// A malformed or oversized frame gets kError, message, and the connection
// is closed.
#ifndef TRAINC_RUNTIME_STORE_STORE_PROTOCOL_H_
#define TRAINC_RUNTIME_STORE_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trainc {
namespace store {

inline constexpr char kMagic[] = "TRAINCS1";  // 8 bytes on the wire
inline constexpr size_t kMagicBytes = 8;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256

enum class Op : uint8_t {
  kAuth = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kCheck = 5,
  kOk = 0x80,
  kValue = 0x81,
  kNotFound = 0x82,
  kTimeout = 0x83,
  kError = 0x8f,
};

// What either side accepts; a frame past them is refused, not read.
struct Limits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = size_t{1} << 20;  // Gloo's addresses: ~140 bytes a rank
  size_t max_keys = 4096;                    // per kWait or kCheck
  size_t max_frame_bytes() const { return max_value_bytes + max_key_bytes + 64; }
};

// A frame's body being built.
class FrameWriter {
 public:
  explicit FrameWriter(Op op) { body_.push_back(static_cast<char>(op)); }
  FrameWriter& U8(uint8_t v);
  FrameWriter& U32(uint32_t v);
  FrameWriter& Bytes(absl::string_view b);   // raw, no length
  FrameWriter& String(absl::string_view s);  // length, then the bytes
  // The whole frame: length prefix and body.
  std::string Frame() const;

 private:
  std::string body_;
};

// Reads a frame's body; every read fails (false) past its end.
class FrameReader {
 public:
  explicit FrameReader(absl::string_view body) : rest_(body) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool Bytes(size_t n, std::string* out);
  // A string of at most `max` bytes.
  bool String(size_t max, std::string* out);
  bool done() const { return rest_.empty(); }

 private:
  absl::string_view rest_;
};

// The little-endian uint32 at p[0..3].
uint32_t ReadU32(const char* p);

// The job's key: HMAC-SHA256 keyed by `secret` over the job id. The same
// on every rank of a job, and nothing to a process without the secret.
std::string JobKey(absl::string_view secret, absl::string_view job);

// What one side sends to prove it holds the job's key, bound to both
// nonces, the claimed rank and its role ("client", "server").
std::string Proof(absl::string_view key, absl::string_view role,
                  absl::string_view server_nonce, absl::string_view client_nonce,
                  uint32_t rank);

// Equal bytes, in time independent of where they differ.
bool SameBytes(absl::string_view a, absl::string_view b);

// `n` bytes from OpenSSL's random generator.
std::string RandomBytes(size_t n);

// Lowercase hex of bytes (a short key's fingerprint in messages).
std::string Hex(absl::string_view bytes);

}  // namespace store
}  // namespace trainc

#endif  // TRAINC_RUNTIME_STORE_STORE_PROTOCOL_H_
