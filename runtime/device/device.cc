#include "runtime/device/device.h"

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/device/bf16.h"

namespace trainc {
namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status Device::SubmitTimed(Stream stream,
                                 std::function<absl::Status()> work,
                                 TimedCallback on_timed) {
  return Submit(stream, [work = std::move(work),
                         on_timed = std::move(on_timed)]() -> absl::Status {
    const int64_t begin = SteadyNowNs();
    absl::Status status = work();
    on_timed(begin, SteadyNowNs());
    return status;
  });
}

absl::Status DownloadFloats(Device& device, const Buffer& buffer, int64_t first,
                            int64_t count, float* out) {
  if (buffer.dtype != DType::kF32 && buffer.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer ", buffer.name, " holds ", DTypeName(buffer.dtype),
                     ", not floats"));
  }
  const int64_t size = DTypeBytes(buffer.dtype);
  if (first < 0 || count < 0 || (first + count) * size > buffer.bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "elements [", first, ", ", first + count, ") of buffer ", buffer.name, " (",
        buffer.bytes / size, " elements)"));
  }
  const int64_t offset = buffer.offset + first * size;
  if (buffer.dtype == DType::kF32) return device.Download(offset, out, count * size);
  std::vector<uint16_t> bf16(count);
  absl::Status status = device.Download(offset, bf16.data(), count * size);
  if (status.ok()) WidenBf16(bf16.data(), count, out);
  return status;
}

}  // namespace trainc
