// gpu_bench's MFU arithmetic on a real plan (the benchmark itself needs a
// GPU; its FLOP count does not).
#include "tools/bench/gpu_bench_gpt.h"

#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"

namespace trainc::bench {
namespace {

TEST(GpuBenchGpt, StepFlopsAreSixNPlusAttentionPerToken) {
  // tiny_gpt: vocab 256, context 64, width 128, 4 layers; micro-batch 8.
  FrontendResult r = CompileFile("dsl_examples/tiny_gpt.train",
                                 {{"gpus", "1"}, {"micro_batch", "8"}, {"accumulate", "1"},
                                  {"global_batch", "8"}, {"precision", "bf16"}});
  ASSERT_TRUE(r.spec) << FormatDiagnostics(r.diagnostics, r.source);
  absl::StatusOr<Plan> plan = BuildPlan(*r.spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Parameters counted by hand: embeddings (the head is tied), 4 blocks of
  // two layernorms, q|k|v, projection and MLP, and the final layernorm.
  const double d = 128, block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) +
                                (4 * d * d + 4 * d) + (4 * d * d + d);
  const double n = 256 * d + 64 * d + 4 * block + 2 * d;
  const double tokens = 8 * 64;
  EXPECT_DOUBLE_EQ(GptStepFlops(*plan), (6 * n + 12 * 4 * d * 64) * tokens);
}

}  // namespace
}  // namespace trainc::bench
