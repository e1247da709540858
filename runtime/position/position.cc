#include "runtime/position/position.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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
#include "compiler/ops/kernel_families.h"

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
std::string InstructionLabel(const Plan& plan, const Instruction& in) {
  for (const Bucket& b : plan.buckets) {
    if (b.all_reduce == in.id || b.all_gather == in.id) {
      const StepOp op = StepOpOfInstruction(in.op);
      const char* what = op == StepOp::kAllGather       ? "all-gather"
                         : op == StepOp::kReduceScatter ? "reduce-scatter"
                                                        : "all-reduce";
      return absl::StrCat(what, " of bucket ", b.id);
    }
  }
  return absl::StrCat(PhaseName(in.phase), " \"", in.label, "\"");
}

std::string Seconds(int64_t ns) { return absl::StrFormat("%.1f s", ns / 1e9); }

// "backward \"...\"" / "all-reduce of bucket 2" for an instruction id
// (host collectives are stored as -HostCollective).
std::string LabelOf(int64_t id, const std::vector<std::string>& labels) {
  if (id == -static_cast<int64_t>(HostCollective::kLossSum)) return "the loss sum";
  if (id == -static_cast<int64_t>(HostCollective::kStopVote)) return "the stop vote";
  return id >= 0 && id < static_cast<int64_t>(labels.size()) ? labels[id]
                                                             : absl::StrCat("instruction ", id);
}

// The label with its place: "... (instruction 57 of 120)".
std::string Placed(int64_t id, const std::vector<std::string>& labels) {
  return id >= 0 && id < static_cast<int64_t>(labels.size())
             ? absl::StrCat(labels[id], " (instruction ", id, " of ", labels.size(), ")")
             : LabelOf(id, labels);
}

// One rank's position, before the verdict on who is behind.
RankPosition Describe(const PositionSample& s) {
  RankPosition p;
  p.rank = s.rank;
  p.stage = static_cast<RankStage>(s.stage);
  p.step = s.step;
  p.instructions = static_cast<int64_t>(s.labels.size());
  switch (p.stage) {
    case RankStage::kStarting: p.state = "starting"; p.where = "starting (no step yet)"; return p;
    case RankStage::kEvaluating: p.state = "evaluating"; break;
    case RankStage::kCheckpointing: p.state = "writing a checkpoint"; break;
    case RankStage::kDone: p.state = "finished"; p.where = absl::StrCat("finished at step ", s.step); return p;
    case RankStage::kStep: break;
  }
  if (p.stage != RankStage::kStep) {
    p.where = absl::StrCat("step ", s.step, ", ", p.state);
    return p;
  }
  p.in_collective = s.comm_busy;
  const int64_t id = p.in_collective ? s.comm_instr : s.compute_instr;
  p.instruction = id >= 0 ? id : -1;
  p.label = LabelOf(id, s.labels);
  p.state = absl::StrCat(p.in_collective ? "in " : "running ", p.label);
  p.seconds = (p.in_collective ? s.comm_age_ns : s.compute_age_ns) / 1e9;
  p.where = p.in_collective
                ? absl::StrCat("step ", s.step, ", in ", Placed(id, s.labels), " for ",
                               Seconds(s.comm_age_ns), " (compute issued up to ",
                               Placed(s.compute_instr, s.labels), ")")
                : absl::StrCat("step ", s.step, ", ", Placed(id, s.labels), " for ",
                               Seconds(s.compute_age_ns));
  return p;
}

// The only silent pulse while others beat, else -1.
int SilentRank(const std::vector<PositionSample>& samples) {
  int silent = -1, silent_count = 0, beating = 0;
  for (const PositionSample& s : samples) {
    if (s.pulse == PositionSample::Pulse::kSilent) {
      silent = s.rank;
      ++silent_count;
    } else if (s.pulse == PositionSample::Pulse::kBeating) {
      ++beating;
    }
  }
  return silent_count == 1 && beating > 0 ? silent : -1;
}

// The one strictly behind all others in (step, compute instruction), else -1.
int LeastProgress(const std::vector<PositionSample>& samples) {
  auto progress = [](const PositionSample& s) { return std::make_pair(s.step, s.compute_instr); };
  const PositionSample* least = &samples[0];
  int ties = 0;
  for (const PositionSample& s : samples) {
    if (progress(s) < progress(*least)) {
      least = &s;
      ties = 0;
    } else if (&s != least && progress(s) == progress(*least)) {
      ++ties;
    }
  }
  return ties == 0 ? least->rank : -1;
}

std::vector<std::string> ReadLabels(const std::string& path) {
  std::vector<std::string> labels;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) labels.push_back(line);
  return labels;
}

PositionSample SampleOf(const PositionRecord& r, int rank, int64_t now) {
  PositionSample s;
  s.rank = rank;
  s.stage = r.stage.load(std::memory_order_relaxed);
  s.step = r.step.load(std::memory_order_relaxed);
  s.compute_instr = r.compute_instr.load(std::memory_order_relaxed);
  s.compute_age_ns = now - r.compute_since.load(std::memory_order_relaxed);
  s.comm_instr = r.comm_instr.load(std::memory_order_relaxed);
  s.comm_age_ns = now - r.comm_since.load(std::memory_order_relaxed);
  s.comm_busy = r.comm_busy.load(std::memory_order_relaxed) != 0;
  const int64_t alive = r.alive.load(std::memory_order_relaxed);
  // A frozen rank: its pulse is over a second old.
  constexpr int64_t kSilentNs = 1'000'000'000;
  s.pulse = alive == 0                   ? PositionSample::Pulse::kNone
            : now - alive > kSilentNs ? PositionSample::Pulse::kSilent
                                       : PositionSample::Pulse::kBeating;
  return s;
}

std::string StopNotePath(const std::string& dir) { return dir + "/stopped"; }

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
  for (const Instruction& in : plan.instructions) labels_.push_back(InstructionLabel(plan, in));
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

std::string PositionBoard::Where() const { return Describe(Sample(0)).where; }

PositionSample PositionBoard::Sample(int rank, bool with_labels) const {
  PositionSample s = SampleOf(*record_, rank, NowNs());
  s.pulse = PositionSample::Pulse::kNone;
  if (with_labels) s.labels = labels_;
  return s;
}

std::vector<RankPosition> JudgePositions(std::vector<PositionSample> samples, int behind) {
  if (behind < 0 && samples.size() > 1) behind = SilentRank(samples);
  if (behind < 0 && samples.size() > 1) behind = LeastProgress(samples);
  std::vector<RankPosition> positions;
  for (const PositionSample& s : samples) {
    positions.push_back(Describe(s));
    positions.back().behind = s.rank == behind;
  }
  return positions;
}

std::vector<RankPosition> ReadPositions(const std::string& dir, int world_size, int behind) {
  std::vector<PositionSample> samples;
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
      samples.push_back(SampleOf(*record, rank, now));
      samples.back().labels = ReadLabels(LabelsPath(dir, rank));
    }
    ::munmap(mapped, sizeof(PositionRecord));
  }
  return JudgePositions(std::move(samples), behind);
}

std::string FormatPositionTable(const std::vector<RankPosition>& positions) {
  if (positions.empty()) return "";
  std::string table = "where each rank was:\n";
  for (const RankPosition& p : positions) {
    absl::StrAppend(&table, "  rank ", p.rank, ": ", p.where, p.behind ? "  <- behind" : "", "\n");
  }
  return table;
}

std::string PositionTable(const std::string& dir, int world_size, int behind) {
  return FormatPositionTable(ReadPositions(dir, world_size, behind));
}

void WriteStopNote(const std::string& dir, const StopNote& note) {
  const std::string path = StopNotePath(dir);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << note.behind << "\n" << note.reason;
    if (!out) return;
  }
  std::rename(temp.c_str(), path.c_str());
}

std::optional<StopNote> ReadStopNote(const std::string& dir) {
  std::ifstream in(StopNotePath(dir));
  StopNote note;
  std::string first;
  if (!std::getline(in, first) || !absl::SimpleAtoi(first, &note.behind)) return std::nullopt;
  std::stringstream rest;
  rest << in.rdbuf();
  note.reason = rest.str();
  return note;
}

}  // namespace trainc
