// Positions through a Redis server, for ranks that meet there and share no
// folder (TRAINC_RENDEZVOUS=redis://HOST:PORT/JOB): a failing rank prints
// every rank's position from it, as ranks sharing a folder do.
//
// Each rank publishes its board every 100 ms from a thread of its own, under
// trainc/JOB/positions/<rank> (its labels once, trainc/JOB/labels/<rank>),
// and sets trainc/JOB/alive/<rank> to expire after 1.5 s: the key of a
// frozen rank (SIGSTOP, a hung machine) expires by the server's clock, so
// no clock is shared between machines, while its last position stays.
// Ages ("for 61.0 s") are the publisher's, plus the wall-clock time since
// it published (machines kept in step by NTP).
//
//   ASSIGN_OR_RETURN(auto redis, RedisPositions::Connect(host, port, job));
//   redis->StartPublishing(board.get(), rank);
//   ... on failure:
//   std::cerr << FormatPositionTable(redis->ReadAll(world_size));
#ifndef TRAINC_RUNTIME_POSITION_REDIS_POSITIONS_H_
#define TRAINC_RUNTIME_POSITION_REDIS_POSITIONS_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "runtime/position/position.h"

struct redisContext;

namespace trainc {

class RedisPositions {
 public:
  // A connection to the server at host:port for the job's keys; an error
  // naming the server when it cannot be reached.
  static absl::StatusOr<std::unique_ptr<RedisPositions>> Connect(const std::string& host,
                                                                 int port,
                                                                 const std::string& job);
  ~RedisPositions();
  RedisPositions(const RedisPositions&) = delete;
  RedisPositions& operator=(const RedisPositions&) = delete;

  // Publishes `board` (its labels once, then its position every 100 ms) as
  // rank `rank` from a thread of its own until destroyed. `board` must
  // outlive this, and have its labels set.
  void StartPublishing(const PositionBoard* board, int rank);

  // Every rank's last published position, judged (JudgePositions; ranks
  // that published nothing are left out).
  std::vector<RankPosition> ReadAll(int world_size, int behind = -1);

 private:
  RedisPositions(redisContext* context, std::string prefix);
  void Publish(const PositionBoard& board, int rank, bool labels);

  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_);
  const std::string prefix_;  // "trainc/JOB/"
  absl::Notification stop_;
  std::thread publisher_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_POSITION_REDIS_POSITIONS_H_
