#include "runtime/comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "runtime/device/bf16.h"

namespace trainc {
namespace {

std::atomic<bool> skip_finalize{false};

void FinalizeAtExit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && !skip_finalize.load()) MPI_Finalize();
}

// MPI_Init_thread once per process; the status of that one call after.
absl::Status InitOnce() {
  static std::once_flag once;
  static absl::Status* status = new absl::Status();
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {  // by someone else: only check the thread level
      int provided = 0;
      MPI_Query_thread(&provided);
      if (provided < MPI_THREAD_SERIALIZED) {
        *status = absl::FailedPreconditionError(
            "MPI was initialised without MPI_THREAD_SERIALIZED; the CPU "
            "device calls collectives from its comm thread");
      }
      return;
    }
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      *status = absl::UnavailableError(absl::StrCat("MPI_Init_thread failed (code ", rc, ")"));
      return;
    }
    std::atexit(FinalizeAtExit);
    if (provided < MPI_THREAD_SERIALIZED) {
      *status = absl::FailedPreconditionError(absl::StrCat(
          "this MPI provides thread level ", provided,
          " below MPI_THREAD_SERIALIZED; the CPU device calls collectives "
          "from its comm thread"));
    }
  });
  return *status;
}

absl::Status Check(const char* what, int rc) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  return absl::UnavailableError(
      absl::StrCat("mpi ", what, ": ", std::string(text, length), " (code ", rc, ")"));
}

// MPI counts are ints.
absl::Status CheckCount(const char* what, int64_t count) {
  if (count >= 0 && count <= INT_MAX) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("mpi ", what, ": count ", count, " is not in [0, 2^31)"));
}

// The bf16 sum of Communicator::AllReduceSumBf16: each partial sum in fp32,
// rounded to bf16.
void Bf16SumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  Bf16Sum(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in),
          static_cast<size_t>(*len));
}

MPI_Op Bf16SumMpiOp() {
  static MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&Bf16SumOp, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

}  // namespace

bool StartedByMpirun() { return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr; }

void SkipMpiFinalizeAtExit() { skip_finalize = true; }

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create() {
  if (absl::Status s = InitOnce(); !s.ok()) return s;
  MPI_Comm comm;
  if (absl::Status s = Check("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &comm)); !s.ok()) {
    return s;
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, rank, size));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int rank, int world_size)
    : comm_(comm), rank_(rank), world_size_(world_size) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

absl::Status MpiCommunicator::AllReduceSum(float* data, int64_t count, void*) {
  // In pieces below 2^31 elements (MPI counts are ints).
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    if (absl::Status s = Check("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, data + done, n,
                                                              MPI_FLOAT, MPI_SUM, comm_));
        !s.ok()) {
      return s;
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatterSum(float* data, int64_t count, void*) {
  if (absl::Status s = CheckCount("MPI_Reduce_scatter_block", count); !s.ok()) return s;
  // In place, MPI leaves this rank's sum at the start of `data`; the
  // interface wants it in this rank's segment (segments do not overlap).
  if (absl::Status s = Check("MPI_Reduce_scatter_block",
                             MPI_Reduce_scatter_block(MPI_IN_PLACE, data, static_cast<int>(count),
                                                      MPI_FLOAT, MPI_SUM, comm_));
      !s.ok()) {
    return s;
  }
  if (rank_ != 0) std::memcpy(data + rank_ * count, data, count * sizeof(float));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduceSumBf16(float* data, int64_t count, void*) {
  if (absl::Status s = CheckCount("MPI_Allreduce (bf16)", count); !s.ok()) return s;
  bf16_.resize(count);
  NarrowToBf16(data, count, bf16_.data());
  if (absl::Status s = Check("MPI_Allreduce (bf16)",
                             MPI_Allreduce(MPI_IN_PLACE, bf16_.data(), static_cast<int>(count),
                                           MPI_UINT16_T, Bf16SumMpiOp(), comm_));
      !s.ok()) {
    return s;
  }
  WidenBf16(bf16_.data(), count, data);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatterSumBf16(float* data, int64_t count, void*) {
  if (absl::Status s = CheckCount("MPI_Reduce_scatter_block (bf16)", count); !s.ok()) return s;
  const int64_t total = count * world_size_;
  bf16_.resize(total);
  bf16_out_.resize(count);
  NarrowToBf16(data, total, bf16_.data());
  if (absl::Status s = Check(
          "MPI_Reduce_scatter_block (bf16)",
          MPI_Reduce_scatter_block(bf16_.data(), bf16_out_.data(), static_cast<int>(count),
                                   MPI_UINT16_T, Bf16SumMpiOp(), comm_));
      !s.ok()) {
    return s;
  }
  float* mine = data + rank_ * count;
  WidenBf16(bf16_out_.data(), count, mine);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllGather(const float* in, float* out, int64_t count, void*) {
  if (absl::Status s = CheckCount("MPI_Allgather", count * world_size_); !s.ok()) return s;
  const int n = static_cast<int>(count);
  const bool in_place = in == out + rank_ * count;
  return Check("MPI_Allgather",
               in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, MPI_FLOAT, comm_)
                        : MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm_));
}

absl::Status MpiCommunicator::Broadcast(float* data, int64_t count, int root, void*) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi MPI_Bcast: root ", root, " is not a rank of ", world_size_));
  }
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    if (absl::Status s = Check("MPI_Bcast", MPI_Bcast(data + done, n, MPI_FLOAT, root, comm_));
        !s.ok()) {
      return s;
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Barrier() { return Check("MPI_Barrier", MPI_Barrier(comm_)); }

}  // namespace trainc
