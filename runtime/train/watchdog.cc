#include "runtime/train/watchdog.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainc {

StepWatchdog::StepWatchdog(absl::Duration timeout, int rank, OnStall on_stall,
                           std::function<std::string()> where)
    : timeout_(timeout), rank_(rank), on_stall_(std::move(on_stall)), where_(std::move(where)) {
  thread_ = std::thread([this] { Watch(); });
}

StepWatchdog::~StepWatchdog() {
  stop_.Notify();
  thread_.join();
}

void StepWatchdog::StepDone(int64_t step) {
  last_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  last_step_.store(step, std::memory_order_release);
}

void StepWatchdog::Watch() {
  const absl::Duration poll = std::min(absl::Seconds(1), timeout_ / 4);
  while (!stop_.WaitForNotificationWithTimeout(poll)) {
    const int64_t step = last_step_.load(std::memory_order_acquire);
    if (step < 0) continue;  // not armed yet
    const absl::Duration quiet =
        absl::Nanoseconds(absl::GetCurrentTimeNanos() - last_ns_.load(std::memory_order_relaxed));
    if (quiet < timeout_) continue;
    on_stall_(absl::StrFormat(
        "rank %d: no step finished for %s (the last was step %d): a peer rank is stopped "
        "or gone, or a collective hangs; stopping the job (--watchdog %d)\n%s",
        rank_, absl::FormatDuration(absl::Trunc(quiet, absl::Seconds(1))), step,
        absl::ToInt64Seconds(timeout_),
        where_ ? absl::StrCat("rank ", rank_, " is at ", where_(), "\n") : std::string()));
    return;
  }
}

}  // namespace trainc
