#include "runtime/position/redis_positions.h"

#include <sys/time.h>

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

// Debian installs hiredis.h under hiredis/.
#include <hiredis/hiredis.h>

namespace trainc {
namespace {

constexpr int kPublishMs = 100;          // a frozen rank's position is this stale at most
constexpr int kAliveMs = 1500;           // a rank silent this long is frozen
constexpr int kKeepSeconds = 24 * 3600;  // positions outlive a job by a day

int64_t WallNs() { return absl::GetCurrentTimeNanos(); }

// "stage step compute_instr compute_age comm_instr comm_age comm_busy wall".
std::string Encode(const PositionSample& s) {
  return absl::StrCat(s.stage, " ", s.step, " ", s.compute_instr, " ", s.compute_age_ns, " ",
                      s.comm_instr, " ", s.comm_age_ns, " ", s.comm_busy ? 1 : 0, " ", WallNs());
}

// The sample of `text`, its ages brought up to now; false if malformed.
bool Decode(const std::string& text, PositionSample* s) {
  const std::vector<std::string> f = absl::StrSplit(text, ' ');
  int64_t v[8];
  if (f.size() != 8) return false;
  for (int i = 0; i < 8; ++i) {
    if (!absl::SimpleAtoi(f[i], &v[i])) return false;
  }
  const int64_t since = std::max<int64_t>(0, WallNs() - v[7]);
  s->stage = v[0];
  s->step = v[1];
  s->compute_instr = v[2];
  s->compute_age_ns = v[3] + since;
  s->comm_instr = v[4];
  s->comm_age_ns = v[5] + since;
  s->comm_busy = v[6] != 0;
  return true;
}

// One command, its reply freed; the reply's string (or "" for none).
std::string Command(redisContext* c, const std::vector<std::string>& args, bool* ok) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  *ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
  std::string out;
  if (reply != nullptr && reply->type == REDIS_REPLY_STRING) out.assign(reply->str, reply->len);
  if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) out = absl::StrCat(reply->integer);
  if (reply != nullptr) freeReplyObject(reply);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisPositions>> RedisPositions::Connect(const std::string& host,
                                                                       int port,
                                                                       const std::string& job) {
  const timeval timeout = {5, 0};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError(
        absl::StrCat("positions: cannot reach Redis at ", host, ":", port, ": ", why));
  }
  redisSetTimeout(c, timeout);
  return std::unique_ptr<RedisPositions>(new RedisPositions(c, absl::StrCat("trainc/", job, "/")));
}

RedisPositions::RedisPositions(redisContext* context, std::string prefix)
    : context_(context), prefix_(std::move(prefix)) {}

RedisPositions::~RedisPositions() {
  stop_.Notify();
  if (publisher_.joinable()) publisher_.join();
  absl::MutexLock lock(&mu_);
  redisFree(context_);
}

void RedisPositions::StartPublishing(const PositionBoard* board, int rank) {
  if (publisher_.joinable()) return;
  publisher_ = std::thread([this, board, rank] {
    bool labels = true;
    do {
      Publish(*board, rank, labels);
      labels = false;
    } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(kPublishMs)));
  });
}

// Best effort: a server gone only leaves the table without this rank.
void RedisPositions::Publish(const PositionBoard& board, int rank, bool labels) {
  const PositionSample sample = board.Sample(rank, /*with_labels=*/labels);
  const std::string r = absl::StrCat(rank);
  absl::MutexLock lock(&mu_);
  if (context_->err != 0 && redisReconnect(context_) != REDIS_OK) return;
  bool ok = true;
  if (labels) {
    Command(context_, {"SET", prefix_ + "labels/" + r, absl::StrJoin(sample.labels, "\n"), "EX",
                       absl::StrCat(kKeepSeconds)}, &ok);
  }
  Command(context_, {"SET", prefix_ + "positions/" + r, Encode(sample), "EX",
                     absl::StrCat(kKeepSeconds)}, &ok);
  Command(context_, {"SET", prefix_ + "alive/" + r, "1", "PX", absl::StrCat(kAliveMs)}, &ok);
}

std::vector<RankPosition> RedisPositions::ReadAll(int world_size, int behind) {
  std::vector<PositionSample> samples;
  absl::MutexLock lock(&mu_);
  if (context_->err != 0 && redisReconnect(context_) != REDIS_OK) return {};
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string r = absl::StrCat(rank);
    bool ok = true;
    PositionSample s;
    s.rank = rank;
    if (!Decode(Command(context_, {"GET", prefix_ + "positions/" + r}, &ok), &s)) continue;
    const std::string labels = Command(context_, {"GET", prefix_ + "labels/" + r}, &ok);
    if (!labels.empty()) s.labels = absl::StrSplit(labels, '\n');
    const bool alive = Command(context_, {"EXISTS", prefix_ + "alive/" + r}, &ok) == "1";
    s.pulse = alive ? PositionSample::Pulse::kBeating : PositionSample::Pulse::kSilent;
    samples.push_back(std::move(s));
  }
  return JudgePositions(std::move(samples), behind);
}

}  // namespace trainc
