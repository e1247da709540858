// A rank's beats to the local launcher's watchdog, from a thread of their
// own: a private part of runtime/train (trainer.cc's).
//
// The launcher's watchdog hears from a pulse thread rather than from the
// step loop: a rank blocked in a collective because a peer froze is alive
// and must not be the one blamed. So silence means this process itself
// is frozen or gone; a rank whose loop is stuck while the process lives
// is caught by its peers' communicator timeout instead.
#ifndef TRAINC_RUNTIME_TRAIN_HEARTBEAT_PULSE_H_
#define TRAINC_RUNTIME_TRAIN_HEARTBEAT_PULSE_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "runtime/launch/heartbeat.h"

namespace trainc {

class HeartbeatPulse {
 public:
  // Beats every 500 ms from a thread of its own until destroyed, when
  // `heartbeat` is enabled (the local launcher started this process), and
  // calls `after_beat` (when given) after each beat.
  HeartbeatPulse(Heartbeat heartbeat, std::function<void()> after_beat);
  HeartbeatPulse(const HeartbeatPulse&) = delete;
  HeartbeatPulse& operator=(const HeartbeatPulse&) = delete;
  ~HeartbeatPulse();

 private:
  Heartbeat heartbeat_;
  const std::function<void()> after_beat_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_HEARTBEAT_PULSE_H_
