#include "compiler/planner/planner.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/cost/simulator.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/lower.h"
#include "compiler/graph/pass.h"
#include "compiler/graph/pipeline.h"
#include "compiler/planner/bucket_search.h"
#include "compiler/planner/memory_search.h"
#include "compiler/planner/plan_builder.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

absl::Status CheckConfig(const TrainConfig& t) {
  if (t.gpus < 1 || t.micro_batch < 1 || t.accumulate < 1) {
    return absl::InvalidArgumentError("gpus, micro_batch and accumulate must be >= 1");
  }
  if (t.global_batch != t.gpus * t.micro_batch * t.accumulate) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch ", t.global_batch, " != gpus ", t.gpus, " x micro_batch ",
                     t.micro_batch, " x accumulate ", t.accumulate));
  }
  if (t.bucket_mb < 0 || t.first_bucket_mb < 0) {
    return absl::InvalidArgumentError("bucket_mb and first_bucket_mb must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

const char* DefaultMachineOfDevice(absl::string_view device) {
  return device == "cuda" ? "h100_nvlink_ib" : kDefaultMachine;
}

absl::StatusOr<cost::MachineProfile> PlanningProfile(const TrainSpec& spec,
                                                     const PlanOptions& options) {
  if (options.machine != nullptr) return *options.machine;
  const std::string& name = !spec.train.machine.empty() ? spec.train.machine
                            : !options.default_machine.empty() ? options.default_machine
                                                               : std::string(kDefaultMachine);
  absl::StatusOr<cost::MachineProfile> profile = cost::LoadMachineProfile(name);
  if (!profile.ok()) {
    return absl::Status(profile.status().code(),
                        absl::StrCat("the planning profile: ", profile.status().message()));
  }
  return profile;
}

absl::StatusOr<PlanReplay> PlanningReplay(const TrainSpec& spec, const PlanOptions& options) {
  PlanReplay replay;
  ASSIGN_OR_RETURN(replay.profile, PlanningProfile(spec, options));
  replay.simulation.world_size = spec.train.gpus;
  replay.simulation.overlap = options.overlap;
  return replay;
}

namespace {

std::string MiB(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// bucket_mb = auto under memory = ...: the distinct bucketings in order of
// predicted step, each planned whole until one fits the budget (a bucketing
// whose largest bucket is not below one that did not fit is skipped: the
// buckets in flight only grow). Sets *plan to the one kept: the fastest
// that fits, or the smallest. Returns its index in `costs`.
absl::StatusOr<size_t> FastestThatFits(
    const std::vector<CandidateCost>& costs,
    const std::map<std::vector<std::vector<int>>, size_t>& seen, int64_t budget,
    const std::function<absl::StatusOr<Plan>(size_t)>& build, Plan* plan) {
  std::vector<size_t> order;
  for (const auto& [bucketing, i] : seen) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return costs[a].step_us < costs[b].step_us;
  });
  int64_t too_big = INT64_MAX;  // the smallest largest-bucket seen not to fit
  size_t smallest = order.front();
  int64_t smallest_bytes = INT64_MAX;
  for (size_t i : order) {
    if (costs[i].largest_bucket_bytes >= too_big) continue;
    ASSIGN_OR_RETURN(Plan candidate, build(i));
    const int64_t bytes = DeviceBytes(candidate);
    if (bytes <= budget) {
      *plan = std::move(candidate);
      return i;
    }
    too_big = costs[i].largest_bucket_bytes;
    if (bytes < smallest_bytes) {
      smallest_bytes = bytes;
      smallest = i;
    }
  }
  ASSIGN_OR_RETURN(*plan, build(smallest));
  return smallest;
}

// bucket_mb = auto: every candidate's plan (one per distinct bucketing),
// replayed on the profile; the least predicted step wins (bucket_search.h).
absl::StatusOr<Plan> BuildAutoBucketedPlan(const TrainSpec& spec, const Graph& graph,
                                           const PlanOptions& options,
                                           const ZeroChoices& zero) {
  ASSIGN_OR_RETURN(const PlanReplay replay, PlanningReplay(spec, options));
  int64_t grad_bytes = 0;
  for (int p : graph.parameters()) grad_bytes += graph.value(p).bytes();
  const std::vector<BucketSizes> candidates = BucketCandidates(grad_bytes);
  std::vector<CandidateCost> costs;
  std::map<std::vector<std::vector<int>>, size_t> seen;  // bucketing -> first candidate
  for (const BucketSizes& sizes : candidates) {
    PlanBuilder builder(spec, graph, options, sizes, zero);
    auto [it, fresh] = seen.try_emplace(builder.AssignBuckets(), costs.size());
    if (!fresh) {
      CandidateCost same = costs[it->second];
      same.sizes = sizes;
      costs.push_back(same);
      continue;
    }
    ASSIGN_OR_RETURN(const Plan plan, builder.Build(/*for_costing=*/true));
    ASSIGN_OR_RETURN(const cost::StepPrediction p, replay.Step(plan));
    CandidateCost c;
    c.sizes = sizes;
    c.buckets = static_cast<int>(plan.buckets.size());
    for (const Bucket& b : plan.buckets) {
      c.largest_bucket_bytes = std::max(c.largest_bucket_bytes, b.bytes);
    }
    c.step_us = p.step_us;
    c.exposed_us = p.exposed_us;
    costs.push_back(c);
  }
  auto build = [&](size_t i) -> absl::StatusOr<Plan> {
    PlanBuilder builder(spec, graph, options, costs[i].sizes, zero);
    builder.AssignBuckets();
    return builder.Build();
  };
  const size_t fastest = BestCandidate(costs);
  ASSIGN_OR_RETURN(Plan plan, build(fastest));
  size_t best = fastest;
  std::string why;
  const int64_t budget = spec.train.memory_bytes;
  if (budget > 0 && DeviceBytes(plan) > budget) {
    const int64_t needs = DeviceBytes(plan);
    ASSIGN_OR_RETURN(best, FastestThatFits(costs, seen, budget, build, &plan));
    why = absl::StrFormat("; under memory = %s: the fastest (bucket_mb %g) needs %s, %s",
                          MiB(budget), costs[fastest].sizes.bucket_mb, MiB(needs),
                          DeviceBytes(plan) <= budget ? "kept the fastest that fits"
                                                      : "none fits, kept the smallest");
  }
  plan.bucket_choice =
      ExplainBucketChoice(costs, best, static_cast<int>(seen.size()), replay.ProfileName(),
                          spec.train.gpus, options.overlap) +
      why;
  return plan;
}

// ZeRO-2 with accumulate > 1 and zero_accumulate = auto: both plans, each
// replayed on the machine profile. Scattering every micro-step frees the
// buckets between micro-steps but sends accumulate times the gradients;
// it is chosen when its predicted step is within 5% of local's, when the
// extra reduce-scatters hide behind the backward pass.
struct ZeroAccumulateChoice {
  ZeroAccumulate kind = ZeroAccumulate::kLocal;
  std::string why;
};
absl::StatusOr<ZeroAccumulateChoice> ChooseZeroAccumulate(const TrainSpec& spec,
                                                          const Graph& graph,
                                                          const PlanOptions& options) {
  const TrainConfig& t = spec.train;
  ZeroAccumulateChoice choice;
  if (t.zero < 2 || t.gpus < 2 || t.accumulate < 2) return choice;
  if (t.deterministic) {
    choice.why = "zero_accumulate = local: deterministic mode adds the micro-batches' "
                 "gradients in global order at the step's end";
    return choice;
  }
  if (t.zero_accumulate != ZeroAccumulate::kAuto) {
    choice.kind = t.zero_accumulate;
    return choice;
  }
  ASSIGN_OR_RETURN(const PlanReplay replay, PlanningReplay(spec, options));
  const BucketSizes sizes{t.bucket_mb, t.first_bucket_mb};
  Plan plans[2];
  double step_us[2];
  const ZeroAccumulate kinds[2] = {ZeroAccumulate::kLocal, ZeroAccumulate::kShard};
  for (int i = 0; i < 2; ++i) {
    PlanBuilder builder(spec, graph, options, sizes, {kinds[i], 0});
    builder.AssignBuckets();
    ASSIGN_OR_RETURN(plans[i], builder.Build());
    ASSIGN_OR_RETURN(const cost::StepPrediction p, replay.Step(plans[i]));
    step_us[i] = p.step_us;
  }
  constexpr double kSlack = 1.05;
  choice.kind = step_us[1] <= kSlack * step_us[0] ? kinds[1] : kinds[0];
  choice.why = absl::StrFormat(
      "zero_accumulate = %s: shard's arena %s and step %.2f ms against local's %s and "
      "%.2f ms (%s; shard when its step is within 5%%)",
      EnumName(choice.kind), MiB(plans[1].arena_bytes), step_us[1] / 1000,
      MiB(plans[0].arena_bytes), step_us[0] / 1000, replay.ProfileName());
  return choice;
}

// ZeRO-3 with zero_prefetch = auto: each depth from 0 to kMaxAutoPrefetch
// buckets, replayed on the machine profile (with the file's bucket sizes).
// A deeper prefetch hides more of the gathers but keeps more spans alive:
// the least predicted step wins, the shallowest among steps within 1%.
struct ZeroPrefetchChoice {
  int64_t depth = 0;
  std::string why;
};
absl::StatusOr<ZeroPrefetchChoice> ChooseZeroPrefetch(const TrainSpec& spec, const Graph& graph,
                                                      const PlanOptions& options,
                                                      ZeroAccumulate accumulate) {
  const TrainConfig& t = spec.train;
  ZeroPrefetchChoice choice;
  if (t.zero < 3 || t.gpus < 2) return choice;
  if (t.zero_prefetch >= 0) {
    choice.depth = t.zero_prefetch;
    return choice;
  }
  ASSIGN_OR_RETURN(const PlanReplay replay, PlanningReplay(spec, options));
  constexpr int64_t kMaxAutoPrefetch = 3;
  std::vector<double> step_us;
  std::vector<int64_t> arena;
  // Under memory = ... only the depths whose plan fits (depth 0, the
  // least memory, when none does).
  std::vector<bool> fits;
  for (int64_t depth = 0; depth <= kMaxAutoPrefetch; ++depth) {
    PlanBuilder builder(spec, graph, options, {t.bucket_mb, t.first_bucket_mb},
                        {accumulate, depth});
    builder.AssignBuckets();
    ASSIGN_OR_RETURN(const Plan plan, builder.Build());
    ASSIGN_OR_RETURN(const cost::StepPrediction p, replay.Step(plan));
    step_us.push_back(p.step_us);
    arena.push_back(plan.arena_bytes);
    fits.push_back(t.memory_bytes <= 0 || DeviceBytes(plan) <= t.memory_bytes);
  }
  double best = 0;
  for (size_t d = 0; d < step_us.size(); ++d) {
    if (fits[d] && (best == 0 || step_us[d] < best)) best = step_us[d];
  }
  constexpr double kSlack = 1.01;
  while (best > 0 && (!fits[choice.depth] || step_us[choice.depth] > kSlack * best)) {
    ++choice.depth;
  }
  std::vector<std::string> rows;
  for (size_t d = 0; d < step_us.size(); ++d) {
    rows.push_back(absl::StrFormat("%d: %.2f ms, arena %s%s", d, step_us[d] / 1000,
                                   MiB(arena[d]), fits[d] ? "" : " (too big)"));
  }
  choice.why = absl::StrFormat(
      "zero_prefetch = %d buckets ahead (%s; %s; the shallowest within 1%% of the least "
      "step%s)",
      choice.depth, absl::StrJoin(rows, "; "), replay.ProfileName(),
      t.memory_bytes > 0 ? " that fits" : "");
  return choice;
}

absl::StatusOr<Plan> BuildPlanOfPrecision(const TrainSpec& spec, const PlanOptions& options) {
  ASSIGN_OR_RETURN(Graph graph, LowerModel(spec.model, spec.train.micro_batch));
  // The passes, their order and preconditions: compiler/graph/pipeline.h.
  PipelineOptions passes;
  passes.bf16 = spec.train.precision == Precision::kBf16;
  passes.fusion = spec.train.fusion;
  passes.recompute =
      spec.train.recompute ? spec.model.repeat_blocks : spec.model.recompute_blocks;
  // The loss is the mean over every term of the global batch (every token
  // of every sequence), however the batch is split.
  PassPipeline pipeline = TrainPipeline(
      passes, std::make_unique<Autodiff>(1.0 / (static_cast<double>(spec.train.global_batch) *
                                                static_cast<double>(spec.model.loss_terms))));
  RETURN_IF_ERROR(pipeline.Run(&graph).status());
  ASSIGN_OR_RETURN(const ZeroAccumulateChoice accumulate,
                   ChooseZeroAccumulate(spec, graph, options));
  ASSIGN_OR_RETURN(const ZeroPrefetchChoice prefetch,
                   ChooseZeroPrefetch(spec, graph, options, accumulate.kind));
  const ZeroChoices zero{accumulate.kind, prefetch.depth};
  Plan plan;
  if (spec.train.bucket_mb_auto) {
    ASSIGN_OR_RETURN(plan, BuildAutoBucketedPlan(spec, graph, options, zero));
  } else {
    PlanBuilder builder(spec, graph, options,
                        {spec.train.bucket_mb, spec.train.first_bucket_mb}, zero);
    builder.AssignBuckets();
    ASSIGN_OR_RETURN(plan, builder.Build());
  }
  plan.zero_accumulate_choice = accumulate.why;
  plan.zero_prefetch_choice = prefetch.why;
  return plan;
}

// The plan of `spec` (memory = ... already searched: its budget only caps
// bucket_mb = auto), with the memory report's bf16 saving.
absl::StatusOr<Plan> BuildReportedPlan(const TrainSpec& spec, const PlanOptions& options) {
  ASSIGN_OR_RETURN(Plan plan, BuildPlanOfPrecision(spec, options));
  if (spec.train.precision == Precision::kBf16) {
    // The memory report's saving: the same model and batch in f32.
    TrainSpec fp32 = spec;
    fp32.train.precision = Precision::kFp32;
    fp32.train.memory_bytes = 0;
    ASSIGN_OR_RETURN(const Plan reference, BuildPlanOfPrecision(fp32, options));
    plan.memory.fp32_peak_activation_bytes = reference.memory.peak_activation_bytes;
    plan.memory.fp32_arena_bytes = reference.memory.arena_bytes;
  }
  return plan;
}

}  // namespace

absl::StatusOr<Plan> BuildPlan(const TrainSpec& spec, const PlanOptions& options) {
  RETURN_IF_ERROR(CheckConfig(spec.train));
  if (spec.train.memory_bytes > 0) {
    ASSIGN_OR_RETURN(const MemoryFit fit,
                     FitToMemory(spec, options, [&options](const TrainSpec& candidate) {
                       return BuildPlanOfPrecision(candidate, options);
                     }));
    ASSIGN_OR_RETURN(Plan plan, BuildReportedPlan(fit.spec, options));
    plan.memory_choice = fit.table;
    return plan;
  }
  return BuildReportedPlan(spec, options);
}

}  // namespace trainc
