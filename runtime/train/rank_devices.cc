#include "runtime/train/rank_devices.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "compiler/plan/plan_io.h"
#include "compiler/util/status_macros.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/comm/mpi/mpi_communicator.h"
#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/store/store_protocol.h"

namespace trainc {
namespace {

// The host communicator of one rank (host-side sums, barriers, NCCL's
// bootstrap): Gloo, or MPI with rank.comm kMpi (mpirun jobs). On the
// CPU it carries the gradients too; on CUDA NCCL does.
absl::StatusOr<std::unique_ptr<Communicator>> CreateHostCommunicator(const RankContext& rank,
                                                                    const Plan& plan) {
  std::unique_ptr<Communicator> host_comm;
  if (rank.comm == CommKind::kMpi) {
    if (!StartedByMpirun()) {
      return absl::FailedPreconditionError(
          "--comm mpi needs a job started by mpirun (e.g. mpirun -np 2 train FILE)");
    }
    ASSIGN_OR_RETURN(host_comm, MpiCommunicator::Create());
    if (host_comm->rank() != rank.rank || host_comm->world_size() != rank.world_size) {
      return absl::InternalError(absl::StrCat(
          "MPI says rank ", host_comm->rank(), " of ", host_comm->world_size(),
          " but the environment says ", rank.rank, " of ", rank.world_size));
    }
  } else if (rank.comm == CommKind::kGloo) {
    if (rank.world_size > 1 && rank.rendezvous_dir.empty() && rank.redis.empty() &&
        rank.store.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Gloo needs a rendezvous for ", rank.world_size, " ranks: set MASTER_ADDR and "
          "MASTER_PORT, TRAINC_RENDEZVOUS_DIR (a shared folder) or --rendezvous "
          "redis://HOST:PORT/JOB, or under mpirun use --comm mpi"));
    }
    GlooOptions gloo;
    gloo.rank = rank.rank;
    gloo.world_size = rank.world_size;
    gloo.file_store_dir = rank.rendezvous_dir;
    if (!rank.redis.empty()) {
      const size_t colon = rank.redis.rfind(':');
      gloo.redis_host = rank.redis.substr(0, colon);
      gloo.redis_port = std::atoi(rank.redis.c_str() + colon + 1);
      gloo.store_prefix = absl::StrCat("trainc/", rank.job);
    }
    if (!rank.store.empty()) {
      const size_t colon = rank.store.rfind(':');
      gloo.store_host = rank.store.substr(0, colon);
      gloo.store_port = std::atoi(rank.store.c_str() + colon + 1);
      gloo.store_origin = rank.store_origin;
      // Without a secret the plan stands in: a process that did not
      // compile this job's plan cannot make the token.
      gloo.store_key = store::JobKey(
          rank.job_secret.empty() ? absl::StrCat("plan ", PlanHash(plan)) : rank.job_secret,
          rank.job);
    }
    gloo.hostname = rank.hostname;
    // A peer silent this long fails the collective: with the launcher's 5 s
    // grace period a stuck job ends within 30 s.
    gloo.timeout = absl::Seconds(20);
    ASSIGN_OR_RETURN(host_comm, GlooCommunicator::Create(gloo));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown communicator '", EnumName(rank.comm), "' (gloo or mpi)"));
  }
  return host_comm;
}

// The CPU device of one rank, its threads from --blas-threads and its
// matrix products' library from --blas (auto: TRAINC_BLAS, else the fallback
// rule of runtime/cpu/gemm.h).
absl::StatusOr<std::unique_ptr<Device>> CreateCpuDevice(const TrainOptions& options,
                                                        std::ostream& log) {
  CpuDeviceOptions cpu;
  cpu.blas_threads = options.blas_threads;
  ASSIGN_OR_RETURN(cpu.blas, cpu::WithBlasEnv(options.blas));
  // torchrun (and some Slurm setups) export OMP_NUM_THREADS=1; the CPU
  // backend's threads come from --blas-threads instead, whatever it says.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && options.blas_threads > 0 &&
      std::string(omp) != std::to_string(options.blas_threads)) {
    log << "note: OMP_NUM_THREADS=" << omp << " (set by a launcher?) is not used: "
        << "OpenBLAS and oneDNN run " << options.blas_threads
        << " thread(s) per rank (--blas-threads)\n";
  }
  auto device = std::make_unique<CpuDevice>(cpu);
  // An OpenBLAS that does not know this CPU model runs far slower kernels.
  const std::string warning = cpu::GemmWarning(cpu::GemmLibraryInUse(), cpu::DescribeBlas());
  if (!warning.empty()) log << warning << "\n";
  return device;
}

}  // namespace

int64_t RankDevices::CommHostBytes() const {
  return host_comm->HostBytes() + (nccl ? nccl->HostBytes() : 0);
}

absl::StatusOr<DeviceKind> ResolveDevice(DeviceKind requested, int world_size) {
  // Not asked for cpu: counting GPUs loads the CUDA plugin where there is a
  // driver (cuda_device.h).
  if (requested == DeviceKind::kCpu) return DeviceKind::kCpu;
  const int gpus = CudaDeviceCount();
  if (requested == DeviceKind::kAuto) return gpus > 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (gpus == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: no CUDA GPU is visible on this machine (",
        CudaUnavailableReason(), "; use --device cpu or auto)"));
  }
  return DeviceKind::kCuda;
}

absl::StatusOr<PlanOptions> PlanOptionsForDevice(DeviceKind device, bool compile_only) {
  const bool for_cuda = compile_only && device == DeviceKind::kCuda;
  ASSIGN_OR_RETURN(const DeviceKind kind,
                   for_cuda ? DeviceKind::kCuda : ResolveDevice(device, 1));
  PlanOptions options;
  // bucket_mb = auto without a train { machine }: the device's profile.
  options.default_machine = DefaultMachineOfDevice(EnumName(kind));
  if (kind == DeviceKind::kCuda) {
    options.workspace = CudaWorkspaceBytes;
    options.bf16_staging = CudaBf16StagingBytes;
  } else {
    options.workspace = cpu::WorkspaceBytes;
    options.bf16_staging = CpuBf16StagingBytes;
  }
  return options;
}

absl::Status CreateRankDevices(const Plan& plan, const RankContext& rank,
                               const TrainOptions& options, std::ostream& log,
                               RankDevices* devices) {
  if (plan.world_size != rank.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan is for ", plan.world_size, " rank(s) but the job has ",
        rank.world_size));
  }
  ASSIGN_OR_RETURN(devices->kind, ResolveDevice(options.device, rank.world_size));
  if (devices->kind == DeviceKind::kCuda && rank.local_rank >= CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank.rank, " needs GPU ", rank.local_rank, " but this machine has ",
        CudaDeviceCount()));
  }
  ASSIGN_OR_RETURN(devices->host_comm, CreateHostCommunicator(rank, plan));
  if (devices->kind == DeviceKind::kCuda) {
    ASSIGN_OR_RETURN(devices->device, CreateCudaDevice(rank.local_rank));
    ASSIGN_OR_RETURN(devices->nccl, CreateNcclCommunicator(rank.rank, rank.world_size,
                                                           rank.local_rank,
                                                           *devices->host_comm));
  } else {
    ASSIGN_OR_RETURN(devices->device, CreateCpuDevice(options, log));
  }
  if (options.wrap_device) devices->device = options.wrap_device(std::move(devices->device));
  devices->zero_sharding.rank = rank.rank;
  Communicator* host_comm = devices->host_comm.get();
  devices->zero_sharding.all_gather = [host_comm](const float* mine, float* whole,
                                                  int64_t count) {
    return host_comm->AllGather(mine, whole, count, nullptr);
  };
  devices->sharding = plan.zero > 0 ? &devices->zero_sharding : nullptr;
  return absl::OkStatus();
}

}  // namespace trainc
