#include "runtime/train/heartbeat_pulse.h"

#include <utility>

#include "absl/time/time.h"

namespace trainc {

HeartbeatPulse::HeartbeatPulse(Heartbeat heartbeat, std::function<void()> after_beat)
    : heartbeat_(std::move(heartbeat)), after_beat_(std::move(after_beat)) {
  if (!heartbeat_.enabled()) return;
  thread_ = std::thread([this] {
    do {
      heartbeat_.Beat();
      if (after_beat_) after_beat_();
    } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500)));
  });
}

HeartbeatPulse::~HeartbeatPulse() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

}  // namespace trainc
