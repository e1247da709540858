// Who am I in a multi-process job: rank, world size and where ranks meet,
// read from the environment that started this process.
//
// Recognised, first match wins:
//   1. trainc's own launcher (LaunchLocalWorkers): RANK, WORLD_SIZE,
//      LOCAL_RANK, TRAINC_RENDEZVOUS_DIR (a Gloo file-store folder) and
//      TRAINC_LAUNCHER=local.
//   2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
//   3. Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK.
//   4. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID.
// (torchrun inside a Slurm allocation sets both; its RANK is the one that
// counts, hence the order.) Where the ranks meet, first match wins:
// TRAINC_RENDEZVOUS (Redis), TRAINC_RENDEZVOUS_DIR (a shared folder), else
// MASTER_ADDR/MASTER_PORT: the job's store that rank 0 serves there
// (runtime/store; on MASTER_PORT + 1 under torchrun's agent store, see
// kStorePortEnv). One of them is required when world_size > 1, except
// under mpirun, whose ranks can meet through MPI itself (kNone: the MPI
// communicator, train --comm mpi).
//
//   ASSIGN_OR_RETURN(std::optional<RankInfo> rank, RankFromEnvironment());
//   if (!rank) { /* not a worker: single process, or launch gpus workers */ }
#ifndef TRAINC_RUNTIME_LAUNCH_RANK_ENV_H_
#define TRAINC_RUNTIME_LAUNCH_RANK_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace trainc {

// Set by LaunchLocalWorkers: the folder of the file-store rendezvous, and
// a marker telling its workers from a cluster launcher's.
inline constexpr char kRendezvousDirEnv[] = "TRAINC_RENDEZVOUS_DIR";
inline constexpr char kLocalLauncherEnv[] = "TRAINC_LAUNCHER";
// Any string the ranks of one job share. With TRAINC_RENDEZVOUS_DIR the
// ranks meet in its subfolder named after the job (this, else Slurm's
// SLURM_JOB_ID.SLURM_STEP_ID, torchrun's TORCHELASTIC_RUN_ID or Open
// MPI/PMIx's PMIX_NAMESPACE), so one shared folder serves every job: a
// rerun does not trip over the keys an earlier job left.
inline constexpr char kJobIdEnv[] = "TRAINC_JOB_ID";
// redis://HOST:PORT/JOB: the ranks meet through a Redis server (machines
// without a shared folder), under the key prefix JOB (one per job: keys of
// an earlier job with the same name collide). Takes precedence over
// TRAINC_RENDEZVOUS_DIR and MASTER_ADDR.
inline constexpr char kRendezvousEnv[] = "TRAINC_RENDEZVOUS";

// The port of the job's store on MASTER_ADDR, the same on every rank. By
// default MASTER_PORT, or MASTER_PORT + 1 when torchrun says its agent's
// own store holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's
// static rendezvous, the default with --master_addr/--master_port).
inline constexpr char kStorePortEnv[] = "TRAINC_STORE_PORT";
// A secret the job's ranks share: with the job id it makes the token a
// rank proves to the job's store. Unset: the plan's hash stands in for it.
inline constexpr char kJobSecretEnv[] = "TRAINC_JOB_SECRET";

enum class RendezvousKind {
  kNone,       // world_size 1: nobody to meet
  kFileStore,  // `rendezvous` is a folder every rank can read and write
  kTcpStore,   // `rendezvous` is "host:port" of rank 0's store (runtime/store)
  kRedis,      // `rendezvous` is "host:port" of a Redis server, `job` the prefix
};

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // index on this machine: picks the GPU
  RendezvousKind rendezvous_kind = RendezvousKind::kNone;
  std::string rendezvous;
  std::string job;            // kRedis: the job's key prefix; kTcpStore: its id (or "")
  // kTcpStore: where the port came from ("MASTER_ADDR:MASTER_PORT",
  // "MASTER_ADDR:MASTER_PORT+1 (...)"), for errors.
  std::string rendezvous_origin;
  bool from_cluster = false;  // false: started by LaunchLocalWorkers
  std::string source;         // "trainc", "torchrun", "mpirun", "slurm"
};

struct RedisAddress {
  std::string host;
  int port = 6379;
  std::string job;
};
// "redis://HOST[:PORT]/JOB", or an error saying what is wrong with it,
// naming where the user gave it: `origin` ("--rendezvous"), else
// kRendezvousEnv.
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url,
                                           const std::string& origin = "");

// std::nullopt when no launcher's variables are set. Malformed or
// inconsistent values (rank >= world size, RANK without WORLD_SIZE, no
// rendezvous) are errors naming the variable.
absl::StatusOr<std::optional<RankInfo>> RankFromEnvironment();

// The same over any lookup (tests); `getenv` returns nullopt when unset.
using EnvLookup =
    std::function<std::optional<std::string>(const std::string& name)>;
absl::StatusOr<std::optional<RankInfo>> RankFromEnvironment(
    const EnvLookup& getenv);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_LAUNCH_RANK_ENV_H_
