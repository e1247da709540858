#include "runtime/comm/nccl/nccl_communicator.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/cuda/kernels.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

absl::Status NcclErrorToStatus(ncclResult_t result, ncclComm_t comm,
                               const char* expr) {
  std::string detail;
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') detail = absl::StrCat(": ", last);
  }
  const std::string message =
      absl::StrCat("nccl: ", expr, ": ", ncclGetErrorString(result), detail);
  // Remote and system errors are the environment (a peer died, the network
  // failed); invalid arguments or usage are the caller's.
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

#define NCCL_RETURN_IF_ERROR(comm, expr)                              \
  do {                                                                \
    const ncclResult_t trainc_nccl_res_ = (expr);                     \
    if (trainc_nccl_res_ != ncclSuccess) {                            \
      return NcclErrorToStatus(trainc_nccl_res_, (comm), #expr);      \
    }                                                                 \
  } while (0)

#define NCCL_CUDA_RETURN_IF_ERROR(expr)                                    \
  do {                                                                     \
    const cudaError_t trainc_cuda_err_ = (expr);                           \
    if (trainc_cuda_err_ != cudaSuccess) {                                 \
      return absl::InternalError(absl::StrCat("nccl: ", #expr, ": ",       \
                                              cudaGetErrorString(          \
                                                  trainc_cuda_err_)));     \
    }                                                                      \
  } while (0)

// A collective that has not finished after this long means a peer hung or
// died without NCCL noticing: the watchdog aborts the communicator.
// TRAINC_NCCL_TIMEOUT_S (whole seconds > 0) sets another bound.
constexpr auto kCollectiveTimeout = std::chrono::seconds(120);

std::chrono::seconds CollectiveTimeout() {
  const char* env = std::getenv("TRAINC_NCCL_TIMEOUT_S");
  int64_t seconds = 0;
  if (env != nullptr && absl::SimpleAtoi(env, &seconds) && seconds > 0) {
    return std::chrono::seconds(seconds);
  }
  return kCollectiveTimeout;
}
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);

// NCCL reports a failed peer asynchronously and a hung one never: every
// collective would then block the streams, and the process, forever. A
// watchdog thread polls ncclCommGetAsyncError and the completion of every
// collective enqueued outside stream capture (an event recorded after
// it); on an asynchronous error, or a collective older than
// CollectiveTimeout(), it calls ncclCommAbort (which makes the stuck kernels
// return), and every later call fails with that error, naming the rank.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world_size, int local_rank)
      : rank_(rank), world_size_(world_size), local_rank_(local_rank) {}

  ~NcclCommunicator() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
    for (Pending& p : pending_) cudaEventDestroy(p.done);
    // ncclCommDestroy waits for the communicator's pending work; an
    // aborted communicator is already gone.
    if (comm_ != nullptr && !aborted_) ncclCommDestroy(comm_);
    if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
    if (bf16_ != nullptr) cudaFree(bf16_);
    if (barrier_stream_ != nullptr) cudaStreamDestroy(barrier_stream_);
  }

  absl::Status Init(const ncclUniqueId& id) {
    NCCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(local_rank_));
    NCCL_RETURN_IF_ERROR(nullptr,
                         ncclCommInitRank(&comm_, world_size_, id, rank_));
    NCCL_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&barrier_stream_, cudaStreamNonBlocking));
    NCCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&barrier_buf_, sizeof(float)));
    int version = 0;
    NCCL_RETURN_IF_ERROR(comm_, ncclGetVersion(&version));
    // Collectives inside stream capture are supported from NCCL 2.9.6 on
    // (the library actually loaded, which may be older than the headers).
    capturable_ = version >= 20906;
    watchdog_ = std::thread([this] { Watch(); });
    return absl::OkStatus();
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool SupportsCapture() const override { return capturable_; }

  // A replayed graph's collectives: one event after the graph, watched
  // with the same bound as an eager collective's.
  absl::Status WatchStream(void* stream) override {
    RETURN_IF_ERROR(Failure());
    return Track(AsStream(stream));
  }
  absl::Status Health() override { return Failure(); }

  absl::Status AllReduceSum(float* data, int64_t count,
                            void* stream) override {
    RETURN_IF_ERROR(Failure());
    NCCL_RETURN_IF_ERROR(
        comm_, ncclAllReduce(data, data, static_cast<size_t>(count),
                             ncclFloat, ncclSum, comm_, AsStream(stream)));
    return Track(AsStream(stream));
  }

  // In place: NCCL's reduce-scatter is in place when the receive buffer
  // is the send buffer's segment of this rank.
  absl::Status ReduceScatterSum(float* data, int64_t count,
                                void* stream) override {
    RETURN_IF_ERROR(Failure());
    NCCL_RETURN_IF_ERROR(
        comm_, ncclReduceScatter(data, data + rank_ * count,
                                 static_cast<size_t>(count), ncclFloat, ncclSum,
                                 comm_, AsStream(stream)));
    return Track(AsStream(stream));
  }

  // bf16 on the wire: the bucket is cast into a bf16 buffer of this
  // communicator's, reduced there with ncclBfloat16 (NCCL adds in fp32 and
  // rounds each partial sum), and cast back.
  absl::Status AllReduceSumBf16(float* data, int64_t count,
                                void* stream) override {
    RETURN_IF_ERROR(Failure());
    cudaStream_t s = AsStream(stream);
    RETURN_IF_ERROR(ReserveBf16(count, s));
    NCCL_CUDA_RETURN_IF_ERROR(cuda::LaunchToBf16(data, bf16_, count, s));
    NCCL_RETURN_IF_ERROR(
        comm_, ncclAllReduce(bf16_, bf16_, static_cast<size_t>(count),
                             ncclBfloat16, ncclSum, comm_, s));
    NCCL_CUDA_RETURN_IF_ERROR(cuda::LaunchFromBf16(bf16_, data, count, s));
    return Track(s);
  }

  absl::Status ReduceScatterSumBf16(float* data, int64_t count,
                                    void* stream) override {
    RETURN_IF_ERROR(Failure());
    cudaStream_t s = AsStream(stream);
    const int64_t total = count * world_size_;
    RETURN_IF_ERROR(ReserveBf16(total, s));
    uint16_t* mine = static_cast<uint16_t*>(bf16_) + rank_ * count;
    NCCL_CUDA_RETURN_IF_ERROR(cuda::LaunchToBf16(data, bf16_, total, s));
    NCCL_RETURN_IF_ERROR(
        comm_, ncclReduceScatter(bf16_, mine, static_cast<size_t>(count),
                                 ncclBfloat16, ncclSum, comm_, s));
    NCCL_CUDA_RETURN_IF_ERROR(
        cuda::LaunchFromBf16(mine, data + rank_ * count, count, s));
    return Track(s);
  }

  absl::Status AllGather(const float* in, float* out, int64_t count,
                         void* stream) override {
    RETURN_IF_ERROR(Failure());
    NCCL_RETURN_IF_ERROR(
        comm_, ncclAllGather(in, out, static_cast<size_t>(count), ncclFloat,
                             comm_, AsStream(stream)));
    return Track(AsStream(stream));
  }

  absl::Status Broadcast(float* data, int64_t count, int root,
                         void* stream) override {
    if (root < 0 || root >= world_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: broadcast root ", root, " outside [0, ",
                       world_size_, ")"));
    }
    RETURN_IF_ERROR(Failure());
    NCCL_RETURN_IF_ERROR(
        comm_, ncclBroadcast(data, data, static_cast<size_t>(count),
                             ncclFloat, root, comm_, AsStream(stream)));
    return Track(AsStream(stream));
  }

  // NCCL has no barrier: a one-element all-reduce on a private stream,
  // waited for on the host, is one (every rank must contribute before any
  // completes). Asynchronous errors of earlier collectives show up here.
  absl::Status Barrier() override {
    RETURN_IF_ERROR(Failure());
    NCCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(local_rank_));
    NCCL_RETURN_IF_ERROR(comm_,
                         ncclAllReduce(barrier_buf_, barrier_buf_, 1,
                                       ncclFloat, ncclSum, comm_,
                                       barrier_stream_));
    RETURN_IF_ERROR(Track(barrier_stream_));
    // Polled rather than cudaStreamSynchronize: an abort by the watchdog
    // ends the wait with its error.
    for (;;) {
      const cudaError_t state = cudaStreamQuery(barrier_stream_);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) {
        RETURN_IF_ERROR(Failure());
        NCCL_CUDA_RETURN_IF_ERROR(state);
      }
      RETURN_IF_ERROR(Failure());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ncclResult_t async_error = ncclSuccess;
    NCCL_RETURN_IF_ERROR(comm_, ncclCommGetAsyncError(comm_, &async_error));
    NCCL_RETURN_IF_ERROR(comm_, async_error);
    return absl::OkStatus();
  }

 private:
  static cudaStream_t AsStream(void* stream) {
    return static_cast<cudaStream_t>(stream);
  }

  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point since;
  };

  // A bf16 buffer of at least `count` values for the bf16 collectives,
  // grown outside stream capture (the first, eager step reaches every
  // bucket's size before a step is captured). Growing waits for the work
  // on `stream` that may still read the old buffer.
  absl::Status ReserveBf16(int64_t count, cudaStream_t stream) {
    if (count <= bf16_capacity_) return absl::OkStatus();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    NCCL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl rank ", rank_, ": a bf16 collective of ", count,
          " values first seen inside stream capture"));
    }
    NCCL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (bf16_ != nullptr) NCCL_CUDA_RETURN_IF_ERROR(cudaFree(bf16_));
    bf16_ = nullptr;
    bf16_capacity_ = 0;
    NCCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&bf16_, static_cast<size_t>(count) * 2));
    bf16_capacity_ = count;
    return absl::OkStatus();
  }

  // The watchdog's verdict so far (OK while none).
  absl::Status Failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

  // Records an event after a collective just enqueued on `stream`, for the
  // watchdog; not inside stream capture (a graph replays its collectives
  // later, and the device's own synchronisation sees an aborted one).
  absl::Status Track(cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    NCCL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return absl::OkStatus();
    cudaEvent_t done;
    NCCL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    NCCL_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream));
    absl::MutexLock lock(&mu_);
    pending_.push_back({done, std::chrono::steady_clock::now()});
    return absl::OkStatus();
  }

  void Watch() {
    cudaSetDevice(local_rank_);
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (stop_ || !failure_.ok()) return;
        while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
          cudaEventDestroy(pending_.front().done);
          pending_.pop_front();
        }
        std::string why;
        ncclResult_t async_error = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async_error) == ncclSuccess &&
            async_error != ncclSuccess && async_error != ncclInProgress) {
          why = absl::StrCat("NCCL reported ", ncclGetErrorString(async_error),
                             " (a peer died or the network failed)");
        } else if (!pending_.empty() &&
                   std::chrono::steady_clock::now() - pending_.front().since > timeout_) {
          why = absl::StrCat("a collective did not finish in ", timeout_.count(),
                             " s (a peer hung or died)");
        }
        if (!why.empty()) {
          ncclCommAbort(comm_);
          aborted_ = true;
          failure_ = absl::UnavailableError(absl::StrCat(
              "nccl: rank ", rank_, ": ", why, "; communicator aborted"));
          return;
        }
      }
      std::this_thread::sleep_for(kWatchdogPeriod);
    }
  }

  const int rank_;
  const int world_size_;
  const int local_rank_;
  const std::chrono::seconds timeout_ = CollectiveTimeout();
  ncclComm_t comm_ = nullptr;
  cudaStream_t barrier_stream_ = nullptr;
  float* barrier_buf_ = nullptr;
  void* bf16_ = nullptr;  // grad_comm = bf16: the values on the wire
  int64_t bf16_capacity_ = 0;
  bool capturable_ = false;

  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ = false;  // written by the watchdog before it returns
  std::thread watchdog_;
};

absl::Status CheckRanks(int rank, int world_size, int local_rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size || local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank ", rank, " of ", world_size,
                     " (local rank ", local_rank, ") is not a valid rank"));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::UnavailableError("nccl: no CUDA GPU visible");
  }
  if (local_rank >= devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: local rank ", local_rank, " but only ", devices, " GPU(s)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  NCCL_RETURN_IF_ERROR(nullptr, ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, const std::string& unique_id) {
  RETURN_IF_ERROR(CheckRanks(rank, world_size, local_rank));
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: unique id of ", unique_id.size(),
                     " bytes, expected ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  auto comm = std::make_unique<NcclCommunicator>(rank, world_size, local_rank);
  RETURN_IF_ERROR(comm->Init(id));
  return std::unique_ptr<Communicator>(std::move(comm));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int local_rank, Communicator& bootstrap) {
  if (bootstrap.rank() != rank || bootstrap.world_size() != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: bootstrap communicator is rank ", bootstrap.rank(), " of ",
        bootstrap.world_size(), ", expected ", rank, " of ", world_size));
  }
  RETURN_IF_ERROR(CheckRanks(rank, world_size, local_rank));
  // The id travels as floats through the bootstrap's Broadcast, which only
  // copies bytes (no arithmetic), so any bit pattern survives.
  constexpr size_t kIdBytes = sizeof(ncclUniqueId::internal);
  static_assert(kIdBytes % sizeof(float) == 0, "id is whole floats");
  std::vector<float> packed(kIdBytes / sizeof(float), 0.0f);
  if (rank == 0) {
    ASSIGN_OR_RETURN(std::string id, NewNcclUniqueId());
    if (id.size() != kIdBytes) return absl::InternalError("nccl: id size");
    std::memcpy(packed.data(), id.data(), kIdBytes);
  }
  RETURN_IF_ERROR(bootstrap.Broadcast(packed.data(),
                                      static_cast<int64_t>(packed.size()),
                                      /*root=*/0, /*stream=*/nullptr));
  std::string id(kIdBytes, '\0');
  std::memcpy(id.data(), packed.data(), kIdBytes);
  return CreateNcclCommunicator(rank, world_size, local_rank, id);
}

}  // namespace trainc
