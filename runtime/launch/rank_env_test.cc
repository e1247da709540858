#include "runtime/launch/rank_env.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<std::optional<RankInfo>> From(
    std::map<std::string, std::string> vars) {
  return RankFromEnvironment(
      [vars](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
      });
}

TEST(RankEnvTest, NothingSetMeansNotAWorker) {
  auto info = From({{"HOME", "/root"}});
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->has_value());
}

TEST(RankEnvTest, LocalLauncher) {
  auto info = From({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", "1"},
                    {"TRAINC_RENDEZVOUS_DIR", "/tmp/r"},
                    {"TRAINC_LAUNCHER", "local"}});
  ASSERT_TRUE(info.ok()) << info.status();
  const RankInfo& r = **info;
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 3);
  EXPECT_EQ(r.rendezvous_kind, RendezvousKind::kFileStore);
  EXPECT_EQ(r.rendezvous, "/tmp/r");
  EXPECT_FALSE(r.from_cluster);
  EXPECT_EQ(r.source, "trainc");
}

TEST(RankEnvTest, Torchrun) {
  auto info = From({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                    {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
                    {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->rank, 5);
  EXPECT_EQ((*info)->local_rank, 1);
  EXPECT_EQ((*info)->rendezvous_kind, RendezvousKind::kTcpStore);
  EXPECT_EQ((*info)->rendezvous, "node0:29500");
  EXPECT_TRUE((*info)->from_cluster);
  EXPECT_EQ((*info)->source, "torchrun");
}

TEST(RankEnvTest, SlurmAndMpi) {
  auto slurm = From({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "n1"},
                     {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ((*slurm)->rank, 3);
  EXPECT_EQ((*slurm)->source, "slurm");
  auto mpi = From({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"TRAINC_RENDEZVOUS_DIR", "/shared/r"},
                   {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ((*mpi)->source, "mpirun");
  EXPECT_EQ((*mpi)->world_size, 2);
  EXPECT_TRUE((*mpi)->from_cluster);
  EXPECT_EQ((*mpi)->rendezvous_kind, RendezvousKind::kFileStore);
}

// A shared folder given by hand serves many jobs: each meets in a
// subfolder named after the job, so a rerun does not collide with the keys
// an earlier job left; our own launcher's folder is fresh per job already.
TEST(RankEnvTest, SharedRendezvousFolderGetsOneSubfolderPerJob) {
  auto slurm = From({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                     {"SLURM_JOB_ID", "4711"}, {"SLURM_STEP_ID", "0"},
                     {"TRAINC_RENDEZVOUS_DIR", "/shared/r"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ((*slurm)->rendezvous, "/shared/r/job-4711.0");
  auto own = From({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TRAINC_JOB_ID", "run 7/a"},
                   {"TORCHELASTIC_RUN_ID", "x"}, {"TRAINC_RENDEZVOUS_DIR", "/shared/r"}});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->rendezvous, "/shared/r/job-run_7_a");  // TRAINC_JOB_ID first, safe name
  auto none = From({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TRAINC_RENDEZVOUS_DIR", "/shared/r"}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ((*none)->rendezvous, "/shared/r");
  auto local = From({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_JOB_ID", "4711"},
                     {"TRAINC_RENDEZVOUS_DIR", "/tmp/r"}, {"TRAINC_LAUNCHER", "local"}});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->rendezvous, "/tmp/r");
}

TEST(RankEnvTest, RedisRendezvous) {
  auto info = From({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_JOB_ID", "9"},
                    {"TRAINC_RENDEZVOUS_DIR", "/shared/r"},
                    {"TRAINC_RENDEZVOUS", "redis://10.0.0.1:6380/run-42"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->rendezvous_kind, RendezvousKind::kRedis);
  EXPECT_EQ((*info)->rendezvous, "10.0.0.1:6380");
  EXPECT_EQ((*info)->job, "run-42");
  EXPECT_EQ((*info)->rank, 2);
  absl::StatusOr<RedisAddress> plain = ParseRedisUrl("redis://cache/j");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->port, 6379);
  for (const char* bad : {"http://h:1/j", "redis://h:1", "redis://h:1/", "redis://:1/j",
                          "redis://h:0/j", "redis://h:x/j", "redis://h:1/a/b"}) {
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  }
  auto broken = From({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TRAINC_RENDEZVOUS", "redis://h"}});
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("TRAINC_RENDEZVOUS=redis://h"));
}

TEST(RankEnvTest, SingleTaskNeedsNoRendezvous) {
  auto info = From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->rendezvous_kind, RendezvousKind::kNone);
}

// mpirun's ranks meet through MPI (the MPI communicator): no Gloo
// rendezvous is needed; Slurm's still do (above: MASTER_ADDR).
TEST(RankEnvTest, MpirunNeedsNoRendezvous) {
  auto info = From({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)->source, "mpirun");
  EXPECT_EQ((*info)->rendezvous_kind, RendezvousKind::kNone);
}

TEST(RankEnvTest, ErrorsNameTheVariable) {
  EXPECT_THAT(From({{"RANK", "0"}}).status().message(),
              HasSubstr("RANK is set but WORLD_SIZE is not"));
  EXPECT_THAT(From({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("RANK='x' is not an integer"));
  EXPECT_THAT(From({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("RANK=2 is not below WORLD_SIZE=2"));
  EXPECT_THAT(
      From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).status().message(),
      HasSubstr("give them a Redis server (--rendezvous redis://HOST:PORT/JOB"));
  // MASTER_ADDR is advice that works: rank 0 serves the job's store there.
  EXPECT_THAT(
      From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).status().message(),
      HasSubstr("set MASTER_ADDR and MASTER_PORT (rank 0 serves the job's store there)"));
}

// Under torchrun's static rendezvous its agent's own store holds
// MASTER_PORT on the master node: trainc's store takes the next port, on
// every rank alike; TRAINC_STORE_PORT overrides both.
TEST(RankEnvTest, TheJobStoreSidestepsTorchrunsAgentStore) {
  std::map<std::string, std::string> torchrun = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RUN_ID", "run-9"}};
  auto plain = From(torchrun);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->rendezvous, "node0:29500");
  EXPECT_EQ((*plain)->rendezvous_origin, "MASTER_ADDR:MASTER_PORT");
  EXPECT_EQ((*plain)->job, "run-9");
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  auto agent = From(torchrun);
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)->rendezvous, "node0:29501");
  EXPECT_THAT((*agent)->rendezvous_origin, HasSubstr("torchrun's agent store holds MASTER_PORT"));
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // c10d: MASTER_PORT is free
  EXPECT_EQ((*From(torchrun))->rendezvous, "node0:29500");
  torchrun["TRAINC_STORE_PORT"] = "40000";
  EXPECT_EQ((*From(torchrun))->rendezvous, "node0:40000");
  torchrun["TRAINC_STORE_PORT"] = "70000";
  EXPECT_THAT(From(torchrun).status().message(), HasSubstr("TRAINC_STORE_PORT=70000"));
  torchrun.erase("TRAINC_STORE_PORT");
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  torchrun["MASTER_PORT"] = "65535";
  EXPECT_THAT(From(torchrun).status().message(), HasSubstr("set TRAINC_STORE_PORT"));
}

TEST(RankEnvTest, ABadRedisAddressNamesWhereItWasGiven) {
  EXPECT_THAT(ParseRedisUrl("redis://:abc/job", "--rendezvous").status().message(),
              HasSubstr("--rendezvous redis://:abc/job: no host"));
  EXPECT_THAT(ParseRedisUrl("redis://:abc/job").status().message(),
              HasSubstr("TRAINC_RENDEZVOUS=redis://:abc/job: no host"));
}

}  // namespace
}  // namespace trainc
