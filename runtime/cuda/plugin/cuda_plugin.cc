// libtrainc_cuda.so's entry point: the statically linked CUDA backend and
// NCCL communicator behind the table of cuda_plugin_abi.h. The shared
// object exports nothing else (cuda_plugin.lds).
#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_plugin_abi.h"

namespace trainc {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNccl(
    int rank, int world_size, int local_rank, const std::string& unique_id) {
  return CreateNcclCommunicator(rank, world_size, local_rank, unique_id);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclBootstrap(
    int rank, int world_size, int local_rank, Communicator& bootstrap) {
  return CreateNcclCommunicator(rank, world_size, local_rank, bootstrap);
}

#ifdef TRAINC_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

const CudaPluginV2 kPlugin = {
    TRAINC_CUDA_PLUGIN_ABI_VERSION,
    TRAINC_CUDA_PLUGIN_TOOLCHAIN,
    kBuiltWithCuda,
    &CudaDeviceCount,
    &CudaUnavailableReason,
    &CreateCudaDevice,
    &CudaWorkspaceBytes,
    &CudaBf16StagingBytes,
    &NewNcclUniqueId,
    &CreateNccl,
    &CreateNcclBootstrap,
};

}  // namespace
}  // namespace trainc

extern "C" __attribute__((visibility("default"))) const trainc::CudaPluginV2*
trainc_cuda_plugin_v2() {
  return &trainc::kPlugin;
}
