// NcclCommunicator: the Communicator of runtime/comm/communicator.h over
// NCCL, for GPU buffers.
//
//   // Gloo (or any Communicator) is already up for the job: use it to hand
//   // rank 0's ncclUniqueId to everyone.
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
//                    CreateNcclCommunicator(rank, world, local_rank, *gloo));
//   nccl->AllReduceSum(grads, n, device->NativeStream(Stream::kComm));
//
// Collectives enqueue on the given cudaStream_t and return at once (the
// Communicator contract for GPUs); they may be captured into a CUDA graph.
// Barrier() is host-side: it returns once every rank reached it and all
// work this communicator enqueued before it has completed.
//
// Built without the CUDA toolkit, the factories return Unavailable.
#ifndef TRAINC_RUNTIME_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define TRAINC_RUNTIME_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"

namespace trainc {

// A fresh ncclUniqueId (NCCL_UNIQUE_ID_BYTES bytes) for rank 0 to share.
absl::StatusOr<std::string> NewNcclUniqueId();

// Joins the clique named by `unique_id` on GPU `local_rank`. Blocks until
// all `world_size` ranks have joined.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, const std::string& unique_id);

// The same, with rank 0's id broadcast over `bootstrap` (host memory, e.g.
// the job's Gloo communicator; its world must match).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, Communicator& bootstrap);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_COMM_NCCL_NCCL_COMMUNICATOR_H_
