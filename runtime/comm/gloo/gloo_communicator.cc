#include "runtime/comm/gloo/gloo_communicator.h"

#include <signal.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gloo/allgather.h"
#include "gloo/allgather_ring.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
// Debian installs hiredis.h under hiredis/.
#define HIREDIS_NESTED_INCLUDE
#include "gloo/rendezvous/redis_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "runtime/device/bf16.h"
#include "runtime/store/store_client.h"
#include "runtime/store/store_server.h"

namespace trainc {
namespace {

// Gloo reports every failure by throwing; this is the one place that turns
// them into Statuses. A timeout is Gloo's way of saying a peer went away.
template <typename F>
absl::Status GlooCall(const char* what, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    // "Timed out waiting" (async pairs), "Read timeout" / "Write timeout"
    // (the all-reduce's pairs, which block in the socket calls).
    const bool timed_out = absl::StrContains(e.what(), "Timed out") ||
                           absl::StrContains(e.what(), "timed out") ||
                           absl::StrContains(e.what(), "timeout");
    const std::string msg = absl::StrCat("gloo ", what, ": ", e.what());
    return timed_out ? absl::DeadlineExceededError(msg)
                     : absl::UnavailableError(msg);
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat("gloo ", what, ": ", e.msg()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat("gloo ", what, ": unknown error"));
  }
}

}  // namespace

namespace gloo_internal {

// Gloo's legacy ring all-reduce, pointed at a new caller buffer per call.
//
// Why not gloo::allreduce (the "new-style" collective on unbound buffers)?
// On loopback it stalls on timers: measured between two processes here, its
// median was ~4 ms for 0.13 MiB (p90 44-90 ms) against 0.15 ms for this
// ring, and every per-bucket all-reduce of a step paid such a stall.
//
// AllreduceRing registers only buffers it owns (inbox, outbox, a dummy) with
// the pairs; the caller's pointer is read and written in run() alone. So one
// instance per element count serves every buffer of that count: set_data()
// rebinds it for free. Keying by count (not by pointer) matters: counts are
// the same on every rank for every call, pointers are not (host vectors),
// and each new instance takes context slots that must match across ranks.
template <typename T>
class ReboundAllreduceRing : public gloo::AllreduceRing<T> {
 public:
  ReboundAllreduceRing(const std::shared_ptr<gloo::Context>& context, int count,
                       const gloo::ReductionFunction<T>* fn =
                           gloo::ReductionFunction<T>::sum)
      : gloo::AllreduceRing<T>(context, {nullptr}, count, fn) {}

  void set_data(T* data) { this->ptrs_[0] = data; }
};

// One all-reduce of a fixed element count (a ring piece), run on any
// buffer of that count; every rank must end with the same bits, or the
// replicas drift apart.
//
// Two ranks: the legacy AllreduceRing, rebound to the caller's buffer. Each
// rank adds the other's values to its own, and a + b == b + a exactly.
// Three or more: AllreduceRing adds in a different order on every rank
// (rank r: (x_r + x_{r-1}) + x_{r-2} ...), so the replicas would round
// differently. Gloo's AllreduceRingChunked reduces each chunk once around
// the ring, then passes the sums on as copies: the same bits everywhere,
// and each rank sends 2(N-1)/N of the buffer rather than N-1 times it. It
// registers its buffer with the pairs, so it runs on a copy of its own.
template <typename T>
class PieceRing {
 public:
  PieceRing(const std::shared_ptr<gloo::Context>& context, int count,
            const gloo::ReductionFunction<T>* fn) {
    if (context->size == 2) {
      pair_ = std::make_unique<ReboundAllreduceRing<T>>(context, count, fn);
    } else {
      copy_.resize(static_cast<size_t>(count));
      chunked_ = std::make_unique<gloo::AllreduceRingChunked<T>>(
          context, std::vector<T*>{copy_.data()}, count, fn);
    }
  }

  void Run(T* data) {
    if (pair_ != nullptr) {
      pair_->set_data(data);
      pair_->run();
      return;
    }
    std::memcpy(copy_.data(), data, copy_.size() * sizeof(T));
    chunked_->run();
    std::memcpy(data, copy_.data(), copy_.size() * sizeof(T));
  }

 private:
  std::unique_ptr<ReboundAllreduceRing<T>> pair_;
  std::vector<T> copy_;
  std::unique_ptr<gloo::AllreduceRingChunked<T>> chunked_;
};

// bf16 gradients travel as their bits; each reduction step adds in fp32.
const gloo::ReductionFunction<uint16_t>* Bf16SumFunction() {
  static const auto* fn =
      new gloo::ReductionFunction<uint16_t>(gloo::SUM, &trainc::Bf16Sum);
  return fn;
}

// Gloo's legacy all-gather ring bound to one buffer, gathering in place:
// the ring copies its input into the output first, so this rank's segment
// goes through a copy of its own (source and destination may not overlap).
struct InPlaceAllgather {
  std::vector<float> mine;
  std::unique_ptr<gloo::AllgatherRing<float>> ring;
};

// A bf16 reduce-scatter bound to its own bf16 copy of one bucket.
struct Bf16ReduceScatter {
  std::vector<uint16_t> bits;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<uint16_t>> algorithm;
};

}  // namespace gloo_internal

namespace {

using gloo_internal::Bf16ReduceScatter;
using gloo_internal::Bf16SumFunction;
using gloo_internal::InPlaceAllgather;
using gloo_internal::PieceRing;

// Largest piece one ring moves (4 MiB). The ring's pairs block in send()
// until the bytes are in the kernel, and both ranks send before receiving:
// a piece must fit the loopback socket buffers or the two would wait on
// each other until the timeout. 16 MiB was measured to pass here; 4 MiB
// leaves room, and at that size the per-piece latency is noise.
constexpr int64_t kMaxRingFloats = int64_t{1} << 20;

// Runs the ring all-reduce over `data` in pieces of at most kMaxRingFloats
// elements, each piece on the cached ring of its count (built on first
// use). Bounded memory (each ring holds two or three buffers of its
// count): a cache of `max_rings` is emptied first. Every rank evicts at the same call, since the
// same counts arrive in the same order everywhere, so the slots of new
// rings stay matched.
template <typename T>
void RunRingPieces(
    absl::flat_hash_map<int64_t, std::unique_ptr<PieceRing<T>>>& rings,
    size_t max_rings, const std::shared_ptr<gloo::Context>& context,
    const gloo::ReductionFunction<T>* fn, T* data, int64_t count) {
  for (int64_t begin = 0; begin < count; begin += kMaxRingFloats) {
    const int64_t n = std::min(kMaxRingFloats, count - begin);
    auto it = rings.find(n);
    if (it == rings.end()) {
      if (rings.size() >= max_rings) rings.clear();
      it = rings.emplace(n, std::make_unique<PieceRing<T>>(context, static_cast<int>(n), fn))
               .first;
    }
    it->second->Run(data + begin);
  }
}

// Reduce-scatters and all-gathers of at most this many bytes in all run on
// the sync pairs too (each message is at most half of it, well inside the
// loopback socket buffers); larger ones on the async pairs, which cannot
// block each other.
constexpr int64_t kMaxSyncCollectiveBytes = int64_t{4} << 20;

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Gloo's FileStore, with its check for keys open to MissingRanks.
class CheckedFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool Has(const std::string& key) { return check({key}); }
};

// Gloo's Store over the job's store (runtime/store). Failures are thrown as
// Gloo's own; a wait that timed out in Gloo's words ("Wait timeout for
// key"), which RendezvousError reads.
class JobStore : public gloo::rendezvous::Store {
 public:
  JobStore(std::unique_ptr<StoreClient> client, absl::Duration timeout)
      : client_(std::move(client)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Throw(client_->Set(key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    absl::StatusOr<std::optional<std::string>> value = client_->Get(key);
    Throw(value.status());
    if (!value->has_value()) {
      throw gloo::IoException(absl::StrCat("the job's store lost key ", key));
    }
    return std::vector<char>((*value)->begin(), (*value)->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToMillis(timeout_)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Throw(client_->Wait(keys, absl::Milliseconds(timeout.count())));
  }
  bool Has(const std::string& key) {
    absl::StatusOr<bool> has = client_->Check({key});
    Throw(has.status());
    return *has;
  }

 private:
  static void Throw(const absl::Status& status) {
    if (!status.ok()) throw gloo::IoException(std::string(status.message()));
  }

  std::unique_ptr<StoreClient> client_;
  const absl::Duration timeout_;
};

// The ranks that never reached the rendezvous under `prefix`: in the store
// neither the key Gloo writes first (`<prefix>/rank_<r>`, its host name)
// nor its address (`<prefix>/<r>`). Gloo's own error names only the first
// key it waited for. Empty if the store cannot tell.
std::vector<int> MissingRanks(const std::function<bool(const std::string&)>& has_key,
                              const std::string& prefix, int world_size) {
  std::vector<int> missing;
  if (!has_key || prefix.empty()) return missing;
  absl::Status asked = GlooCall("rendezvous", [&] {
    for (int rank = 0; rank < world_size; ++rank) {
      if (!has_key(absl::StrCat(prefix, "/rank_", rank)) &&
          !has_key(absl::StrCat(prefix, "/", rank))) {
        missing.push_back(rank);
      }
    }
  });
  if (!asked.ok()) missing.clear();
  return missing;
}

// "rank 1 of 2 did not join job trainc within 20s (...)": the launcher
// (runtime/launch) reads the rank from it to name the cause.
absl::Status NotJoinedError(const GlooOptions& options, const std::vector<int>& missing,
                            absl::string_view gloo_message) {
  const bool redis = !options.redis_host.empty();
  const bool job_store = !options.store_host.empty();
  return absl::DeadlineExceededError(absl::StrCat(
      missing.empty()       ? std::string("a rank")
      : missing.size() == 1 ? absl::StrCat("rank ", missing[0])
                            : absl::StrCat("ranks ", absl::StrJoin(missing, ", ")),
      " of ", options.world_size, " did not join job ", options.store_prefix, " within ",
      absl::FormatDuration(options.timeout), " (",
      job_store ? absl::StrCat("the job's store at ", options.store_host, ":",
                               options.store_port, ", ", options.store_origin)
      : redis   ? absl::StrCat("Redis at ", options.redis_host, ":", options.redis_port)
                : absl::StrCat("rendezvous folder ", options.file_store_dir),
      "): did it start, with the same job name and rendezvous? (", gloo_message, ")"));
}

// A failed rendezvous said plainly: which ranks did not join (asking
// `missing` only then), a Redis job name used before, an earlier job's
// keys in the folder.
absl::Status RendezvousError(const GlooOptions& options, const absl::Status& status,
                             const std::function<std::vector<int>()>& missing) {
  const bool redis = !options.redis_host.empty();
  if (absl::StrContains(status.message(), "Wait timeout for key")) {
    // Gloo names only the first key it gave up on, and under the prefix of
    // whichever of the contexts was connecting: the store says which ranks
    // never wrote their key for that one.
    return NotJoinedError(options, missing(), status.message());
  }
  if (redis && absl::StrContains(status.message(), "already set")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gloo: the job name in ", options.store_prefix, " was used before on the Redis "
        "server at ", options.redis_host, ":", options.redis_port,
        ": give each job a new one (", status.message(), ")"));
  }
  if (redis) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: rendezvous through Redis at ", options.redis_host, ":", options.redis_port,
        " (key prefix ", options.store_prefix, "): ", status.message(),
        " (is redis-server running there, and is the job name new?)"));
  }
  if (absl::StrContains(status.message(), "already exists")) {
    // Gloo's file store keeps every key as a file: an earlier job's left in
    // the folder collide with this one's.
    return absl::FailedPreconditionError(absl::StrCat(
        "gloo: the rendezvous folder ", options.file_store_dir,
        " holds keys of an earlier job (", status.message(),
        "); give each job its own folder, or set TRAINC_JOB_ID to a string "
        "the job's ranks share (Slurm, torchrun and Open MPI jobs get one "
        "subfolder per job by themselves)"));
  }
  return status;
}

// The store every rank meets in, and a way to ask it for one key; rank 0
// of a job store also serves it.
struct RendezvousStore {
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::function<bool(const std::string&)> has_key;
};

// The job's store: rank 0 serves it, then every rank connects.
absl::StatusOr<RendezvousStore> OpenJobStore(const GlooOptions& options) {
  RendezvousStore out;
  if (options.rank == 0) {
    StoreServerOptions server;
    server.host = options.store_host;
    server.port = options.store_port;
    server.key = options.store_key;
    server.max_clients = 2 * options.world_size + 16;
    absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start(server);
    if (!started.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "gloo: rank 0 ", started.status().message(), " (", options.store_origin,
          "): rank 0 serves the job's store on that address of its machine; if another "
          "program holds the port, set TRAINC_STORE_PORT to a free one, the same for "
          "every rank"));
    }
    out.server = *std::move(started);
  }
  StoreClientOptions client;
  client.host = options.store_host;
  client.port = options.store_port;
  client.key = options.store_key;
  client.rank = options.rank;
  client.connect_timeout = options.timeout;
  client.io_timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<StoreClient>> connected = StoreClient::Connect(client);
  if (!connected.ok()) {
    return absl::Status(connected.status().code(),
                        absl::StrCat("gloo: rank ", options.rank, ": ",
                                     connected.status().message(), " (",
                                     options.store_origin, ")"));
  }
  auto store = std::make_unique<JobStore>(*std::move(connected), options.timeout);
  out.has_key = [s = store.get()](const std::string& key) { return s->Has(key); };
  out.store = std::move(store);
  return out;
}

absl::StatusOr<RendezvousStore> OpenStore(const GlooOptions& options) {
  if (!options.store_host.empty()) return OpenJobStore(options);
  RendezvousStore out;
  absl::Status status = GlooCall("rendezvous", [&] {
    if (!options.redis_host.empty()) {
      auto store = std::make_unique<gloo::rendezvous::RedisStore>(options.redis_host,
                                                                 options.redis_port);
      out.has_key = [s = store.get()](const std::string& key) { return s->check({key}); };
      out.store = std::move(store);
    } else {
      auto store = std::make_unique<CheckedFileStore>(options.file_store_dir);
      out.has_key = [s = store.get()](const std::string& key) { return s->Has(key); };
      out.store = std::move(store);
    }
  });
  if (!status.ok()) return RendezvousError(options, status, [] { return std::vector<int>(); });
  return out;
}

struct Contexts {
  std::shared_ptr<gloo::rendezvous::Context> main, ring, chunked;
};

// Connects the communicator's contexts, each a full mesh through `base`
// under a prefix of its own (`*joining`: the one being connected). Throws
// Gloo's exceptions.
Contexts ConnectContexts(const GlooOptions& options, gloo::rendezvous::Store& base,
                         std::string* joining) {
  Contexts contexts;
  gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  std::shared_ptr<gloo::transport::Device> device =
      gloo::transport::tcp::CreateDevice(attr);
  auto connect = [&](const std::string& prefix) {
    *joining = prefix;
    gloo::rendezvous::PrefixStore store(prefix, base);
    auto c = std::make_shared<gloo::rendezvous::Context>(options.rank,
                                                         options.world_size);
    // Before connecting: the timeout also bounds the wait for peers' keys.
    c->setTimeout(ToMillis(options.timeout));
    c->connectFullMesh(store, device);
    return c;
  };
  contexts.main = connect(options.store_prefix);
  // The all-reduce gets pairs of its own in sync mode: the calling thread
  // reads and writes the sockets itself instead of handing each message
  // to the device's event-loop thread and waiting on a condition
  // variable. Two wake-ups fewer per message, and no 2-4 ms stalls when
  // the loop thread is not scheduled (both cores busy with compute):
  // 0.9 MiB measured p99 4.9 ms -> 1.1 ms, mean 0.95 -> 0.63 ms. Sync
  // pairs cannot carry new-style (unbound buffer) collectives, hence two
  // contexts. The socket timeouts are the context timeout, so a silent
  // peer still fails after `timeout`.
  contexts.ring = connect(options.store_prefix + "_ring");
  // Three or more ranks: the all-reduce is Gloo's chunked ring (see
  // PieceRing), on async pairs of its own. Measured here: on the sync
  // pairs its double-buffered sends of large pieces stalled until the
  // timeout, and sharing the main context's pairs with the all-gathers
  // stalled deterministic steps for seconds.
  if (options.world_size > 2) contexts.chunked = connect(options.store_prefix + "_chunked");
  for (int peer = 0; peer < options.world_size; ++peer) {
    if (peer != options.rank) {
      contexts.ring->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
    }
  }
  return contexts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", options.rank, " of world ",
                     options.world_size));
  }
  if (options.world_size == 1) {
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(0, 1, nullptr, nullptr, nullptr));
  }
  // A dead peer is an error from the collective, not our death (see header).
  ::signal(SIGPIPE, SIG_IGN);
  const bool redis = !options.redis_host.empty();
  const bool job_store = !options.store_host.empty();
  if (!redis && !job_store && options.file_store_dir.empty()) {
    return absl::InvalidArgumentError("gloo: no rendezvous folder, Redis server or job store");
  }
  std::error_code error;
  if (!redis && !job_store) std::filesystem::create_directories(options.file_store_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: cannot create rendezvous folder ", options.file_store_dir, ": ",
        error.message()));
  }
  absl::StatusOr<RendezvousStore> store = OpenStore(options);
  if (!store.ok()) return store.status();
  Contexts contexts;
  std::string joining;  // the prefix of the context being connected
  absl::Status status = GlooCall("rendezvous", [&] {
    contexts = ConnectContexts(options, *store->store, &joining);
  });
  if (!status.ok()) {
    absl::Status failed = RendezvousError(options, status, [&] {
      return MissingRanks(store->has_key, joining, options.world_size);
    });
    if (store->server == nullptr) return failed;
    // Rank 0 serves on until the other ranks gave up too (at most another
    // timeout): each can then ask the store which ranks are missing.
    store->store.reset();
    store->server->WaitForClientsToLeave(options.timeout);
    const int64_t strangers = store->server->stats().wrong_tokens;
    if (strangers == 0) return failed;
    return absl::Status(failed.code(), absl::StrCat(
        failed.message(), "; the job's store refused ", strangers, " connection(s) whose token "
        "was not this job's: a rank started with another TRAINC_JOB_SECRET, job id or plan?"));
  }
  std::unique_ptr<GlooCommunicator> comm(
      new GlooCommunicator(options.rank, options.world_size,
                           std::move(contexts.main), std::move(contexts.ring),
                           std::move(contexts.chunked)));
  comm->store_server_ = std::move(store->server);
  return comm;
}

GlooCommunicator::GlooCommunicator(int rank, int world_size,
                                   std::shared_ptr<gloo::Context> context,
                                   std::shared_ptr<gloo::Context> ring_context,
                                   std::shared_ptr<gloo::Context> chunked_context)
    : rank_(rank),
      world_size_(world_size),
      context_(std::move(context)),
      ring_context_(std::move(ring_context)),
      chunked_context_(std::move(chunked_context)) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::Status GlooCommunicator::AllReduceSum(float* data, int64_t count,
                                            void* /*stream*/) {
  if (context_ == nullptr || count == 0) return absl::OkStatus();
  absl::Status status = GlooCall("allreduce", [&] {
    RunRingPieces(rings_, kMaxCachedRings, AllReduceContext(), gloo::ReductionFunction<float>::sum, data, count);
  });
  // A failed ring may hold half-done transfers: never reuse one.
  if (!status.ok()) rings_.clear();
  return status;
}

absl::Status GlooCommunicator::ReduceScatterSum(float* data, int64_t count,
                                                void* /*stream*/) {
  if (context_ == nullptr || count == 0) return absl::OkStatus();
  if (count * world_size_ > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo: reduce-scatter of ", count * world_size_,
        " floats is beyond Gloo's int count"));
  }
  absl::Status status = GlooCall("reduce-scatter", [&] {
    auto it = reduce_scatters_.find({data, count});
    if (it == reduce_scatters_.end()) {
      // Halving-doubling sends before it receives: on the sync pairs only
      // while the messages fit the socket buffers.
      const bool sync = count * world_size_ * 4 <= kMaxSyncCollectiveBytes;
      it = reduce_scatters_
               .emplace(std::make_pair(data, count),
                        std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
                            sync ? ring_context_ : context_, std::vector<float*>{data},
                            static_cast<int>(count * world_size_),
                            std::vector<int>(world_size_, static_cast<int>(count))))
               .first;
    }
    it->second->run();
  });
  if (!status.ok()) {
    reduce_scatters_.clear();
    return status;
  }
  // Gloo leaves this rank's sum at the start of the buffer.
  if (rank_ != 0) {
    std::memmove(data + rank_ * count, data, count * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllReduceSumBf16(float* data, int64_t count,
                                                void* /*stream*/) {
  if (context_ == nullptr || count == 0) return absl::OkStatus();
  bf16_.resize(static_cast<size_t>(count));
  NarrowToBf16(data, count, bf16_.data());
  absl::Status status = GlooCall("bf16 allreduce", [&] {
    // Pieces of the same element count as the fp32 ring's: half the bytes.
    RunRingPieces(bf16_rings_, kMaxCachedRings, AllReduceContext(), Bf16SumFunction(), bf16_.data(), count);
  });
  if (!status.ok()) {
    bf16_rings_.clear();
    return status;
  }
  WidenBf16(bf16_.data(), count, data);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::ReduceScatterSumBf16(float* data, int64_t count,
                                                    void* /*stream*/) {
  if (context_ == nullptr || count == 0) return absl::OkStatus();
  const int64_t total = count * world_size_;
  if (total > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo: reduce-scatter of ", total, " values is beyond Gloo's int count"));
  }
  auto it = bf16_reduce_scatters_.find({data, count});
  absl::Status status = GlooCall("bf16 reduce-scatter", [&] {
    if (it == bf16_reduce_scatters_.end()) {
      auto made = std::make_unique<Bf16ReduceScatter>();
      made->bits.resize(static_cast<size_t>(total));
      made->algorithm = std::make_unique<gloo::ReduceScatterHalvingDoubling<uint16_t>>(
          context_, std::vector<uint16_t*>{made->bits.data()}, static_cast<int>(total),
          std::vector<int>(world_size_, static_cast<int>(count)), Bf16SumFunction());
      it = bf16_reduce_scatters_.emplace(std::make_pair(data, count), std::move(made))
               .first;
    }
    std::vector<uint16_t>& bits = it->second->bits;
    NarrowToBf16(data, total, bits.data());
    it->second->algorithm->run();
  });
  if (!status.ok()) {
    bf16_reduce_scatters_.clear();
    return status;
  }
  // Gloo leaves this rank's sum at the start of the buffer.
  const std::vector<uint16_t>& bits = it->second->bits;
  float* mine = data + rank_ * count;
  WidenBf16(bits.data(), count, mine);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(const float* in, float* out,
                                         int64_t count, void* /*stream*/) {
  if (context_ == nullptr) {
    if (in != out) std::memmove(out, in, count * sizeof(float));
    return absl::OkStatus();
  }
  if (count == 0) return absl::OkStatus();
  if (in == out + rank_ * count &&
      count * world_size_ * 4 <= kMaxSyncCollectiveBytes) {
    // In place and small (ZeRO-1's parameter shards): the legacy ring on
    // the sync pairs, bound to this buffer, as ReduceScatterSum.
    absl::Status status = GlooCall("allgather", [&] {
      auto it = all_gathers_.find({out, count});
      if (it == all_gathers_.end()) {
        auto made = std::make_unique<InPlaceAllgather>();
        made->mine.resize(static_cast<size_t>(count));
        made->ring = std::make_unique<gloo::AllgatherRing<float>>(
            ring_context_, std::vector<const float*>{made->mine.data()}, out,
            static_cast<int>(count));
        it = all_gathers_.emplace(std::make_pair(out, count), std::move(made)).first;
      }
      std::memcpy(it->second->mine.data(), in, count * sizeof(float));
      it->second->ring->run();
    });
    if (!status.ok()) all_gathers_.clear();
    return status;
  }
  return GlooCall("allgather", [&] {
    gloo::AllgatherOptions opts(context_);
    // In place (this rank's input already at its place in the output):
    // Gloo then takes it from there.
    if (in != out + rank_ * count) {
      // Gloo's buffers are not const; the input is only read.
      opts.setInput(const_cast<float*>(in), static_cast<size_t>(count));
    }
    opts.setOutput(out, static_cast<size_t>(count) * world_size_);
    gloo::allgather(opts);
  });
}

namespace {

// What one all-reduce ring of `n` elements of `width` bytes holds: two
// ranks, Gloo's ring's inbox and outbox; more, the chunked ring's copy of
// the data and its two inboxes, of which a chunk is used.
int64_t RingBytes(int64_t n, int64_t width, int world_size) {
  if (world_size == 2) return 2 * n * width;
  const int64_t chunk = std::max<int64_t>(256, (n + 2 * world_size - 1) / (2 * world_size));
  return (n + 2 * chunk) * width;
}

// Gloo's halving-doubling reduce-scatter of `total` elements: its receive
// buffer (the count rounded up to 2^steps chunks) and its distribution
// buffer.
int64_t ReduceScatterBytes(int64_t total, int64_t width, int world_size) {
  int steps = 0;
  while ((2 << steps) <= world_size) ++steps;
  const int64_t chunks = int64_t{1} << steps;
  return ((total + chunks - 1) / chunks * chunks + total) * width;
}

}  // namespace

int64_t GlooCommunicator::HostBytes() const {
  int64_t bytes = static_cast<int64_t>(bf16_.size()) * 2;
  for (const auto& [n, ring] : rings_) bytes += RingBytes(n, 4, world_size_);
  for (const auto& [n, ring] : bf16_rings_) bytes += RingBytes(n, 2, world_size_);
  for (const auto& [key, algorithm] : reduce_scatters_) {
    bytes += ReduceScatterBytes(key.second * world_size_, 4, world_size_);
  }
  for (const auto& [key, scatter] : bf16_reduce_scatters_) {
    const int64_t total = key.second * world_size_;
    bytes += total * 2 + ReduceScatterBytes(total, 2, world_size_);
  }
  for (const auto& [key, gather] : all_gathers_) bytes += key.second * 4;
  return bytes;
}

absl::Status GlooCommunicator::Broadcast(float* data, int64_t count, int root,
                                         void* /*stream*/) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: broadcast root ",
                                                   root));
  }
  if (context_ == nullptr || count == 0) return absl::OkStatus();
  return GlooCall("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data, static_cast<size_t>(count));
    opts.setRoot(root);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (context_ == nullptr) return absl::OkStatus();
  return GlooCall("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    gloo::barrier(opts);
  });
}

}  // namespace trainc
