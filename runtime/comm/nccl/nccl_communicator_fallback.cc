// Built instead of nccl_communicator.cc when Bazel found no CUDA toolkit.
#include "runtime/comm/nccl/nccl_communicator.h"

namespace trainc {
namespace {

absl::Status NoNccl() {
  return absl::UnavailableError(
      "nccl: trainc was built without the CUDA toolkit and NCCL");
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() { return NoNccl(); }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int, int, int, const std::string&) {
  return NoNccl();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int, int, int, Communicator&) {
  return NoNccl();
}

}  // namespace trainc
