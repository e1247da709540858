// Every example in dsl_examples/ compiles without errors or warnings.
#include <string>

#include "compiler/frontend/frontend.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

class ExamplesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExamplesTest, Compiles) {
  const FrontendResult r = CompileFile("dsl_examples/" + GetParam());
  EXPECT_TRUE(r.spec.has_value());
  EXPECT_EQ(FormatDiagnostics(r.diagnostics, r.source), "");
}

INSTANTIATE_TEST_SUITE_P(All, ExamplesTest,
                         ::testing::Values("fashion_mlp.train",
                                           "residual_mlp.train",
                                           "autoencoder_mse.train"));

TEST(ExamplesTest, FashionMlpIsTheDesignSketch) {
  const FrontendResult r = CompileFile("dsl_examples/fashion_mlp.train");
  ASSERT_TRUE(r.spec.has_value());
  const TrainConfig& t = r.spec->train;
  EXPECT_EQ(t.gpus, 2);
  EXPECT_EQ(t.micro_batch, 64);
  EXPECT_EQ(t.accumulate, 2);
  EXPECT_EQ(t.global_batch, 256);
  EXPECT_EQ(t.epochs, 10);
  EXPECT_EQ(t.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(t.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(t.bucket_mb, 0.1);  // small model: several buckets to overlap
  EXPECT_EQ(r.spec->model.parameter_count, 235146);
}

}  // namespace
}  // namespace trainc
