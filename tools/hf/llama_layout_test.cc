#include "tools/hf/llama_layout.h"

#include <string>

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

TEST(LlamaLayout, LlamaTinyMapsOntoLlamaForCausalLM) {
  absl::StatusOr<LlamaLayout> l = LlamaLayoutOf(Compile("dsl_examples/llama_tiny.train"));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vocab, 256);
  EXPECT_EQ(l->positions, 64);
  EXPECT_EQ(l->width, 256);
  EXPECT_EQ(l->layers, 6);
  EXPECT_EQ(l->heads, 8);
  EXPECT_EQ(l->kv_heads, 2);
  EXPECT_EQ(l->head_dim, 32);
  EXPECT_EQ(l->intermediate, 688);
  EXPECT_EQ(l->rms_norm_eps, 1e-6);
  EXPECT_EQ(l->rope_theta, 10000);
  // embed_tokens, 9 per layer (q, k, v from one fused weight), norm, lm_head.
  ASSERT_EQ(l->tensors.size(), 1 + 9 * 6 + 2u);
  EXPECT_EQ(l->tensors[0].hf_name, "model.embed_tokens.weight");
  const HfTensor* qkv = &l->tensors[2];
  const char* hf[] = {"q_proj", "k_proj", "v_proj"};
  const int64_t begin[] = {0, 256, 320}, rows[] = {256, 64, 64};
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(qkv[p].trainc_name, "h.0.self_attn.qkv.weight");
    EXPECT_EQ(qkv[p].hf_name, std::string("model.layers.0.self_attn.") + hf[p] + ".weight");
    EXPECT_EQ(qkv[p].row_begin, begin[p]) << hf[p];
    EXPECT_EQ(qkv[p].rows, rows[p]) << hf[p];
  }
  EXPECT_EQ(l->tensors.back().hf_name, "lm_head.weight");
  const std::string config = LlamaConfigJson(*l);
  EXPECT_THAT(config, HasSubstr("\"num_key_value_heads\": 2"));
  EXPECT_THAT(config, HasSubstr("\"intermediate_size\": 688"));
  EXPECT_THAT(config, HasSubstr("\"tie_word_embeddings\": false"));
}

TEST(LlamaLayout, OtherModelsAreRefusedSayingWhy) {
  absl::StatusOr<LlamaLayout> gpt = LlamaLayoutOf(Compile("dsl_examples/tiny_gpt.train"));
  ASSERT_FALSE(gpt.ok());
  EXPECT_THAT(gpt.status().message(), HasSubstr("does not have Llama's layout"));
  // transformers' LlamaAttention needs heads x head size = width.
  absl::StatusOr<LlamaLayout> narrow =
      LlamaLayoutOf(Compile("dsl_examples/llama_tiny.train", {{"head", "16"}}));
  ASSERT_FALSE(narrow.ok());
  EXPECT_THAT(narrow.status().message(), HasSubstr("heads x head size is 128, not the width 256"));
}

}  // namespace
}  // namespace trainc::hf
