// nccl_communicator.h for programs: forwards to the CUDA plugin
// (runtime/cuda/cuda_loader.h), which holds nccl_communicator.cc, so the
// program itself links neither NCCL nor the CUDA runtime.
#include "compiler/util/status_macros.h"
#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/cuda/cuda_loader.h"

namespace trainc {

absl::StatusOr<std::string> NewNcclUniqueId() {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->new_nccl_unique_id();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, const std::string& unique_id) {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->create_nccl(rank, world_size, local_rank, unique_id);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, Communicator& bootstrap) {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->create_nccl_bootstrap(rank, world_size, local_rank, bootstrap);
}

}  // namespace trainc
