#include "compiler/planner/memory_plan.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "compiler/plan/plan.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

bool Overlap(int64_t a, int64_t a_bytes, int64_t b, int64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

TEST(PlanMemory, ReusesDeadBuffers) {
  // a dies before c is born: c takes a's place.
  const MemoryPlan m = PlanMemory({{100, 0, 1}, {100, 1, 2}, {100, 2, 3}});
  EXPECT_EQ(m.offsets[0], m.offsets[2]);
  EXPECT_NE(m.offsets[0], m.offsets[1]);
  EXPECT_EQ(m.size, 256);
  EXPECT_EQ(m.unshared_bytes, 384);
  EXPECT_EQ(m.peak_live_bytes, 256);
}

TEST(PlanMemory, BestFitAndMerging) {
  // Two freed neighbours merge into one block big enough for the third.
  const MemoryPlan m = PlanMemory({{64, 0, 0}, {64, 0, 0}, {128, 1, 1}, {64, 0, 2}});
  EXPECT_EQ(m.size, 192);  // 128 fits in the merged 64 + 64 hole.
  EXPECT_EQ(std::min(m.offsets[0], m.offsets[1]), m.offsets[2]);
}

TEST(PlanMemory, KeepsTheSmallerOfTwoPackings) {
  // In first-use order the 192 and the 128 come first, and the 256, born
  // when the 192 dies, does not fit its hole: 576 bytes. Largest first,
  // the 192 goes under the 256 (they never meet) and the 128 above: 384.
  const MemoryPlan m = PlanMemory({{256, 2, 5}, {192, 1, 1}, {128, 1, 4}});
  EXPECT_EQ(m.size, 384);
  EXPECT_EQ(m.offsets[0], m.offsets[1]);
  EXPECT_EQ(m.offsets[2], 256);
  EXPECT_EQ(m.peak_live_bytes, 384);
}

TEST(PlanMemory, RandomIntervalsNeverOverlapWhileLive) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<LiveInterval> iv;
    for (int i = 0; i < 300; ++i) {
      const int first = rng() % 200;
      iv.push_back({static_cast<int64_t>(1 + rng() % 5000), first,
                    first + static_cast<int>(rng() % 30)});
    }
    const MemoryPlan m = PlanMemory(iv);
    int64_t peak = 0;
    for (int t = 0; t < 230; ++t) {
      int64_t live = 0;
      for (size_t i = 0; i < iv.size(); ++i) {
        if (iv[i].first <= t && t <= iv[i].last) live += AlignUp(iv[i].bytes);
      }
      peak = std::max(peak, live);
    }
    EXPECT_EQ(m.peak_live_bytes, peak);
    EXPECT_GE(m.size, peak);
    for (size_t i = 0; i < iv.size(); ++i) {
      EXPECT_EQ(m.offsets[i] % kArenaAlignment, 0);
      EXPECT_LE(m.offsets[i] + iv[i].bytes, m.size);
      for (size_t j = i + 1; j < iv.size(); ++j) {
        const bool both_live = iv[i].first <= iv[j].last && iv[j].first <= iv[i].last;
        EXPECT_FALSE(both_live &&
                     Overlap(m.offsets[i], iv[i].bytes, m.offsets[j], iv[j].bytes))
            << "intervals " << i << " and " << j;
      }
    }
  }
}

// Containment that plan.h allows: a gradient (or its deterministic slot)
// inside its bucket, a parameter inside its span, optimizer state inside its
// state span.
bool Contains(const Buffer& outer, const Buffer& inner) {
  const bool kinds = (outer.kind == BufferKind::kBucket && inner.kind == BufferKind::kGradient) ||
                     (outer.kind == BufferKind::kParameterSpan &&
                      inner.kind == BufferKind::kParameter) ||
                     (outer.kind == BufferKind::kStateSpan &&
                      inner.kind == BufferKind::kOptimizerState);
  return kinds && outer.offset <= inner.offset &&
         inner.offset + inner.bytes <= outer.offset + outer.bytes;
}

// An output written over its input (ops::OpDef::in_place): the two meet at
// one instruction, the input's last and the output's first, at one offset.
bool InPlace(const Plan& plan, const Buffer& a, const Buffer& b) {
  for (const Instruction& in : plan.instructions) {
    const std::optional<std::pair<int, int>> operands = InPlaceOperands(in);
    if (!operands) continue;
    const auto [from, out] = *operands;
    const bool pair = (from == a.id && out == b.id) || (from == b.id && out == a.id);
    const Buffer& input = plan.buffers[from];
    const Buffer& output = plan.buffers[out];
    if (pair && input.offset == output.offset && input.last_use == in.id &&
        output.first_use == in.id) {
      return true;
    }
  }
  return false;
}

void ExpectNoLiveOverlap(const Plan& plan) {
  const int n = static_cast<int>(plan.instructions.size());
  auto live = [&](const Buffer& b, int& first, int& last) {
    first = b.first_use < 0 ? 0 : b.first_use;
    last = b.last_use < 0 ? n : b.last_use;
  };
  for (const Buffer& a : plan.buffers) {
    ASSERT_EQ(a.offset % 64, 0) << a.name;
    ASSERT_LE(a.offset + a.bytes, plan.arena_bytes) << a.name;
    for (const Buffer& b : plan.buffers) {
      if (a.id >= b.id || a.bytes == 0 || b.bytes == 0) continue;
      int af, al, bf, bl;
      live(a, af, al);
      live(b, bf, bl);
      if (af > bl || bf > al) continue;
      if (!Overlap(a.offset, a.bytes, b.offset, b.bytes)) continue;
      EXPECT_TRUE(Contains(a, b) || Contains(b, a) || InPlace(plan, a, b))
          << plan.model << ": " << a.name << " and " << b.name << " overlap while live";
    }
  }
  // Every buffer an instruction touches is live there.
  for (const Instruction& in : plan.instructions) {
    for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
      for (int id : *ids) {
        const Buffer& b = plan.buffers[id];
        if (b.first_use < 0) continue;
        EXPECT_LE(b.first_use, in.id);
        EXPECT_GE(b.last_use, in.id);
      }
    }
  }
}

TEST(PlanArena, ExamplesHaveNoOverlapWhileLive) {
  TrainSpec det = testing::ResidualSpec(12, 8, 4, 2, 4, 3);
  det.train.deterministic = true;
  det.train.bucket_mb = 0.0001;
  for (const TrainSpec& spec :
       {testing::FashionMlpSpec(), testing::ResidualSpec(12, 8, 4, 2, 4, 3),
        testing::AutoencoderSpec(16, 4, 1, 8, 4), det}) {
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectNoLiveOverlap(*plan);
  }
}

TEST(PlanArena, RandomModelsHaveNoOverlapWhileLive) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    TrainSpec spec = testing::RandomSpec(seed, 12, 3, 1 + seed % 3);
    spec.train.bucket_mb = (seed % 2) ? 0.0 : 0.0001;
    spec.train.deterministic = seed % 4 == 0;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectNoLiveOverlap(*plan);
  }
}

TEST(PlanArena, ParametersGradientsAndStateShareTheBucketLayout) {
  absl::StatusOr<Plan> plan = BuildPlan(testing::ResidualSpec(12, 8, 4, 2, 4, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, const Buffer*> by_name;
  for (const Buffer& b : plan->buffers) by_name[b.name] = &b;
  for (const Bucket& bucket : plan->buckets) {
    const Buffer& span = plan->buffers[bucket.param_span];
    const Buffer& grads = plan->buffers[bucket.grad_buffer];
    int64_t expected = 0;
    for (const std::string& p : bucket.parameters) {
      const int64_t rel = by_name[p]->offset - span.offset;
      EXPECT_EQ(rel, expected) << p;  // contiguous, in gradient order
      EXPECT_EQ(by_name["grad/" + p]->offset - grads.offset, rel) << p;
      EXPECT_EQ(by_name["m/" + p]->offset - plan->buffers[bucket.state_spans[0]].offset, rel);
      EXPECT_EQ(by_name["v/" + p]->offset - plan->buffers[bucket.state_spans[1]].offset, rel);
      expected += AlignUp(by_name[p]->bytes);
    }
    EXPECT_EQ(expected, bucket.bytes);
  }
}

TEST(PlanArena, ReportAddsUp) {
  absl::StatusOr<Plan> plan = BuildPlan(testing::FashionMlpSpec());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const MemoryReport& m = plan->memory;
  EXPECT_EQ(m.arena_bytes, plan->arena_bytes);
  EXPECT_EQ(m.parameter_bytes, m.gradient_bytes);  // one slot
  EXPECT_EQ(m.optimizer_state_bytes, 2 * m.parameter_bytes);  // adamw m, v
  EXPECT_GT(m.peak_activation_bytes, 0);
  EXPECT_LT(m.arena_bytes, m.unshared_bytes);  // reuse happened
  EXPECT_GE(m.arena_bytes, m.parameter_bytes + m.gradient_bytes + m.optimizer_state_bytes +
                               m.peak_activation_bytes);
}

}  // namespace
}  // namespace trainc
