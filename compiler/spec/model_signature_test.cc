// A model's signature: what it computes, not how it is trained or named.
#include "compiler/spec/model_signature.h"

#include <fstream>
#include <sstream>

#include "compiler/frontend/frontend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kLlama[] = "dsl_examples/llama_tiny.train";

ModelSpec Compile(const std::string& path, const Overrides& overrides = {}) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult r = CompileFile(path, overrides, model_only);
  EXPECT_TRUE(r.spec) << FormatDiagnostics(r.diagnostics, r.source);
  return r.spec ? r.spec->model : ModelSpec();
}

TEST(ModelSignature, NamesEveryCallOnceWithItsConstants) {
  const std::vector<std::string> lines = ModelSignatureLines(Compile(kLlama));
  EXPECT_THAT(lines, Contains("6 x causal_attention(heads=8, kv_heads=2, rope=true, "
                              "rope_theta=10000)"));
  EXPECT_THAT(lines, Contains("13 x rmsnorm(eps=1e-06)"));
  EXPECT_THAT(lines, Contains("input tokens: i32[64]"));
  EXPECT_THAT(lines, Contains("label next: i32[64]"));
  const std::string gpt = ModelSignature(Compile("dsl_examples/tiny_gpt.train"));
  EXPECT_THAT(gpt, HasSubstr("weight=wte.weight"));  // the tied head
  EXPECT_THAT(gpt, Not(HasSubstr("init")));          // weights are past their init
}

TEST(ModelSignature, TheTrainingSettingsDoNotChangeIt) {
  EXPECT_EQ(
      ModelSignature(Compile(kLlama)),
      ModelSignature(Compile(
          kLlama, {{"micro_batch", "4"}, {"gpus", "1"}, {"seed", "3"}, {"recompute", "true"}})));
}

TEST(ModelSignature, ADropoutRateIsNotTheModel) {
  // A fine-tune changes the rate (or drops dropout); the weights fit either.
  constexpr char kCnn[] = "dsl_examples/fashion_cnn.train";
  std::ifstream in(kCnn);
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  ASSERT_NE(source.find("p = 0.3"), std::string::npos);
  const std::string other = ::testing::TempDir() + "/cnn_dropout.train";
  std::ofstream(other) << std::string(source).replace(source.find("p = 0.3"), 7, "p = 0.1");
  EXPECT_EQ(ModelSignature(Compile(kCnn)), ModelSignature(Compile(other)));
  EXPECT_THAT(ModelSignature(Compile(kCnn)), Not(HasSubstr("dropout")));
}

TEST(ModelSignature, TheDifferenceNamesWhatDiffers) {
  const std::string four = ModelSignature(Compile(kLlama));
  // The same shapes: 16 heads of 16 over 1 key/value head.
  const std::string other =
      ModelSignature(Compile(kLlama, {{"heads", "16"}, {"kv_heads", "1"}, {"head", "16"}}));
  ASSERT_NE(four, other);
  const std::string why = ModelSignatureDifference(other, "the checkpoint's", four, "f.train's");
  EXPECT_THAT(why, HasSubstr("the checkpoint's has 6 x causal_attention(heads=16, kv_heads=1,"));
  EXPECT_THAT(why, HasSubstr("where f.train's has 6 x causal_attention(heads=8, kv_heads=2,"));
  EXPECT_THAT(why, Not(HasSubstr("rmsnorm")));  // the same in both
  EXPECT_EQ(ModelSignatureDifference(four, "a", four, "b"), "");
}

}  // namespace
}  // namespace trainc
