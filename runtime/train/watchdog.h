// StepWatchdog: a rank's bound on a stall. A thread that calls `on_stall`
// once, from itself, when no step has finished for `timeout`: a peer that
// is stopped (SIGSTOP, a stuck file system) leaves every other rank waiting
// in a collective that has no timeout of its own (Open MPI's), and the job
// would hang forever. Armed by the first finished step, so start-up may
// take as long as it needs.
//
//   StepWatchdog watchdog(absl::Seconds(600), rank, [](const std::string& why) {
//     std::cerr << why; std::_Exit(1);  // the program's choice
//   });
//   for (...) { RunStep(); watchdog.StepDone(step); }
#ifndef TRAINC_RUNTIME_TRAIN_WATCHDOG_H_
#define TRAINC_RUNTIME_TRAIN_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace trainc {

class StepWatchdog {
 public:
  using OnStall = std::function<void(const std::string& message)>;
  // `where`, when given, says where this rank is (runtime/position) for
  // the message; it is called from the watchdog's thread.
  StepWatchdog(absl::Duration timeout, int rank, OnStall on_stall,
               std::function<std::string()> where = nullptr);
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;
  ~StepWatchdog();

  // Step `step` finished (or is still alive: evaluation and checkpoints
  // call it again). Two atomic stores.
  void StepDone(int64_t step);

 private:
  void Watch();

  const absl::Duration timeout_;
  const int rank_;
  const OnStall on_stall_;
  const std::function<std::string()> where_;
  std::atomic<int64_t> last_step_{-1};
  std::atomic<int64_t> last_ns_{0};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_WATCHDOG_H_
