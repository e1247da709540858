#include "runtime/launch/rank_env.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

// The variable names one launcher uses.
struct Convention {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  bool from_cluster;
};

constexpr Convention kConventions[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", true},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", true},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", true},
};

absl::StatusOr<int> ReadInt(const EnvLookup& getenv, const char* name,
                            int min_value) {
  std::optional<std::string> text = getenv(name);
  int value = 0;
  if (!text || !absl::SimpleAtoi(*text, &value) || value < min_value) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=",
                     text ? "'" + *text + "'" : "(unset)",
                     " is not an integer >= ", min_value));
  }
  return value;
}

// A byte of a job name: safe in a file name and a Redis key.
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

// The job's id as a file name ([A-Za-z0-9._-], other bytes as '_'), from
// the first of TRAINC_JOB_ID, SLURM_JOB_ID(.SLURM_STEP_ID),
// TORCHELASTIC_RUN_ID, PMIX_NAMESPACE that is set.
std::optional<std::string> JobId(const EnvLookup& getenv) {
  std::optional<std::string> id = getenv(kJobIdEnv);
  if (!id) {
    if (std::optional<std::string> slurm = getenv("SLURM_JOB_ID")) {
      id = *slurm;
      if (std::optional<std::string> step = getenv("SLURM_STEP_ID")) *id += "." + *step;
    }
  }
  if (!id) id = getenv("TORCHELASTIC_RUN_ID");
  if (!id) id = getenv("PMIX_NAMESPACE");
  if (!id || id->empty()) return std::nullopt;
  for (char& c : *id) {
    if (!IsNameChar(c)) c = '_';
  }
  return id;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url, const std::string& origin) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin.empty() ? absl::StrCat(kRendezvousEnv, "=") : origin + " ", url, ": ", why,
        " (expected redis://HOST:PORT/JOB, e.g. redis://10.0.0.1:6379/run-42)"));
  };
  constexpr char kScheme[] = "redis://";
  if (url.rfind(kScheme, 0) != 0) return bad("not a redis:// address");
  const std::string rest = url.substr(sizeof(kScheme) - 1);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size()) {
    return bad("no job name after the address");
  }
  const std::string address = rest.substr(0, slash);
  RedisAddress r;
  r.job = rest.substr(slash + 1);
  const size_t colon = address.rfind(':');
  r.host = colon == std::string::npos ? address : address.substr(0, colon);
  if (r.host.empty()) return bad("no host");
  if (colon != std::string::npos &&
      (!absl::SimpleAtoi(address.substr(colon + 1), &r.port) || r.port < 1 ||
       r.port > 65535)) {
    return bad("the port is not a number in [1, 65535]");
  }
  for (char c : r.job) {
    if (!IsNameChar(c)) return bad("the job name may hold letters, digits, '.', '_' and '-' only");
  }
  return r;
}

namespace {

struct StorePort {
  int port = 0;
  std::string origin;
};

// The job store's port: TRAINC_STORE_PORT, else MASTER_PORT, or the port
// after it when torchrun's agent store holds MASTER_PORT.
absl::StatusOr<StorePort> ReadStorePort(const EnvLookup& getenv) {
  if (getenv(kStorePortEnv)) {
    ASSIGN_OR_RETURN(int port, ReadInt(getenv, kStorePortEnv, 1));
    if (port > 65535) return absl::InvalidArgumentError(absl::StrCat(kStorePortEnv, "=", port, " is not a port"));
    return StorePort{port, absl::StrCat("MASTER_ADDR:", kStorePortEnv)};
  }
  ASSIGN_OR_RETURN(int master_port, ReadInt(getenv, "MASTER_PORT", 1));
  std::optional<std::string> agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  const int port = agent_store ? master_port + 1 : master_port;
  if (port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_PORT=", master_port, agent_store ? " + 1 (torchrun's agent store holds MASTER_PORT)" : "",
        " is not a port; set ", kStorePortEnv, " to a free one"));
  }
  if (!agent_store) return StorePort{port, "MASTER_ADDR:MASTER_PORT"};
  return StorePort{port, absl::StrCat("MASTER_ADDR:MASTER_PORT+1; torchrun's agent store holds "
                                      "MASTER_PORT=", master_port)};
}

absl::StatusOr<RankInfo> Read(const EnvLookup& getenv, const Convention& c) {
  RankInfo info;
  info.source = c.source;
  info.from_cluster = c.from_cluster;
  ASSIGN_OR_RETURN(info.rank, ReadInt(getenv, c.rank, 0));
  ASSIGN_OR_RETURN(info.world_size, ReadInt(getenv, c.world_size, 1));
  if (info.rank >= info.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.rank, "=", info.rank, " is not below ", c.world_size,
                     "=", info.world_size));
  }
  if (getenv(c.local_rank)) {
    ASSIGN_OR_RETURN(info.local_rank, ReadInt(getenv, c.local_rank, 0));
  } else {
    info.local_rank = info.rank;  // one machine
  }

  std::optional<std::string> dir = getenv(kRendezvousDirEnv);
  std::optional<std::string> job = JobId(getenv);
  if (std::optional<std::string> url = getenv(kRendezvousEnv)) {
    ASSIGN_OR_RETURN(RedisAddress redis, ParseRedisUrl(*url));
    info.rendezvous_kind = RendezvousKind::kRedis;
    info.rendezvous = absl::StrCat(redis.host, ":", redis.port);
    info.job = redis.job;
    if (getenv(kLocalLauncherEnv)) {
      info.source = "trainc";
      info.from_cluster = false;
    }
    return info;
  }
  std::optional<std::string> addr = getenv("MASTER_ADDR");
  std::optional<std::string> port = getenv("MASTER_PORT");
  if (dir) {
    // Ours, or a shared folder given by hand under mpirun/srun.
    info.rendezvous_kind = RendezvousKind::kFileStore;
    info.rendezvous = *dir;
    // Our launcher makes a fresh folder per job; a shared folder given by
    // hand gets one subfolder per job.
    if (!getenv(kLocalLauncherEnv) && job) info.rendezvous += "/job-" + *job;
    if (getenv(kLocalLauncherEnv)) {
      info.source = "trainc";
      info.from_cluster = false;
    }
  } else if (addr && port) {
    info.rendezvous_kind = RendezvousKind::kTcpStore;
    ASSIGN_OR_RETURN(const StorePort store, ReadStorePort(getenv));
    info.rendezvous = absl::StrCat(*addr, ":", store.port);
    info.rendezvous_origin = store.origin;
    info.job = job.value_or("");
  } else if (info.world_size > 1 && std::string(c.source) != "mpirun") {
    // (mpirun's ranks can meet through MPI itself: kNone, --comm mpi.)
    return absl::InvalidArgumentError(absl::StrCat(
        c.source, " set ", c.rank, " and ", c.world_size,
        " but the ranks have nowhere to meet: set MASTER_ADDR and MASTER_PORT (rank 0 "
        "serves the job's store there), give them a Redis server "
        "(--rendezvous redis://HOST:PORT/JOB, or ", kRendezvousEnv, ") or set ",
        kRendezvousDirEnv, " to a folder every rank shares"));
  }
  return info;
}

}  // namespace

absl::StatusOr<std::optional<RankInfo>> RankFromEnvironment(
    const EnvLookup& getenv) {
  for (const Convention& c : kConventions) {
    const bool has_rank = getenv(c.rank).has_value();
    const bool has_world = getenv(c.world_size).has_value();
    if (!has_rank && !has_world) continue;
    if (has_rank != has_world) {
      return absl::InvalidArgumentError(absl::StrCat(
          has_rank ? c.rank : c.world_size, " is set but ",
          has_rank ? c.world_size : c.rank, " is not"));
    }
    ASSIGN_OR_RETURN(RankInfo info, Read(getenv, c));
    return std::optional<RankInfo>(info);
  }
  return std::optional<RankInfo>();
}

absl::StatusOr<std::optional<RankInfo>> RankFromEnvironment() {
  return RankFromEnvironment(
      [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      });
}

}  // namespace trainc
