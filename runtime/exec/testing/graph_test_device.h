// GraphDevice: a Device that implements step capture (device.h) on the CPU
// the way a CUDA graph behaves, so that the executor's capture protocol
// and whoever drives it (the trainer's feed-ahead) are tested without a GPU.
//
// It wraps another device (a CpuDevice unless given one). Between
// BeginCapture and EndCapture nothing runs: every call is recorded (an
// upload records a copy from an input slot of its own), reads and
// Synchronize fail. Replay(state) re-issues the recording, with the
// replay's StepState standing in for the device-side step scalars. Inputs
// fed in a BeginReplayInputs..EndReplayInputs window must match the
// captured uploads one for one and are held for the next Replay; uploads
// outside a window go to the arena (evaluation between replays).
#ifndef TRAINC_RUNTIME_EXEC_TESTING_GRAPH_TEST_DEVICE_H_
#define TRAINC_RUNTIME_EXEC_TESTING_GRAPH_TEST_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"

namespace trainc {
namespace testing {

class GraphDevice : public Device {
 public:
  // fail_after: while capturing, the call after this many recorded ones
  // fails (an op the graph cannot hold); -1 never. inner: the device that
  // runs the work (null: a CpuDevice of its own).
  explicit GraphDevice(int fail_after = -1, std::unique_ptr<Device> inner = nullptr);

  std::string name() const override { return "cpu-graph"; }
  absl::Status AllocateArena(int64_t bytes) override { return inner_->AllocateArena(bytes); }
  char* arena() override { return inner_->arena(); }
  absl::Status Prepare(const Plan& plan) override;
  absl::StatusOr<char*> AllocateScratch(int64_t bytes) override;
  int64_t HostBytes() const override { return inner_->HostBytes(); }

  absl::Status Upload(int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Download(int64_t offset, void* dst, int64_t bytes) override;
  absl::Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  absl::Status CopyFromHost(const void* src, void* dst, int64_t bytes) override;
  absl::Status Copy(Stream stream, const void* src, void* dst, int64_t bytes) override;
  absl::Status RunKernel(const Plan& plan, const Instruction& instr,
                         const StepState& state) override;
  absl::Status OrderedSum(Stream stream, const float* src, int64_t n, int64_t count,
                          float* dst) override;
  absl::Status Submit(Stream stream, std::function<absl::Status()> work) override;
  absl::Status RecordEvent(Stream stream, int event) override;
  absl::Status WaitEvent(Stream stream, int event) override;
  absl::Status ResetEvents(int num_events) override;
  absl::Status Synchronize() override;
  void* NativeStream(Stream stream) override { return inner_->NativeStream(stream); }

  bool SupportsCapture() const override { return true; }
  absl::Status BeginCapture() override;
  absl::Status EndCapture() override;
  absl::Status BeginReplayInputs() override;
  absl::Status EndReplayInputs() override;
  absl::Status Replay(const StepState& state) override;
  absl::Status DropCapture() override;

  int captures = 0, replays = 0;
  // "feed" (BeginReplayInputs), "replay", "sync", in call order.
  std::vector<std::string> log;
  // The step of each Replay, in order.
  std::vector<int64_t> replay_steps;
  // Called before each kernel runs (eagerly or replayed), with the state it
  // runs under (a replay's, not the one recorded at capture).
  std::function<void(const Plan&, const Instruction&, const StepState&)> before_kernel;

 private:
  // Records `op` into the graph; fails (as an op the graph cannot hold
  // would) once it holds fail_after_ calls.
  absl::Status Record(std::function<absl::Status()> op);

  struct Slot {
    int64_t offset;
    std::vector<char> data;
  };
  std::unique_ptr<Device> inner_;
  const int fail_after_;
  bool capturing_ = false, feeding_ = false;
  bool replaying_ = false;
  StepState replay_state_;
  std::vector<std::function<absl::Status()>> graph_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
};

}  // namespace testing
}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_TESTING_GRAPH_TEST_DEVICE_H_
