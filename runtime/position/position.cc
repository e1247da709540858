#include "runtime/position/position.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace trainc {
namespace {

constexpr int64_t kMagic = 0x74726e63706f7331;  // "trncpos1"

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string RecordPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank-", rank, ".pos");
}
std::string LabelsPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank-", rank, ".labels");
}

// "backward \"grad/h1 = linear_grad_input\"", "all-reduce of bucket 2".
std::string LabelOf(const Plan& plan, const Instruction& in) {
  for (const Bucket& b : plan.buckets) {
    if (b.all_reduce == in.id || b.all_gather == in.id) {
      const char* what = in.op == "all_gather"       ? "all-gather"
                         : in.op == "reduce_scatter" ? "reduce-scatter"
                                                     : "all-reduce";
      return absl::StrCat(what, " of bucket ", b.id);
    }
  }
  return absl::StrCat(PhaseName(in.phase), " \"", in.label, "\"");
}

std::string Seconds(int64_t ns) { return absl::StrFormat("%.1f s", ns / 1e9); }

// One rank's line from its record and labels.
std::string Line(const PositionRecord& r, const std::vector<std::string>& labels, int64_t now) {
  auto label = [&](int64_t id) {
    // Host collectives are stored as -HostCollective.
    if (id == -static_cast<int64_t>(HostCollective::kLossSum)) return std::string("the loss sum");
    if (id == -static_cast<int64_t>(HostCollective::kStopVote)) return std::string("the stop vote");
    return id >= 0 && id < static_cast<int64_t>(labels.size())
               ? absl::StrCat(labels[id], " (instruction ", id, " of ", labels.size(), ")")
               : absl::StrCat("instruction ", id);
  };
  const int64_t step = r.step.load(std::memory_order_relaxed);
  switch (static_cast<RankStage>(r.stage.load(std::memory_order_relaxed))) {
    case RankStage::kStarting: return "starting (no step yet)";
    case RankStage::kEvaluating: return absl::StrCat("step ", step, ", evaluating");
    case RankStage::kCheckpointing: return absl::StrCat("step ", step, ", writing a checkpoint");
    case RankStage::kDone: return absl::StrCat("finished at step ", step);
    case RankStage::kStep: break;
  }
  if (r.comm_busy.load(std::memory_order_relaxed) != 0) {
    return absl::StrCat("step ", step, ", in ", label(r.comm_instr.load()), " for ",
                        Seconds(now - r.comm_since.load()), " (compute issued up to ",
                        label(r.compute_instr.load()), ")");
  }
  return absl::StrCat("step ", step, ", ", label(r.compute_instr.load()), " for ",
                      Seconds(now - r.compute_since.load()));
}

std::vector<std::string> ReadLabels(const std::string& path) {
  std::vector<std::string> labels;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) labels.push_back(line);
  return labels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PositionBoard>> PositionBoard::ForRank(int rank,
                                                                     const std::string& folder) {
  std::unique_ptr<PositionBoard> board(new PositionBoard());
  board->record_ = &board->own_;
  const char* env = std::getenv(kPositionDirEnv);
  const std::string dir = !folder.empty() ? folder : env != nullptr ? env : "";
  if (!dir.empty()) {
    const std::string path = RecordPath(dir, rank);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, sizeof(PositionRecord)) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return absl::UnavailableError(absl::StrCat("cannot make ", path, ": ", why));
    }
    void* mapped =
        ::mmap(nullptr, sizeof(PositionRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped == MAP_FAILED) {
      return absl::UnavailableError(absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    }
    board->mapped_ = mapped;
    board->record_ = new (mapped) PositionRecord{};
    board->labels_path_ = LabelsPath(dir, rank);
  }
  PositionRecord& r = *board->record_;
  r.compute_instr.store(-1);
  r.comm_instr.store(-1);
  r.magic.store(kMagic);
  return board;
}

PositionBoard::~PositionBoard() {
  if (pulse_.joinable()) {
    stop_.store(true);
    pulse_.join();
  }
  if (mapped_ != nullptr) ::munmap(mapped_, sizeof(PositionRecord));
}

void PositionBoard::StartPulse() {
  if (pulse_.joinable()) return;
  pulse_ = std::thread([this] {
    while (!stop_.load()) {
      record_->alive.store(NowNs(), std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
}

void PositionBoard::SetLabels(const Plan& plan) {
  labels_.clear();
  for (const Instruction& in : plan.instructions) labels_.push_back(LabelOf(plan, in));
  if (labels_path_.empty()) return;
  // Best effort: a missing labels file only makes the table say
  // "instruction 57" instead of its label.
  std::ofstream out(labels_path_, std::ios::trunc);
  for (const std::string& l : labels_) out << l << "\n";
}

void PositionBoard::Stage(RankStage stage, int64_t step) {
  record_->step.store(step, std::memory_order_relaxed);
  record_->stage.store(static_cast<int64_t>(stage), std::memory_order_relaxed);
}

void PositionBoard::Compute(int64_t step, int instruction) {
  record_->step.store(step, std::memory_order_relaxed);
  record_->compute_since.store(NowNs(), std::memory_order_relaxed);
  record_->compute_instr.store(instruction, std::memory_order_relaxed);
}

void PositionBoard::CommBegin(int instruction) {
  record_->comm_since.store(NowNs(), std::memory_order_relaxed);
  record_->comm_instr.store(instruction, std::memory_order_relaxed);
  record_->comm_busy.store(1, std::memory_order_relaxed);
}

void PositionBoard::CommBegin(HostCollective what) {
  CommBegin(-static_cast<int>(what));
}

void PositionBoard::CommEnd() { record_->comm_busy.store(0, std::memory_order_relaxed); }

std::string PositionBoard::Where() const { return Line(*record_, labels_, NowNs()); }

std::string PositionTable(const std::string& dir, int world_size, int behind) {
  struct Read {
    int rank;
    std::string line;
    int64_t step, instr, alive;
  };
  std::vector<Read> ranks;
  const int64_t now = NowNs();
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = RecordPath(dir, rank);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    void* mapped = ::mmap(nullptr, sizeof(PositionRecord), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped == MAP_FAILED) continue;
    const auto* record = static_cast<const PositionRecord*>(mapped);
    if (record->magic.load() == kMagic) {
      ranks.push_back({rank, Line(*record, ReadLabels(LabelsPath(dir, rank)), now),
                       record->step.load(), record->compute_instr.load(), record->alive.load()});
    }
    ::munmap(mapped, sizeof(PositionRecord));
  }
  if (ranks.empty()) return "";
  if (behind < 0 && ranks.size() > 1) {
    // A frozen rank: its pulse is over a second old while the others beat.
    constexpr int64_t kSilentNs = 1'000'000'000;
    int silent = -1, beating = 0, silent_count = 0;
    for (const Read& r : ranks) {
      if (r.alive == 0) continue;
      if (now - r.alive > kSilentNs) {
        silent = r.rank;
        ++silent_count;
      } else {
        ++beating;
      }
    }
    if (silent_count == 1 && beating > 0) behind = silent;
  }
  if (behind < 0 && ranks.size() > 1) {
    // The one strictly behind all others in (step, compute instruction).
    auto progress = [](const Read& r) { return std::make_pair(r.step, r.instr); };
    const Read* least = &ranks[0];
    int ties = 0;
    for (const Read& r : ranks) {
      if (progress(r) < progress(*least)) {
        least = &r;
        ties = 0;
      } else if (&r != least && progress(r) == progress(*least)) {
        ++ties;
      }
    }
    if (ties == 0) behind = least->rank;
  }
  std::string table = "where each rank was:\n";
  for (const Read& r : ranks) {
    absl::StrAppend(&table, "  rank ", r.rank, ": ", r.line, r.rank == behind ? "  <- behind" : "",
                    "\n");
  }
  return table;
}

}  // namespace trainc
