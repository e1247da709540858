// HostTestDevice: a Device whose arena is host memory, for tests of code
// that only moves bytes in and out of the arena (loaders, checkpoints).
// Kernels are not supported; streams run inline.
#ifndef TRAINC_RUNTIME_DATA_HOST_TEST_DEVICE_H_
#define TRAINC_RUNTIME_DATA_HOST_TEST_DEVICE_H_

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/device/device.h"

namespace trainc {

class HostTestDevice : public Device {
 public:
  std::string name() const override { return "host-test"; }
  absl::Status AllocateArena(int64_t bytes) override {
    arena_.assign(bytes, 0);
    return absl::OkStatus();
  }
  char* arena() override { return arena_.data(); }
  absl::Status Upload(int64_t offset, const void* src,
                      int64_t bytes) override {
    if (offset < 0 || offset + bytes > static_cast<int64_t>(arena_.size())) {
      return absl::OutOfRangeError("upload outside the arena");
    }
    std::memcpy(arena_.data() + offset, src, bytes);
    ++uploads;
    return absl::OkStatus();
  }
  absl::Status Download(int64_t offset, void* dst, int64_t bytes) override {
    if (offset < 0 || offset + bytes > static_cast<int64_t>(arena_.size())) {
      return absl::OutOfRangeError("download outside the arena");
    }
    std::memcpy(dst, arena_.data() + offset, bytes);
    return absl::OkStatus();
  }
  absl::Status RunKernel(const Plan&, const Instruction&,
                         const StepState&) override {
    return absl::UnimplementedError("HostTestDevice runs no kernels");
  }
  absl::Status OrderedSum(Stream, const float*, int64_t, int64_t,
                          float*) override {
    return absl::UnimplementedError("HostTestDevice runs no kernels");
  }
  absl::Status Submit(Stream, std::function<absl::Status()> work) override {
    return work();
  }
  absl::Status RecordEvent(Stream, int) override { return absl::OkStatus(); }
  absl::Status WaitEvent(Stream, int) override { return absl::OkStatus(); }
  absl::Status ResetEvents(int) override { return absl::OkStatus(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  void* NativeStream(Stream) override { return nullptr; }
  absl::Status Copy(Stream, const void* src, void* dst,
                    int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(const void* src, void* dst, int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(const void* src, void* dst,
                            int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  template <typename T>
  const T* At(int64_t offset) const {
    return reinterpret_cast<const T*>(arena_.data() + offset);
  }

  int uploads = 0;

 private:
  std::vector<char> arena_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_HOST_TEST_DEVICE_H_
