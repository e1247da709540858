#include "tools/simulate/calibration.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/util/status_macros.h"
#include "compiler/cost/cost_model.h"
#include "compiler/cost/simulator.h"

namespace trainc::simulate {
namespace {

// The step and byte factors of `algorithm`'s time: t = a α + b S β.
std::pair<double, double> Factors(cost::AllReduceAlgorithm algorithm, int64_t n) {
  switch (algorithm) {
    case cost::AllReduceAlgorithm::kTree:
      return {2.0 * std::ceil(std::log2(static_cast<double>(n))), 2.0};
    case cost::AllReduceAlgorithm::kWholeBufferRing:
      return {double(n - 1), double(n - 1)};
    case cost::AllReduceAlgorithm::kRing:
    case cost::AllReduceAlgorithm::kAuto:
      break;
  }
  return {2.0 * (n - 1), 2.0 * (n - 1) / n};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

absl::StatusOr<cost::LinkProfile> FitAllReduce(
    cost::AllReduceAlgorithm algorithm, int64_t world_size,
    const std::vector<CollectiveSample>& samples) {
  if (world_size < 2) {
    return absl::InvalidArgumentError("a single rank sends nothing to fit α and β to");
  }
  std::set<double> sizes;
  for (const CollectiveSample& s : samples) sizes.insert(s.bytes);
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "α and β need all-reduces of two or more sizes; the trace has ",
        sizes.size()));
  }
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CollectiveSample& s : samples) {
    sx += s.bytes;
    sy += s.us;
    sxx += s.bytes * s.bytes;
    sxy += s.bytes * s.us;
  }
  double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  double intercept = (sy - slope * sx) / n;
  if (intercept < 0) {  // through the origin: latency 0
    intercept = 0;
    slope = sxy / sxx;
  }
  if (!(slope > 0)) {
    return absl::InvalidArgumentError(
        "all-reduce time does not grow with bytes in this trace: no bandwidth to fit");
  }
  const auto [a, b] = Factors(algorithm, world_size);
  cost::LinkProfile link;
  link.alpha_us = intercept / a;
  link.bandwidth_GBps = b / slope / 1e3;  // slope / b: µs per byte
  return link;
}

namespace {

// The slowest rank (the most compute time over the traced steps) and how
// much longer its compute takes than the others' mean.
void FitRankImbalance(const viz::Trace& trace, Calibration& c) {
  std::map<int, double> compute_us;  // rank -> busy time of its compute stream
  for (const viz::TraceEvent& e : trace.events) {
    if (e.stream == 0) compute_us[e.rank] += e.dur_us;
  }
  if (compute_us.size() <= 1) {
    c.profile.rank_imbalance = 0;
    return;
  }
  double others = 0, slowest = -1;
  for (const auto& [rank, us] : compute_us) {
    if (us > slowest) {
      slowest = us;
      c.slowest_rank = rank;
    }
  }
  for (const auto& [rank, us] : compute_us) others += rank == c.slowest_rank ? 0 : us;
  others /= static_cast<double>(compute_us.size() - 1);
  c.profile.rank_imbalance = others > 0 ? slowest / others - 1 : 0;
}

// A collective over the ranks: its first start, last start and shortest
// duration.
struct Collective {
  double first_start = 1e300, last_start = -1e300, shortest = 1e300;
};

// The trace's events, indexed for the fits.
struct TraceIndex {
  std::map<std::pair<int64_t, int>, Collective> collective;  // (step, instr) ->
  // rank -> step -> (first start, last end).
  std::map<int, std::map<int64_t, std::pair<double, double>>> extent;
  // (rank, step) -> when its collectives moved data: from the last rank's
  // arrival to the end.
  std::map<std::pair<int, int64_t>, std::vector<std::pair<double, double>>> moving;
};

TraceIndex IndexTrace(const Plan& plan, const viz::Trace& trace) {
  TraceIndex index;
  for (const viz::TraceEvent& e : trace.events) {
    auto [it, fresh] = index.extent[e.rank].try_emplace(e.step, e.ts_us, e.ts_us + e.dur_us);
    if (!fresh) {
      it->second.first = std::min(it->second.first, e.ts_us);
      it->second.second = std::max(it->second.second, e.ts_us + e.dur_us);
    }
    if (!cost::IsCollective(plan.instructions[e.instr])) continue;
    Collective& col = index.collective[{e.step, e.instr}];
    col.first_start = std::min(col.first_start, e.ts_us);
    col.last_start = std::max(col.last_start, e.ts_us);
    col.shortest = std::min(col.shortest, e.dur_us);
  }
  for (const viz::TraceEvent& e : trace.events) {
    if (!cost::IsCollective(plan.instructions[e.instr])) continue;
    const Collective& col = index.collective[{e.step, e.instr}];
    index.moving[{e.rank, e.step}].emplace_back(col.last_start, e.ts_us + e.dur_us);
  }
  return index;
}

// One compute event of a rank other than the slowest: measured, modelled
// (unscaled) and the time it ran beside a collective moving data.
struct Sample {
  const Instruction* instr;
  double us, model_us, contended_us;
};

std::vector<Sample> ComputeSamples(const Plan& plan, const viz::Trace& trace,
                                   const cost::MachineProfile& base, int slowest_rank,
                                   TraceIndex& index) {
  cost::MachineProfile unscaled = base;
  unscaled.scale.clear();
  std::vector<Sample> samples;
  for (const viz::TraceEvent& e : trace.events) {
    const Instruction& in = plan.instructions[e.instr];
    if (cost::IsCollective(in) || e.rank == slowest_rank) continue;
    double contended = 0;
    for (const auto& [begin, end] : index.moving[{e.rank, e.step}]) {
      contended += std::max(0.0, std::min(end, e.ts_us + e.dur_us) - std::max(begin, e.ts_us));
    }
    samples.push_back({&in, e.dur_us, cost::EstimateCompute(plan, in, unscaled).us, contended});
  }
  return samples;
}

// Compute: measured over modelled, per op, against the unscaled model,
// from the events that ran while no collective moved data (all of an
// op's events if none did).
void FitOpScales(const std::vector<Sample>& samples, Calibration& c) {
  std::map<std::string, OpCalibration> by_op, uncontended;
  for (const Sample& s : samples) {
    for (auto* table : {&by_op, &uncontended}) {
      if (table == &uncontended && s.contended_us > 0) continue;
      OpCalibration& op = (*table)[s.instr->op];
      op.op = s.instr->op;
      ++op.events;
      op.measured_us += s.us;
      op.modelled_us += s.model_us;
    }
  }
  for (const auto& [name, op] : by_op) {
    c.ops.push_back(op);
    auto it = uncontended.find(name);
    const OpCalibration& fit = it != uncontended.end() ? it->second : op;
    if (fit.measured_us > 0 && fit.modelled_us > 0) {
      c.profile.scale[name] = fit.measured_us / fit.modelled_us;
    }
  }
}

// The contention from the events beside moving data. An event that spent
// o us beside moving data and took t instead of the model's m did m of
// work in t: o / (1 + c) + (t - o) = m, so c / (1 + c) = (t - m) / o,
// fitted over all such events.
void FitContention(const std::vector<Sample>& samples, Calibration& c) {
  double lost = 0, contended = 0;
  for (const Sample& s : samples) {
    if (s.contended_us <= 0) continue;
    lost += s.us - s.model_us * c.profile.scale[s.instr->op];
    contended += s.contended_us;
  }
  if (contended > 0) {
    const double k = std::clamp(lost / contended, 0.0, 0.9);
    c.profile.comm_contention = k / (1 - k);
    c.contention_fitted = true;
  }
}

// The network: α and β fitted on the buckets' all-reduces (what each
// moves: half the bucket under grad_comm = bf16); ZeRO-1's reduce-scatters
// and all-gathers, and the all-reduce of one scalar, follow other formulas
// and are left out.
void FitNetwork(const Plan& plan, const cost::MachineProfile& base, int64_t world,
                const TraceIndex& index, Calibration& c) {
  std::vector<CollectiveSample> collective_samples;
  const double width = plan.grad_comm == GradComm::kBf16 ? 0.5 : 1.0;
  for (const auto& [key, col] : index.collective) {
    const Instruction& in = plan.instructions[key.second];
    auto bucket = in.attrs.find("bucket");
    if (StepOpOfInstruction(in.op) != StepOp::kAllReduce || bucket == in.attrs.end()) continue;
    const int b = static_cast<int>(bucket->second);
    if (b < 0 || b >= static_cast<int>(plan.buckets.size())) continue;
    collective_samples.push_back(
        {static_cast<double>(plan.buckets[b].bytes) * width, col.shortest});
  }
  c.collective_samples = static_cast<int>(collective_samples.size());
  if (plan.deterministic) {
    c.network_note = "deterministic all-reduces (all-gather + ordered sum) are not fitted";
  } else if (plan.zero > 0) {
    c.network_note = absl::StrCat("zero = ", plan.zero,
                                  " has no bucket all-reduce to fit (reduce-scatters and "
                                  "all-gathers are not fitted); the base profile's α and β "
                                  "stay");
  } else {
    absl::StatusOr<cost::LinkProfile> link =
        FitAllReduce(base.all_reduce, world, collective_samples);
    if (link.ok()) {
      (world <= base.ranks_per_node ? c.profile.intra : c.profile.inter) = *link;
      c.network_fitted = true;
    } else {
      c.network_note = std::string(link.status().message());
    }
  }
}

// Overlap: some all-reduce started before its rank's last backward ended.
bool TraceOverlaps(const viz::Trace& trace) {
  std::map<std::pair<int, int64_t>, double> backward_end;
  for (const viz::TraceEvent& e : trace.events) {
    if (e.stream == 0 && e.cat == "backward") {
      double& end = backward_end[{e.rank, e.step}];
      end = std::max(end, e.ts_us + e.dur_us);
    }
  }
  bool overlap = false;
  for (const viz::TraceEvent& e : trace.events) {
    if (e.stream == 1 && e.ts_us < backward_end[{e.rank, e.step}]) overlap = true;
  }
  return overlap;
}

// The host between steps: the gaps between consecutive traced steps, and
// the period of rank 0's traced steps, start to start; the time per step
// the replay of the fitted profile misses becomes step_overhead_us.
absl::Status FitStepOverhead(const Plan& plan, int64_t world, const TraceIndex& index,
                             Calibration& c) {
  std::vector<double> gaps, periods;
  for (const auto& [rank, steps] : index.extent) {
    for (auto it = steps.begin(); it != steps.end(); ++it) {
      auto next = std::next(it);
      if (next == steps.end() || next->first != it->first + 1) continue;
      gaps.push_back(std::max(0.0, next->second.first - it->second.second));
      if (rank == 0) periods.push_back(next->second.first - it->second.first);
    }
  }
  if (periods.empty()) return absl::OkStatus();
  c.host_gap_us = Median(gaps);
  double sum = 0;
  for (double p : periods) sum += p;
  c.measured_step_us = sum / periods.size();
  c.profile.step_overhead_us = 0;
  cost::SimulationOptions options;
  options.world_size = world;
  options.overlap = c.overlap;
  ASSIGN_OR_RETURN(cost::StepPrediction replay, cost::SimulateStep(plan, c.profile, options));
  c.profile.step_overhead_us = std::max(0.0, c.measured_step_us - replay.step_us);
  c.step_overhead_fitted = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(const Plan& plan, const viz::Trace& trace,
                                      const cost::MachineProfile& base) {
  RETURN_IF_ERROR(viz::CheckTraceMatchesPlan(trace, plan));
  Calibration c;
  c.profile = base;
  FitRankImbalance(trace, c);
  TraceIndex index = IndexTrace(plan, trace);
  // Per-op scales first; the contention is what they leave unexplained.
  const std::vector<Sample> samples = ComputeSamples(plan, trace, base, c.slowest_rank, index);
  FitOpScales(samples, c);
  FitContention(samples, c);
  const int64_t world = trace.world_size > 0 ? trace.world_size : plan.world_size;
  FitNetwork(plan, base, world, index, c);
  c.overlap = TraceOverlaps(trace);
  RETURN_IF_ERROR(FitStepOverhead(plan, world, index, c));
  return c;
}

std::string FormatCalibration(const Calibration& c, const std::string& trace_name,
                              int64_t world_size) {
  std::string out = absl::StrCat("calibrated from ", trace_name, " (", world_size,
                                 world_size == 1 ? " rank" : " ranks", ")\n");
  absl::StrAppend(&out, absl::StrFormat("  %-26s %7s %13s %13s %8s\n", "op", "events",
                                        "measured(us)", "modelled(us)", "scale"));
  for (const OpCalibration& op : c.ops) {
    absl::StrAppend(&out, absl::StrFormat(
                              "  %-26s %7d %13.1f %13.1f %8.3f\n", op.op, op.events,
                              op.measured_us / op.events, op.modelled_us / op.events,
                              op.modelled_us > 0 ? op.measured_us / op.modelled_us : 0.0));
  }
  const cost::LinkProfile& link = c.profile.LinkFor(world_size);
  if (c.network_fitted) {
    absl::StrAppend(&out, absl::StrFormat(
        "  all-reduce (%s, %d samples): alpha %.2f us, bus bandwidth %.3f GB/s\n",
        cost::AllReduceAlgorithmName(c.profile.all_reduce), c.collective_samples,
        link.alpha_us, link.bandwidth_GBps));
  } else {
    absl::StrAppend(&out, "  all-reduce: not fitted (", c.network_note,
                    "); the profile's alpha and beta stay\n");
  }
  if (c.slowest_rank >= 0) {
    absl::StrAppend(&out, absl::StrFormat(
        "  slowest rank %d: its compute takes %.1f%% longer than the others' "
        "(rank_imbalance %.3f)\n",
        c.slowest_rank, 100 * c.profile.rank_imbalance, c.profile.rank_imbalance));
  }
  if (c.contention_fitted) {
    absl::StrAppend(&out, absl::StrFormat(
        "  compute beside a moving collective runs %.2fx slower (comm_contention %.3f)\n",
        1 + c.profile.comm_contention, c.profile.comm_contention));
  }
  if (c.step_overhead_fitted) {
    absl::StrAppend(&out, absl::StrFormat(
        "  per step, not in the replay: %.1f us (measured period %.3f ms, overlap %s; of "
        "which the host's gap between steps %.1f us)\n",
        c.profile.step_overhead_us, c.measured_step_us / 1e3, c.overlap ? "on" : "off",
        c.host_gap_us));
  }
  return out;
}

}  // namespace trainc::simulate
