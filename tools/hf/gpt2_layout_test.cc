#include "tools/hf/gpt2_layout.h"

#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "compiler/frontend/frontend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc::hf {
namespace {

using ::testing::HasSubstr;

ModelSpec Compile(const std::string& path, const Overrides& overrides = {}) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult r = CompileFile(path, overrides, model_only);
  EXPECT_TRUE(r.spec) << FormatDiagnostics(r.diagnostics, r.source);
  return r.spec ? r.spec->model : ModelSpec();
}

TEST(Gpt2Layout, TinyGptMapsOntoGpt2LmHeadModel) {
  absl::StatusOr<Gpt2Layout> l = Gpt2LayoutOf(Compile("dsl_examples/tiny_gpt.train"));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vocab, 256);
  EXPECT_EQ(l->positions, 64);
  EXPECT_EQ(l->width, 128);
  EXPECT_EQ(l->layers, 4);
  EXPECT_EQ(l->heads, 4);
  EXPECT_EQ(l->activation, "gelu_new");
  EXPECT_EQ(l->layer_norm_eps, 1e-5);
  ASSERT_EQ(l->tensors.size(), 2 + 12 * 4 + 2u);
  const HfTensor& c_attn = l->tensors[4];
  EXPECT_EQ(c_attn.trainc_name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(c_attn.hf_name, "transformer.h.0.attn.c_attn.weight");
  EXPECT_TRUE(c_attn.transposed);  // Conv1D: [in, out]
  EXPECT_FALSE(l->tensors[5].transposed);  // its bias
  const std::string config = Gpt2ConfigJson(*l);
  EXPECT_THAT(config, HasSubstr("\"n_layer\": 4,"));
  EXPECT_THAT(config, HasSubstr("\"activation_function\": \"gelu_new\","));
  EXPECT_THAT(config, HasSubstr("\"tie_word_embeddings\": true"));
}

TEST(Gpt2Layout, OtherModelsAreRefusedSayingWhy) {
  absl::StatusOr<Gpt2Layout> mlp = Gpt2LayoutOf(Compile("dsl_examples/fashion_mlp.train"));
  EXPECT_FALSE(mlp.ok());
  EXPECT_THAT(mlp.status().message(), HasSubstr("does not have GPT-2's layout"));
  EXPECT_THAT(mlp.status().message(), HasSubstr("wte.weight"));

  // An untied head has an extra parameter.
  std::ifstream in("dsl_examples/tiny_gpt.train");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = ::testing::TempDir() + "/untied.train";
  std::ofstream(path) << absl::StrReplaceAll(
      text, {{"weight = wte.weight, bias = false", "bias = false"}});
  absl::StatusOr<Gpt2Layout> untied = Gpt2LayoutOf(Compile(path));
  EXPECT_FALSE(untied.ok());
  EXPECT_THAT(untied.status().message(), HasSubstr("logits.weight"));
}

}  // namespace
}  // namespace trainc::hf
