// ZeRO-3 plans: parameters kept as persistent shards, gathered on the comm
// stream before each pass reads them, live only until that pass's last
// reader, issued zero_prefetch buckets ahead; bf16 copies cast per pass.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// 2 ranks x micro_batch 16 x accumulate 2, four linear layers in buckets
// of 0.1 MB.
TrainSpec Zero3Spec(int64_t prefetch, int64_t zero = 3) {
  TrainSpec spec = testing::MlpSpec(784, {256, 128, 64}, 10, /*gpus=*/2, /*micro_batch=*/16,
                                    /*accumulate=*/2);
  spec.train.bucket_mb = 0.1;
  spec.train.zero = zero;
  spec.train.zero_prefetch = prefetch;
  return spec;
}

Plan Build(const TrainSpec& spec) {
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : Plan();
}

bool Reads(const Instruction& in, const std::set<int>& ids) {
  for (int id : in.inputs) {
    if (ids.count(id)) return true;
  }
  return false;
}

// A gather's span and the parameter views inside it.
std::set<int> SpanAndViews(const Plan& plan, const Instruction& gather) {
  const Buffer& span = plan.buffers[gather.outputs[0]];
  std::set<int> ids = {span.id};
  for (const Buffer& b : plan.buffers) {
    if (b.kind == BufferKind::kParameter && b.offset >= span.offset &&
        b.offset + b.bytes <= span.offset + span.bytes && b.first_use >= span.first_use &&
        b.last_use <= span.last_use && b.first_use >= 0) {
      ids.insert(b.id);
    }
  }
  return ids;
}

// The first compute instruction reading what `gather` gathered.
int FirstReader(const Plan& plan, const Instruction& gather) {
  const std::set<int> ids = SpanAndViews(plan, gather);
  for (const Instruction& in : plan.instructions) {
    if (in.stream == Stream::kCompute && Reads(in, ids)) return in.id;
  }
  return -1;
}

TEST(Zero3Plan, ParametersPersistOnlyAsShards) {
  const Plan plan = Build(Zero3Spec(1));
  ASSERT_TRUE(ValidatePlan(plan).ok()) << ValidatePlan(plan);
  const Plan zero2 = Build(Zero3Spec(1, /*zero=*/2));
  EXPECT_EQ(plan.zero, 3);
  ASSERT_GE(plan.buckets.size(), 3u);
  int64_t shard_bytes = 0;
  for (const Bucket& b : plan.buckets) {
    ASSERT_GE(b.param_shard, 0);
    const Buffer& shard = plan.buffers[b.param_shard];
    EXPECT_EQ(shard.kind, BufferKind::kParamShard);
    EXPECT_EQ(shard.bytes * plan.world_size, b.bytes);
    EXPECT_EQ(shard.first_use, -1) << shard.name;  // the whole run
    // The span is a layout: never live, its views' offsets from its start.
    const Buffer& span = plan.buffers[b.param_span];
    EXPECT_EQ(span.first_use, -1);
    EXPECT_EQ(span.offset, 0);
    shard_bytes += shard.bytes;
  }
  const std::set<int> layout(plan.parameter_buffers.begin(), plan.parameter_buffers.end());
  for (const Buffer& b : plan.buffers) {
    if (b.kind != BufferKind::kParameter) continue;
    // A layout (never live), or a view of a gathered span (live).
    EXPECT_EQ(layout.count(b.id) == 1, b.first_use < 0) << b.name;
  }
  EXPECT_EQ(plan.memory.parameter_bytes, shard_bytes);
  EXPECT_EQ(plan.memory.parameter_bytes * plan.world_size, zero2.memory.parameter_bytes);
  // The optimizer updates the shard and nothing gathers after it.
  for (const Instruction& in : plan.instructions) {
    if (in.op != "optimizer") continue;
    const Bucket& b = plan.buckets[static_cast<int>(in.attrs.at("bucket"))];
    EXPECT_EQ(in.inputs[0], b.param_shard);
    EXPECT_EQ(in.outputs[0], b.param_shard);
    for (int j = in.id + 1; j < static_cast<int>(plan.instructions.size()); ++j) {
      EXPECT_NE(plan.instructions[j].op, "all_gather") << "after " << in.label;
    }
  }
}

// GatheredSpanViews (what viz draws a reader's edge from) pairs each
// gathered span with the parameters inside it, as the scan above does.
TEST(Zero3Plan, GatheredSpanViewsAreTheParametersInsideEachLiveSpan) {
  const Plan plan = Build(Zero3Spec(1));
  const std::map<int, std::vector<int>> views = GatheredSpanViews(plan);
  size_t gathers = 0;
  for (const Instruction& in : plan.instructions) {
    if (in.op != "all_gather") continue;
    ++gathers;
    std::set<int> want = SpanAndViews(plan, in);
    want.erase(in.outputs[0]);
    EXPECT_FALSE(want.empty()) << in.label;
    auto got = views.find(in.outputs[0]);
    ASSERT_NE(got, views.end()) << in.label;
    EXPECT_EQ(std::set<int>(got->second.begin(), got->second.end()), want) << in.label;
  }
  EXPECT_GT(gathers, 0u);
  EXPECT_EQ(views.size(), gathers);
}

TEST(Zero3Plan, EachPassGathersBeforeItsReadersAndFreesTheSpanAfter) {
  const Plan plan = Build(Zero3Spec(1));
  std::map<int, int> first_backward;  // micro-step -> its first backward instruction
  for (const Instruction& in : plan.instructions) {
    if (in.phase == Phase::kBackward && !first_backward.count(in.micro_step)) {
      first_backward[in.micro_step] = in.id;
    }
  }
  std::map<std::pair<int, int>, int> forward_gathers;  // (micro, bucket) -> count
  for (const Instruction& g : plan.instructions) {
    if (g.op != "all_gather") continue;
    const int bucket = static_cast<int>(g.attrs.at("bucket"));
    const bool backward = g.attrs.at("backward") != 0;
    EXPECT_EQ(g.inputs, std::vector<int>{plan.buckets[bucket].param_shard}) << g.label;
    EXPECT_EQ(g.stream, Stream::kComm);
    if (!backward) ++forward_gathers[{g.micro_step, bucket}];
    // Its bytes may be reused ones: it waits for the compute instruction
    // before it.
    int before = -1;
    for (int j = g.id - 1; j >= 0 && before < 0; --j) {
      if (plan.instructions[j].stream == Stream::kCompute) before = j;
    }
    if (before >= 0) {
      ASSERT_EQ(g.wait_events.size(), 1u) << g.label;
      const std::vector<int>& recorded = plan.instructions[before].record_events;
      EXPECT_TRUE(std::count(recorded.begin(), recorded.end(), g.wait_events[0])) << g.label;
    }
    // Every reader is of its pass and micro-step, after it; the first
    // waits for it.
    const std::set<int> ids = SpanAndViews(plan, g);
    const int first = FirstReader(plan, g);
    ASSERT_GT(first, g.id) << g.label;
    const std::vector<int>& waits = plan.instructions[first].wait_events;
    EXPECT_TRUE(std::count(waits.begin(), waits.end(), g.record_events[0])) << g.label;
    for (const Instruction& in : plan.instructions) {
      if (in.stream != Stream::kCompute || !Reads(in, ids)) continue;
      EXPECT_EQ(in.micro_step, g.micro_step) << in.label << " reads " << g.label;
      EXPECT_EQ(in.phase, backward ? Phase::kBackward : Phase::kForward)
          << in.label << " reads " << g.label;
    }
    // The forward's span is free before the backward begins.
    if (!backward) {
      EXPECT_LT(plan.buffers[g.outputs[0]].last_use, first_backward.at(g.micro_step)) << g.label;
    }
  }
  // Every bucket, every micro-step, once for the forward.
  for (int k = 0; k < plan.accumulate; ++k) {
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      EXPECT_EQ((forward_gathers[{k, static_cast<int>(b)}]), 1) << "micro " << k << " bucket " << b;
    }
  }
}

// The most first readers still to come, over the compute instructions,
// of gathers already issued: zero_prefetch + 1 (the reader about to run
// and those prefetched for; a reader of two buckets counts once).
int MostReadersAhead(const Plan& plan) {
  std::vector<std::pair<int, int>> windows;  // (gather, first reader)
  for (const Instruction& g : plan.instructions) {
    if (g.op == "all_gather") windows.push_back({g.id, FirstReader(plan, g)});
  }
  int most = 0;
  for (const Instruction& in : plan.instructions) {
    if (in.stream != Stream::kCompute) continue;
    std::set<int> readers;
    for (const auto& [gather, reader] : windows) {
      if (gather < in.id && reader >= in.id) readers.insert(reader);
    }
    most = std::max(most, static_cast<int>(readers.size()));
  }
  return most;
}

TEST(Zero3Plan, PrefetchIsHowManyBucketsAheadAGatherIsIssued) {
  for (int64_t depth : {0, 1, 2}) {
    const Plan plan = Build(Zero3Spec(depth));
    EXPECT_EQ(plan.zero_prefetch, depth);
    EXPECT_TRUE(plan.zero_prefetch_choice.empty());
    EXPECT_EQ(MostReadersAhead(plan), depth + 1) << "zero_prefetch " << depth;
    if (depth == 0) {  // each gather right before its first reader
      for (const Instruction& g : plan.instructions) {
        if (g.op != "all_gather") continue;
        for (int j = g.id + 1; j < FirstReader(plan, g); ++j) {
          EXPECT_NE(plan.instructions[j].stream, Stream::kCompute) << g.label;
        }
      }
    }
  }
}

TEST(Zero3Plan, AutoPrefetchReplaysEveryDepth) {
  const Plan plan = Build(Zero3Spec(-1));
  EXPECT_GE(plan.zero_prefetch, 0);
  EXPECT_LE(plan.zero_prefetch, 3);
  EXPECT_THAT(plan.zero_prefetch_choice, HasSubstr("zero_prefetch = "));
  EXPECT_THAT(plan.zero_prefetch_choice, HasSubstr("0: "));
  EXPECT_THAT(plan.zero_prefetch_choice, HasSubstr("3: "));
  EXPECT_THAT(PlanSummary(plan), HasSubstr("ZeRO-3"));
}

// x -> linear (bias) -> layernorm -> linear -> cross-entropy: under bf16
// the linear layers read bf16 copies, the layernorm its f32 parameters.
TrainSpec NormSpec() {
  testing::SpecBuilder b("norm");
  b.Input("x", {512});
  b.Label("y", ElementType::kI32, {});
  b.Linear("h", "x", 256);
  b.LayerNorm("n", "h");
  b.Linear("logits", "n", 10);
  b.CrossEntropy("loss", "logits", "y");
  TrainSpec spec = b.Build(/*gpus=*/2, /*micro_batch=*/8, /*accumulate=*/2);
  spec.train.bucket_mb = 0.1;
  spec.train.zero = 3;
  spec.train.zero_prefetch = 1;
  spec.train.precision = Precision::kBf16;
  return spec;
}

TEST(Zero3Plan, Bf16GathersTheCopiesWhereNothingReadsTheF32Parameters) {
  const Plan plan = Build(NormSpec());
  ASSERT_TRUE(ValidatePlan(plan).ok()) << ValidatePlan(plan);
  std::map<int, const Instruction*> writer;
  for (const Instruction& in : plan.instructions) {
    for (int id : in.outputs) writer[id] = &in;
  }
  int bf16_gathers = 0, f32_gathers = 0, copies_cast = 0;
  for (const Instruction& g : plan.instructions) {
    if (g.op == "cast" && plan.buffers[g.inputs[0]].kind == BufferKind::kParameter) {
      ++copies_cast;  // a copy cast from an f32 gather, in its pass
      EXPECT_GE(plan.buffers[g.outputs[0]].first_use, 0) << g.label;
    }
    if (g.op != "all_gather") continue;
    const Bucket& b = plan.buckets[static_cast<int>(g.attrs.at("bucket"))];
    const Buffer& span = plan.buffers[g.outputs[0]];
    if (span.dtype == DType::kF32) {
      ++f32_gathers;
      EXPECT_EQ(g.inputs[0], b.param_shard);
      EXPECT_EQ(span.bytes, b.bytes);
      continue;
    }
    ++bf16_gathers;
    EXPECT_EQ(span.bytes * 2, b.bytes) << g.label;
    // The rank's shard cast to bf16 just before, on the compute stream.
    const Instruction* cast = writer.at(g.inputs[0]);
    EXPECT_EQ(cast->op, "cast");
    EXPECT_EQ(cast->inputs, std::vector<int>{b.param_shard});
    EXPECT_LT(cast->id, g.id);
    // Its views are the bf16 copies the passes read.
    for (const Instruction& in : plan.instructions) {
      if (in.stream != Stream::kCompute || in.id == cast->id) continue;
      for (int id : in.inputs) {
        const Buffer& x = plan.buffers[id];
        if (x.offset >= span.offset && x.offset + x.bytes <= span.offset + span.bytes &&
            x.first_use >= span.first_use && x.last_use <= span.last_use) {
          EXPECT_EQ(x.kind, BufferKind::kParameterCopy) << in.label;
          EXPECT_EQ(x.dtype, DType::kBF16) << in.label;
          EXPECT_EQ(x.offset % 64, 0) << x.name;
        }
      }
    }
  }
  // The weight matrices' buckets are gathered as bf16 in both passes of
  // both micro-steps (the first layer's only in the forward: its input
  // needs no gradient); the vectors' bucket (biases, layernorm) as f32 in
  // the forward, its biases then cast per pass.
  EXPECT_GT(bf16_gathers, 0);
  EXPECT_GT(f32_gathers, 0);
  EXPECT_GT(copies_cast, 0);
  EXPECT_LT(plan.memory.arena_bytes, [&] {
    TrainSpec fp32 = NormSpec();
    fp32.train.precision = Precision::kFp32;
    return Build(fp32).memory.arena_bytes;
  }());
}

TEST(Zero3Plan, TheTextFormKeepsEverything) {
  TrainSpec spec = Zero3Spec(-1);
  spec.train.precision = Precision::kBf16;
  const Plan plan = Build(spec);
  const std::string text = PlanToText(plan);
  absl::StatusOr<Plan> back = PlanFromText(text, "zero3.plan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PlanToText(*back), text);
  EXPECT_EQ(back->zero_prefetch, plan.zero_prefetch);
  EXPECT_EQ(back->buckets[0].param_shard, plan.buckets[0].param_shard);
  // A shard that is not the bucket's size is refused.
  Plan bad = *back;
  bad.buffers[bad.buckets[0].param_shard].shape = {1};
  bad.buffers[bad.buckets[0].param_shard].bytes = 4;
  EXPECT_THAT(ValidatePlan(bad).message(), HasSubstr("parameter shard"));
}

}  // namespace
}  // namespace trainc
