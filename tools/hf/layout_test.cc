// How .train models map onto transformers' GPT2LMHeadModel and
// LlamaForCausalLM (tools/hf).
#include "tools/hf/gpt2_layout.h"

#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "compiler/frontend/frontend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/hf/llama_layout.h"

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
  EXPECT_EQ(l->hidden_act, "silu");  // SwiGLU's gate
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
