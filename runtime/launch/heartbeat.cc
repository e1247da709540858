#include "runtime/launch/heartbeat.h"

#include <sys/socket.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"

namespace trainc {
namespace {

constexpr int64_t kMinIntervalNs = 100'000'000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Heartbeat Heartbeat::FromEnvironment() {
  const char* text = std::getenv(kHeartbeatFdEnv);
  int fd = -1;
  if (text == nullptr || !absl::SimpleAtoi(text, &fd) || fd < 0) fd = -1;
  return Heartbeat(fd);
}

Heartbeat::Heartbeat(Heartbeat&& other) noexcept
    : fd_(other.fd_), last_beat_ns_(other.last_beat_ns_.load()) {
  other.fd_ = -1;
}

void Heartbeat::Beat() {
  if (fd_ < 0) return;
  const int64_t now = NowNs();
  int64_t last = last_beat_ns_.load(std::memory_order_relaxed);
  if (last != INT64_MIN && now - last < kMinIntervalNs) return;
  if (!last_beat_ns_.compare_exchange_strong(last, now)) return;
  const char byte = 1;
  // A full buffer means the launcher has beats to read already; a closed
  // peer means it is gone (and PR_SET_PDEATHSIG ends us). Neither is ours
  // to report.
  (void)::send(fd_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace trainc
