#include "runtime/device/device.h"

#include <chrono>
#include <utility>

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

}  // namespace trainc
