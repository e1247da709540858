#include "compiler/planner/memory_search.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/cost/simulator.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

struct Candidate {
  int64_t micro_batch = 0;
  int64_t zero = 0;
  bool recompute = false;
  ZeroAccumulate accumulate = ZeroAccumulate::kAuto;  // zero 2: how micro-steps add
  int64_t bytes = 0;
  double step_us = 0;
  bool fits = false;
  MemoryReport memory;  // its plan's, for a refusal
};

// "1.50 GiB", or "12.3 MiB" below a GiB.
std::string GiB(int64_t bytes) {
  if (bytes < (int64_t{1} << 30)) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
}

// Micro-batches to try: the given one, or every divisor of the rank's
// share of the global batch.
std::vector<int64_t> MicroBatches(const TrainConfig& t) {
  if (!t.micro_batch_auto) return {t.micro_batch};
  const int64_t per_rank = t.global_batch / t.gpus;
  std::vector<int64_t> sizes;
  for (int64_t m = 1; m <= per_rank; ++m) {
    if (per_rank % m == 0) sizes.push_back(m);
  }
  return sizes;
}

TrainSpec CandidateSpec(const TrainSpec& spec, const Candidate& c) {
  TrainSpec s = spec;
  TrainConfig& t = s.train;
  t.micro_batch_auto = false;  // (memory_bytes stays: it caps bucket_mb = auto)
  t.micro_batch = c.micro_batch;
  t.accumulate = t.global_batch / (t.gpus * c.micro_batch);
  t.zero = c.zero;
  t.zero_accumulate = c.accumulate;
  t.recompute = c.recompute;
  // ZeRO-3 candidates are planned one bucket of prefetch ahead (not every
  // depth), and the plan kept keeps it: the table's figures are its own.
  if (t.zero == 3 && t.zero_prefetch < 0) t.zero_prefetch = 1;
  return s;
}

std::string Describe(const Candidate& c, const TrainConfig& t) {
  return absl::StrFormat("micro_batch %d x accumulate %d, zero %d%s, recompute %s",
                         c.micro_batch, t.global_batch / (t.gpus * c.micro_batch), c.zero,
                         c.accumulate == ZeroAccumulate::kShard ? " (shard)" : "",
                         c.recompute ? "on" : "off");
}

// ZeRO stages to try, each with how its micro-steps add up: zero 2 and 3
// both ways when there are several micro-steps (deterministic mode adds
// them locally only).
std::vector<std::pair<int64_t, ZeroAccumulate>> Stages(const TrainConfig& t,
                                                       int64_t micro_batch) {
  if (t.gpus < 2) return {{0, ZeroAccumulate::kAuto}};
  std::vector<std::pair<int64_t, ZeroAccumulate>> stages = {
      {0, ZeroAccumulate::kAuto}, {1, ZeroAccumulate::kAuto}};
  const bool both = t.global_batch / (t.gpus * micro_batch) > 1 && !t.deterministic;
  for (int64_t zero : {2, 3}) {
    stages.push_back({zero, ZeroAccumulate::kLocal});
    if (both) stages.push_back({zero, ZeroAccumulate::kShard});
  }
  return stages;
}

// The table of the candidates, best first among those that fit.
std::string Table(const std::vector<Candidate>& tried, size_t best, const TrainConfig& t,
                  const std::string& profile) {
  std::string out = absl::StrFormat(
      "memory %s per device: %d plans tried on %s, the fastest that fits kept:\n",
      GiB(t.memory_bytes), tried.size(), profile);
  absl::StrAppend(&out, absl::StrFormat("    %-58s %12s %12s\n", "plan", "device mem",
                                        "step (pred.)"));
  for (size_t i = 0; i < tried.size(); ++i) {
    const Candidate& c = tried[i];
    absl::StrAppend(&out, absl::StrFormat("  %s %-58s %12s %9.2f ms%s\n",
                                          i == best ? "->" : "  ", Describe(c, t), GiB(c.bytes),
                                          c.step_us / 1000, c.fits ? "" : "  (too big)"));
  }
  return out;
}

// Nothing fits: the smallest plan's arithmetic.
absl::Status NothingFits(const std::vector<Candidate>& tried, const TrainConfig& t) {
  const auto smallest = std::min_element(
      tried.begin(), tried.end(),
      [](const Candidate& a, const Candidate& b) { return a.bytes < b.bytes; });
  const MemoryReport& m = smallest->memory;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "memory = %s: none of the %d plans tried fits; the smallest (%s) needs %s: "
      "parameters %s + gradients %s + optimizer state %s + bf16 copies %s + peak "
      "activations %s (arena %s with alignment and reuse) + bf16 staging %s",
      GiB(t.memory_bytes), tried.size(), Describe(*smallest, t), GiB(smallest->bytes),
      GiB(m.parameter_bytes), GiB(m.gradient_bytes), GiB(m.optimizer_state_bytes),
      GiB(m.parameter_copy_bytes), GiB(m.peak_activation_bytes), GiB(m.arena_bytes),
      GiB(m.bf16_staging_bytes)));
}

}  // namespace

int64_t DeviceBytes(const Plan& plan) {
  return plan.arena_bytes + plan.memory.bf16_staging_bytes;
}

absl::StatusOr<MemoryFit> FitToMemory(const TrainSpec& spec, const PlanOptions& options,
                                      const CandidatePlanner& planner) {
  const TrainConfig& t = spec.train;
  ASSIGN_OR_RETURN(const PlanReplay replay, PlanningReplay(spec, options));
  const std::vector<bool> recomputes = spec.model.repeat_blocks.empty()
                                           ? std::vector<bool>{t.recompute}
                                           : std::vector<bool>{false, true};
  std::vector<Candidate> tried;
  for (int64_t micro_batch : MicroBatches(t)) {
    for (const auto& [zero, accumulate] : Stages(t, micro_batch)) {
      for (bool recompute : recomputes) {
        Candidate c{micro_batch, zero, recompute, accumulate};
        ASSIGN_OR_RETURN(const Plan plan, planner(CandidateSpec(spec, c)));
        ASSIGN_OR_RETURN(const cost::StepPrediction p, replay.Step(plan));
        c.memory = plan.memory;
        c.bytes = DeviceBytes(plan);
        c.step_us = p.step_us;
        c.fits = c.bytes <= t.memory_bytes;
        tried.push_back(c);
      }
    }
  }
  size_t best = tried.size();
  for (size_t i = 0; i < tried.size(); ++i) {
    if (!tried[i].fits) continue;
    if (best == tried.size() || tried[i].step_us < tried[best].step_us ||
        (tried[i].step_us == tried[best].step_us && tried[i].bytes < tried[best].bytes)) {
      best = i;
    }
  }
  if (best == tried.size()) return NothingFits(tried, t);
  return MemoryFit{CandidateSpec(spec, tried[best]),
                   Table(tried, best, t, replay.ProfileName())};
}

}  // namespace trainc
