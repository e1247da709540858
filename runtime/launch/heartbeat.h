// Heartbeat: how a worker tells LaunchLocalWorkers that it is making
// progress, so that a hung rank is stopped instead of holding the job.
//
// The launcher hands each worker one end of a socket pair (its number in
// TRAINC_HEARTBEAT_FD). The watchdog of a rank is armed by its first beat:
// after that, a silence longer than LaunchOptions::heartbeat_timeout stops
// the job. A worker that never beats is not watched (the communicator's
// own timeout still bounds a collective that never completes), so startup
// may take as long as it needs; when a peer gives up on it, the launcher
// names it (stopped, or absent from the rendezvous) rather than the peer.
//
//   Heartbeat heartbeat = Heartbeat::FromEnvironment();
//   for (...) { RunStep(); heartbeat.Beat(); }
//
// Beat at least once per timeout, also during long evaluations.
#ifndef TRAINC_RUNTIME_LAUNCH_HEARTBEAT_H_
#define TRAINC_RUNTIME_LAUNCH_HEARTBEAT_H_

#include <atomic>
#include <cstdint>

namespace trainc {

inline constexpr char kHeartbeatFdEnv[] = "TRAINC_HEARTBEAT_FD";

class Heartbeat {
 public:
  // Does nothing when the process was not started by LaunchLocalWorkers.
  static Heartbeat FromEnvironment();
  explicit Heartbeat(int fd) : fd_(fd) {}
  Heartbeat(Heartbeat&& other) noexcept;

  // Cheap enough to call every step: a non-blocking one-byte send at most
  // every 100 ms, never blocks, never raises SIGPIPE. Thread-safe.
  void Beat();

  bool enabled() const { return fd_ >= 0; }

 private:
  int fd_;
  std::atomic<int64_t> last_beat_ns_{INT64_MIN};
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_LAUNCH_HEARTBEAT_H_
