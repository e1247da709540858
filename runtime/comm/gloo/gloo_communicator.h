// GlooCommunicator: the Communicator of runtime/comm/communicator.h over
// Gloo's TCP transport, for CPU ranks.
//
//   GlooOptions options;
//   options.rank = rank;
//   options.world_size = world;
//   options.file_store_dir = "/tmp/job-1234";  // shared by the job's ranks
//   ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> comm,
//                    GlooCommunicator::Create(options));
//
// Create blocks until every rank has joined (a full mesh of TCP pairs) or the
// timeout passes. Rendezvous is through Gloo's FileStore in a folder every
// rank can see: right for the ranks of one machine. The folder must be fresh
// per job (or `store_prefix` unique per job): stale keys of an earlier run
// would be read as this run's addresses. Or through a Redis server, or the
// job's own store (runtime/store) on `store_host`:`store_port`: rank 0
// serves it for the communicator's lifetime, every rank connects with the
// job's key.
//
// Collectives block the calling thread (the CPU device's comm stream) until
// done; `stream` is ignored. Every Gloo failure, a dead peer included, comes
// back as a Status after at most `timeout`: no exception leaves this class.
// Calls must not overlap (Gloo pairs carry one collective at a time per tag):
// the comm stream serialises them, and Barrier() is for between steps.
// world_size 1 needs no rendezvous and every collective is a copy or nothing.
//
// Creating a communicator of more than one rank sets SIGPIPE to be ignored
// in this process: Gloo's TCP pairs write with writev(), which cannot ask
// for MSG_NOSIGNAL, so a write to a peer that has just died would kill this
// rank silently (signal 13) instead of failing the collective with EPIPE.
#ifndef TRAINC_RUNTIME_COMM_GLOO_GLOO_COMMUNICATOR_H_
#define TRAINC_RUNTIME_COMM_GLOO_GLOO_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"

namespace gloo {
class Context;
template <typename T>
class ReduceScatterHalvingDoubling;
}  // namespace gloo

namespace trainc {

class StoreServer;

namespace gloo_internal {
template <typename T>
class PieceRing;             // gloo_communicator.cc
struct Bf16ReduceScatter;    // gloo_communicator.cc
struct InPlaceAllgather;     // gloo_communicator.cc
}  // namespace gloo_internal

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Folder for the FileStore rendezvous (created if missing).
  std::string file_store_dir;
  // Or a Redis server (Gloo's RedisStore): used when redis_host is set.
  std::string redis_host;
  int redis_port = 6379;
  // Or the job's store: rank 0 serves it on store_host:store_port (used
  // when store_host is set); every rank proves store_key (store::JobKey).
  std::string store_host;
  int store_port = 0;
  std::string store_key;
  // Where the address came from, for errors ("MASTER_ADDR:MASTER_PORT").
  std::string store_origin;
  // Namespace inside the store, so that several groups can share a folder.
  std::string store_prefix = "trainc";
  // Address this rank's transport listens on; peers must reach it.
  std::string hostname = "127.0.0.1";
  // Rendezvous and every collective; a peer silent for longer is an error.
  absl::Duration timeout = absl::Seconds(30);
};

class GlooCommunicator : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      const GlooOptions& options);
  ~GlooCommunicator() override;  // out of line: PieceRing

  std::string name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduceSum(float* data, int64_t count, void* stream) override;
  absl::Status ReduceScatterSum(float* data, int64_t count,
                                void* stream) override;
  absl::Status AllReduceSumBf16(float* data, int64_t count,
                                void* stream) override;
  absl::Status ReduceScatterSumBf16(float* data, int64_t count,
                                    void* stream) override;
  absl::Status AllGather(const float* in, float* out, int64_t count,
                         void* stream) override;
  absl::Status Broadcast(float* data, int64_t count, int root,
                         void* stream) override;
  absl::Status Barrier() override;
  int64_t HostBytes() const override;

 private:
  GlooCommunicator(int rank, int world_size,
                   std::shared_ptr<gloo::Context> context,
                   std::shared_ptr<gloo::Context> ring_context,
                   std::shared_ptr<gloo::Context> chunked_context);

  // Distinct element counts whose all-reduce state is kept (two or three
  // buffers of that count each); more than a training step's buckets plus the
  // trainer's few host sums.
  static constexpr size_t kMaxCachedRings = 64;

  const int rank_;
  const int world_size_;
  // Rank 0 with the job's store: served until the communicator goes (a
  // peer may still be reading the last addresses when this rank is done).
  std::unique_ptr<StoreServer> store_server_;
  // AllGather, Broadcast, Barrier; null when world_size == 1.
  std::shared_ptr<gloo::Context> context_;
  // AllReduceSum (two ranks) and the small ZeRO-1 collectives: its pairs
  // are in Gloo's sync mode (see Create).
  std::shared_ptr<gloo::Context> ring_context_;
  // AllReduceSum with three or more ranks (Gloo's chunked ring; null with
  // fewer).
  std::shared_ptr<gloo::Context> chunked_context_;
  const std::shared_ptr<gloo::Context>& AllReduceContext() const {
    return chunked_context_ != nullptr ? chunked_context_ : ring_context_;
  }
  // AllReduceSum's ring per element count (a piece of at most 4 MiB), built
  // on first use; collective: every rank builds it at the same call.
  absl::flat_hash_map<int64_t,
                      std::unique_ptr<gloo_internal::PieceRing<float>>>
      rings_;
  // The same for bf16 gradients (uint16_t on the wire, summed in fp32),
  // and the bf16 copy of the bucket they reduce.
  absl::flat_hash_map<int64_t,
                      std::unique_ptr<gloo_internal::PieceRing<uint16_t>>>
      bf16_rings_;
  std::vector<uint16_t> bf16_;
  // ReduceScatterSum's algorithm per (buffer, count): Gloo's halving-
  // doubling binds the caller's buffer. Built on first use, in the same
  // call order on every rank; the buffers are the arena's buckets, so a
  // run builds one per bucket.
  absl::flat_hash_map<std::pair<float*, int64_t>,
                      std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>>>
      reduce_scatters_;
  // In-place AllGathers small enough for the sync pairs, per (buffer,
  // count), built as reduce_scatters_.
  absl::flat_hash_map<std::pair<float*, int64_t>,
                      std::unique_ptr<gloo_internal::InPlaceAllgather>>
      all_gathers_;
  // ReduceScatterSumBf16's, each with the bf16 buffer it binds.
  absl::flat_hash_map<std::pair<float*, int64_t>,
                      std::unique_ptr<gloo_internal::Bf16ReduceScatter>>
      bf16_reduce_scatters_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_COMM_GLOO_GLOO_COMMUNICATOR_H_
