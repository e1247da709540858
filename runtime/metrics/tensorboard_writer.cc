#include "runtime/metrics/tensorboard_writer.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/metrics/crc32c.h"

namespace trainc {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(int field, int wire_type, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | wire_type, out);
}

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void PutBytesField(int field, absl::string_view bytes, std::string* out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Event fields: 1 wall_time (double), 2 step (int64), 3 file_version
// (string), 5 summary (Summary).
std::string EventHeader(double wall_time, int64_t step) {
  std::string out;
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof bits);
  PutTag(1, kFixed64, &out);
  PutLittleEndian(bits, 8, &out);
  if (step != 0) {  // proto3 leaves defaults out
    PutTag(2, kVarint, &out);
    PutVarint(static_cast<uint64_t>(step), &out);
  }
  return out;
}

}  // namespace

std::string EncodeFileVersionEvent(double wall_time) {
  std::string out = EventHeader(wall_time, 0);
  PutBytesField(3, "brain.Event:2", &out);
  return out;
}

std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const ScalarValues& scalars) {
  // Summary: 1 repeated Value; Value: 1 tag (string), 2 simple_value (float).
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytesField(1, tag, &v);
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    PutTag(2, kFixed32, &v);
    PutLittleEndian(bits, 4, &v);
    PutBytesField(1, v, &summary);
  }
  std::string out = EventHeader(wall_time, step);
  PutBytesField(5, summary, &out);
  return out;
}

std::string TfRecord(absl::string_view data) {
  std::string length;
  PutLittleEndian(data.size(), 8, &length);
  std::string out = length;
  PutLittleEndian(MaskedCrc32c(length), 4, &out);
  out.append(data.data(), data.size());
  PutLittleEndian(MaskedCrc32c(data), 4, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir, double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("--tensorboard: cannot create ", dir, ": ", ec.message()));
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    std::strcpy(host, "localhost");
  }
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.",
                   static_cast<int64_t>(std::floor(wall_time)), ".", host, ".",
                   static_cast<int64_t>(getpid()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  std::unique_ptr<EventFileWriter> writer(
      new EventFileWriter(path, std::move(out)));
  RETURN_IF_ERROR(writer->WriteRecord(EncodeFileVersionEvent(wall_time)));
  return writer;
}

absl::Status EventFileWriter::WriteScalars(double wall_time, int64_t step,
                                           const ScalarValues& scalars) {
  return WriteRecord(EncodeScalarEvent(wall_time, step, scalars));
}

absl::Status EventFileWriter::WriteRecord(const std::string& event) {
  errno = 0;
  out_ << TfRecord(event);
  out_.flush();
  if (!out_) {
    const int error = errno;
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ",
                                            error != 0 ? std::strerror(error) : "write failed"));
  }
  return absl::OkStatus();
}

}  // namespace trainc
