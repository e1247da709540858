#include "compiler/cost/simulator.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"
#include "compiler/cost/cost_model.h"
#include "compiler/cost/intervals.h"

namespace trainc::cost {
namespace {

// The executor's fence between the compute and comm streams when overlap
// is off (Executor::hold_event_), in this replay's issue order.
constexpr int kHold = -1;

absl::Status CheckPlan(const Plan& plan) {
  const int num_buffers = static_cast<int>(plan.buffers.size());
  for (const Instruction& in : plan.instructions) {
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction ", in.id, " (", in.op, "): ", why));
    };
    if (StepOpOfInstruction(in.op) != StepOp::kLoadBatch && ops::FindOp(in.op) == nullptr) {
      return fail("unknown op");
    }
    if (IsCollective(in) != (in.stream == Stream::kComm)) {
      return fail("collectives, and only collectives, run on the comm stream");
    }
    for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
      for (int id : *ids) {
        if (id < 0 || id >= num_buffers) return fail("buffer out of range");
      }
    }
    for (const std::vector<int>* events : {&in.wait_events, &in.record_events}) {
      for (int e : *events) {
        if (e < 0 || e >= plan.num_events) return fail("event out of range");
      }
    }
  }
  return absl::OkStatus();
}

// Issue order: program order, or with overlap off every collective before
// the last backward instruction (the bucket all-reduces or reduce-scatters)
// moved behind it (Executor::Prepare).
std::vector<int> IssueOrder(const Plan& plan, bool overlap) {
  const int n = static_cast<int>(plan.instructions.size());
  std::vector<int> order;
  if (overlap) {
    for (int i = 0; i < n; ++i) order.push_back(i);
    return order;
  }
  int last_backward = -1;
  for (int i = 0; i < n; ++i) {
    const Instruction& in = plan.instructions[i];
    if (in.stream == Stream::kCompute && in.phase == Phase::kBackward) last_backward = i;
  }
  std::vector<int> held;
  for (int i = 0; i < n; ++i) {
    if (IsCollective(plan.instructions[i]) && i < last_backward) {
      held.push_back(i);
    } else {
      order.push_back(i);
    }
    if (i == last_backward && !held.empty()) {
      order.push_back(kHold);
      order.insert(order.end(), held.begin(), held.end());
    }
  }
  return order;
}

// When `work` us of compute started at `start` ends, given the sorted,
// disjoint intervals in which the comm stream moves data and slows compute
// down by 1 + contention.
double FinishCompute(double start, double work,
                     const std::vector<std::pair<double, double>>& busy,
                     double contention) {
  double t = start;
  for (const auto& [begin, end] : busy) {
    if (end <= t) continue;
    if (begin > t) {
      if (t + work <= begin) return t + work;
      work -= begin - t;
      t = begin;
    }
    const double can = (end - t) / (1 + contention);
    if (work <= can) return t + work * (1 + contention);
    work -= can;
    t = end;
  }
  return t + work;
}

// A class of ranks: every rank but one runs at the modelled speed; with
// compute.rank_imbalance the slowest runs (1 + imbalance) times slower,
// and every collective starts when it arrives.
struct SimRank {
  double speed = 1;              // compute time multiplier
  double host = 0;               // when the host issues the next instruction
  double free_at[2] = {0, 0};    // per stream: when its last work ends
  std::vector<double> recorded;  // per event: when it was recorded
  std::vector<std::pair<double, double>> moving;  // collectives moving data
  std::vector<SimulatedSpan> spans;
};

constexpr int kComputeStream = static_cast<int>(Stream::kCompute);
constexpr int kCommStream = static_cast<int>(Stream::kComm);

// Instruction `i` on every rank class: it starts when its stream, the host
// and the events it waits for are ready (a collective when the last rank
// arrives) and takes its modelled time.
void Issue(const Plan& plan, int i, const MachineProfile& profile, int64_t world_size,
           std::vector<SimRank>* ranks) {
  const Instruction& in = plan.instructions[i];
  const int s = static_cast<int>(in.stream);
  const double us = InstructionUs(plan, in, profile, world_size);
  std::vector<double> ready(ranks->size());
  double last_arrival = 0;
  for (size_t k = 0; k < ranks->size(); ++k) {
    const SimRank& r = (*ranks)[k];
    ready[k] = std::max(r.host, r.free_at[s]);
    for (int e : in.wait_events) ready[k] = std::max(ready[k], r.recorded[e]);
    last_arrival = std::max(last_arrival, ready[k]);
  }
  const bool collective = IsCollective(in);
  for (size_t k = 0; k < ranks->size(); ++k) {
    SimRank& r = (*ranks)[k];
    // A rank inside a collective waits there for the last to arrive.
    const double end =
        collective ? last_arrival + us
        : profile.comm_contention > 0
            ? FinishCompute(ready[k], us * r.speed, r.moving, profile.comm_contention)
            : ready[k] + us * r.speed;
    if (collective && us > 0) r.moving.emplace_back(last_arrival, end);
    r.free_at[s] = end;
    for (int e : in.record_events) r.recorded[e] = end;
    if (profile.host_synchronous && in.stream == Stream::kCompute) r.host = end;
    // The executor submits nothing for an all-reduce over one rank.
    if (us > 0 || !collective) r.spans.push_back({i, in.stream, ready[k], end});
  }
}

// Compute, backward, all-reduce, hidden and exposed time of `p`'s spans,
// as tools/viz's ComputeOverlap of the same spans as a trace.
void MeasureOverlap(const Plan& plan, StepPrediction* p) {
  std::vector<Interval> compute, backward, comm;
  for (const SimulatedSpan& span : p->spans) {
    const Interval iv{span.begin_us, span.end_us};
    if (span.stream == Stream::kCompute) {
      p->compute_us += span.end_us - span.begin_us;
      compute.push_back(iv);
      if (plan.instructions[span.instr].phase == Phase::kBackward) backward.push_back(iv);
    } else {
      comm.push_back(iv);
    }
  }
  const std::vector<Interval> cu = Union(compute), au = Union(comm);
  p->backward_us = Length(Union(backward));
  p->all_reduce_us = Length(au);
  p->hidden_us = IntersectionLength(au, cu);
  p->exposed_us = p->all_reduce_us - p->hidden_us;
}

}  // namespace

absl::StatusOr<StepPrediction> SimulateStep(const Plan& plan,
                                            const MachineProfile& profile,
                                            const SimulationOptions& options) {
  RETURN_IF_ERROR(CheckPlan(plan));
  StepPrediction p;
  p.world_size = options.world_size > 0 ? options.world_size : plan.world_size;
  std::vector<SimRank> ranks(p.world_size > 1 && profile.rank_imbalance > 0 ? 2 : 1);
  if (ranks.size() > 1) ranks[1].speed = 1 + profile.rank_imbalance;
  for (SimRank& r : ranks) r.recorded.assign(plan.num_events, 0.0);
  for (int i : IssueOrder(plan, options.overlap)) {
    if (i == kHold) {
      for (SimRank& r : ranks) {
        r.free_at[kCommStream] = std::max(r.free_at[kCommStream], r.free_at[kComputeStream]);
      }
      continue;
    }
    Issue(plan, i, profile, p.world_size, &ranks);
  }
  p.spans = std::move(ranks[0].spans);
  double drained = 0;
  for (const SimRank& r : ranks) {
    drained = std::max({drained, r.free_at[kComputeStream], r.free_at[kCommStream]});
  }
  MeasureOverlap(plan, &p);
  p.step_us = drained + profile.step_overhead_us;
  return p;
}

}  // namespace trainc::cost
