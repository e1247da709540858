// config.json against the .train's model (tools/hf/config_check.h): the
// export's own config is accepted, and every key planted with another
// value is refused naming the key, both values and the .train statement.
#include "tools/hf/config_check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/hf/gpt2_layout.h"
#include "tools/hf/llama_layout.h"

namespace trainc::hf {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kGpt2[] = "dsl_examples/tiny_gpt.train";
constexpr char kLlama[] = "dsl_examples/llama_tiny.train";
constexpr char kPath[] = "/hf/config.json";

ModelSpec Compile(const std::string& path) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult r = CompileFile(path, {}, model_only);
  EXPECT_TRUE(r.spec) << FormatDiagnostics(r.diagnostics, r.source);
  return r.spec ? r.spec->model : ModelSpec();
}

// `config` (one key a line, as the layouts write it) with `key`'s value
// replaced by `value`, or added first when absent; "" removes the key.
std::string With(std::string config, const std::string& key, const std::string& value) {
  const std::string start = absl::StrCat("  \"", key, "\": ");
  const size_t at = config.find(start);
  if (at == std::string::npos) {
    EXPECT_FALSE(value.empty()) << key;
    return absl::StrCat("{\n", start, value, ",\n", config.substr(2));
  }
  const size_t end = config.find('\n', at);
  const bool comma = config[end - 1] == ',';
  config.erase(at, end + 1 - at);
  if (!value.empty()) config.insert(at, absl::StrCat(start, value, comma ? ",\n" : "\n"));
  return config;
}

std::string Check(const std::string& train, const std::string& config) {
  const absl::Status s = CheckHfConfigText(kPath, config, Compile(train), train);
  return s.ok() ? "ok" : std::string(s.message());
}

std::string Gpt2Config() { return Gpt2ConfigJson(*Gpt2LayoutOf(Compile(kGpt2))); }
std::string LlamaConfig() { return LlamaConfigJson(*LlamaLayoutOf(Compile(kLlama))); }

struct Planted {
  const char* key;
  const char* value;      // planted into config.json
  const char* model;      // the .train's value, as the message writes it
  const char* statement;  // where the .train sets it
};

TEST(CheckHfConfig, TheExportsOwnConfigIsAccepted) {
  EXPECT_EQ(Check(kGpt2, Gpt2Config()), "ok");
  EXPECT_EQ(Check(kLlama, LlamaConfig()), "ok");
}

TEST(CheckHfConfig, EveryGpt2KeyIsChecked) {
  const Planted cases[] = {
      {"vocab_size", "50257", "256", ":31:12 (wte = embedding)"},
      {"n_positions", "1024", "64", ":32:12 (wpe = position_embedding)"},
      {"n_embd", "64", "128", ":31:12 (wte = embedding)"},
      {"n_layer", "12", "4", ":33:12 (h = repeat)"},
      {"n_head", "2", "4", ":13:14 (h.0.attn.y = causal_attention)"},
      {"n_inner", "256", "512", ":18:14 (h.0.mlp.c_fc = linear)"},
      {"activation_function", "\"gelu\"", "\"gelu_new\"", ":19:21 (h.0.mlp.c_proj.0 = gelu)"},
      {"layer_norm_epsilon", "1e-06", "1e-05", ":23:12 (h.0.ln_1 = layernorm)"},
      {"tie_word_embeddings", "false", "true", ":35:12 (logits = linear)"},
      {"scale_attn_weights", "false", "true", ":13:14"},
      {"scale_attn_by_inverse_layer_idx", "true", "false", ":13:14"},
      {"add_cross_attention", "true", "false", ":13:14"},
  };
  for (const Planted& p : cases) {
    const std::string got = Check(kGpt2, With(Gpt2Config(), p.key, p.value));
    EXPECT_THAT(got, HasSubstr(absl::StrCat(kPath, ": ", p.key, " is ", p.value, ", but ", kGpt2,
                                            p.statement)))
        << p.key;
    EXPECT_THAT(got, HasSubstr(absl::StrCat(" has ", p.model))) << p.key;
    EXPECT_THAT(got, HasSubstr(absl::StrCat("describes another model than ", kGpt2))) << p.key;
  }
}

TEST(CheckHfConfig, EveryLlamaKeyIsChecked) {
  const Planted cases[] = {
      {"vocab_size", "32000", "256", ":36:18 (embed_tokens = embedding)"},
      {"hidden_size", "128", "256", ":36:18 (embed_tokens = embedding)"},
      {"intermediate_size", "512", "688", ":21:17 (h.0.mlp.gate_proj = linear)"},
      {"num_hidden_layers", "5", "6", ":37:18 (h = repeat)"},
      {"num_attention_heads", "16", "8", ":16:14 (h.0.self_attn.y = causal_attention)"},
      {"num_key_value_heads", "1", "2", ":16:14 (h.0.self_attn.y = causal_attention)"},
      {"head_dim", "16", "32", ":15:14 (h.0.self_attn.qkv = linear)"},
      {"hidden_act", "\"gelu\"", "\"silu\"", ":23:24 (h.0.mlp.down_proj.0 = silu)"},
      {"rms_norm_eps", "1e-05", "1e-06", ":28:32 (h.0.input_layernorm = rmsnorm)"},
      {"rope_theta", "500000.0", "10000", ":16:14 (h.0.self_attn.y = causal_attention)"},
      {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", "null", ":16:14"},
      {"attention_bias", "true", "false", ":15:14 (h.0.self_attn.qkv = linear)"},
      {"mlp_bias", "true", "false", ":21:17 (h.0.mlp.gate_proj = linear)"},
      {"tie_word_embeddings", "true", "false", ":39:18 (lm_head = linear)"},
  };
  for (const Planted& p : cases) {
    const std::string got = Check(kLlama, With(LlamaConfig(), p.key, p.value));
    const std::string folder = std::string(p.value) == "500000.0" ? "500000"
                               : p.key == std::string("rope_scaling")
                                   ? "{\"type\": \"linear\", \"factor\": 2}"
                                   : p.value;
    EXPECT_THAT(got, HasSubstr(absl::StrCat(kPath, ": ", p.key, " is ", folder, ", but ", kLlama,
                                            p.statement)))
        << p.key;
    EXPECT_THAT(got, HasSubstr(absl::StrCat(" has ", p.model))) << p.key;
  }
}

TEST(CheckHfConfig, TheIssuesCaseNamesEveryKeyThatDiffers) {
  // llama_tiny's tensors under 16 heads of 16 over 1 key/value head...
  std::string config = With(LlamaConfig(), "head_dim", "");
  config = With(With(config, "num_attention_heads", "16"), "num_key_value_heads", "4");
  config = With(config, "rope_theta", "500000");
  const std::string got = Check(kLlama, config);
  EXPECT_THAT(got, HasSubstr("num_attention_heads is 16, but"));
  EXPECT_THAT(got, HasSubstr("num_key_value_heads is 4, but"));
  // ...whose head size (absent: 256 / 16) differs too.
  EXPECT_THAT(got, HasSubstr("head_dim is 16 (absent: null, hidden_size / num_attention_heads)"));
  EXPECT_THAT(got, HasSubstr("rope_theta is 500000, but"));
  EXPECT_THAT(got, Not(HasSubstr("vocab_size")));
}

TEST(CheckHfConfig, AbsentKeysTakeTransformersDefaults) {
  // LlamaConfig: rope_theta 10000, rms_norm_eps 1e-6, silu, no scaling or
  // bias, untied; head_dim from the heads.
  std::string llama = LlamaConfig();
  for (const char* key : {"rope_theta", "rms_norm_eps", "hidden_act", "rope_scaling",
                          "attention_bias", "tie_word_embeddings", "head_dim"}) {
    llama = With(llama, key, "");
  }
  EXPECT_EQ(Check(kLlama, llama), "ok");
  // num_key_value_heads absent or null: as many as the query heads.
  for (const char* kv : {"", "null"}) {
    EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "num_key_value_heads", kv)),
                HasSubstr("num_key_value_heads is 8 (absent: null, num_attention_heads), but"))
        << kv;
  }
  // A default that differs is refused too: vocab_size 32000.
  EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "vocab_size", "")),
              HasSubstr("vocab_size is 32000 (absent: LlamaConfig's default), but"));
  // GPT2Config: gelu_new, eps 1e-5, n_inner null (4 x n_embd), tied.
  std::string gpt2 = With(Gpt2Config(), "n_inner", "");
  for (const char* key :
       {"activation_function", "layer_norm_epsilon", "tie_word_embeddings", "scale_attn_weights"}) {
    gpt2 = With(gpt2, key, "");
  }
  EXPECT_EQ(Check(kGpt2, gpt2), "ok");
  EXPECT_EQ(Check(kGpt2, With(Gpt2Config(), "n_inner", "512")), "ok");
  EXPECT_THAT(Check(kGpt2, With(Gpt2Config(), "n_head", "")),
              HasSubstr("n_head is 12 (absent: GPT2Config's default), but"));
}

TEST(CheckHfConfig, NumbersCompareAsJsonReadsThem) {
  EXPECT_EQ(Check(kLlama, With(LlamaConfig(), "rope_theta", "10000")), "ok");
  EXPECT_EQ(Check(kLlama, With(LlamaConfig(), "rope_theta", "1e4")), "ok");
  EXPECT_EQ(Check(kLlama, With(LlamaConfig(), "rms_norm_eps", "0.000001")), "ok");
  EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "rms_norm_eps", "1.0000001e-06")),
              HasSubstr("rms_norm_eps is 1.0000001e-06, but"));
  EXPECT_EQ(Check(kGpt2, With(Gpt2Config(), "layer_norm_epsilon", "1.0e-5")), "ok");
}

TEST(CheckHfConfig, OtherSpellingsOfTheSameModelAreAccepted) {
  // GPT2Config's attribute_map: hidden_size is n_embd; ACT2FN's tanh GELU.
  EXPECT_EQ(Check(kGpt2, With(With(Gpt2Config(), "n_embd", ""), "hidden_size", "128")), "ok");
  EXPECT_EQ(Check(kGpt2, With(Gpt2Config(), "activation_function", "\"gelu_pytorch_tanh\"")), "ok");
  EXPECT_EQ(Check(kLlama, With(LlamaConfig(), "hidden_act", "\"swish\"")), "ok");
}

TEST(CheckHfConfig, MorePositionsThanTheContextAreFineFewerAreNot) {
  EXPECT_EQ(Check(kLlama, With(LlamaConfig(), "max_position_embeddings", "4096")), "ok");
  EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "max_position_embeddings", "32")),
              HasSubstr(absl::StrCat("max_position_embeddings is 32, fewer than the context 64 of ",
                                     kLlama, ":11:10 (input tokens)")));
  // GPT-2's wpe is a table of exactly the context's rows.
  EXPECT_THAT(Check(kGpt2, With(Gpt2Config(), "n_positions", "128")),
              HasSubstr("n_positions is 128, but"));
}

TEST(CheckHfConfig, AnotherModelTypeOrLayoutIsRefused) {
  EXPECT_THAT(Check(kGpt2, LlamaConfig()),
              HasSubstr(absl::StrCat(kPath, ": model_type is \"llama\", but the model of ", kGpt2,
                                     " has GPT-2's layout (\"gpt2\")")));
  EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "model_type", "\"mistral\"")),
              HasSubstr("model_type is \"mistral\""));
  EXPECT_THAT(Check(kLlama, With(LlamaConfig(), "model_type", "")),
              HasSubstr("no \"model_type\" string"));
  EXPECT_THAT(Check("dsl_examples/fashion_mlp.train", Gpt2Config()),
              HasSubstr("has neither: model fashion_mlp does not have GPT-2's layout"));
  EXPECT_THAT(Check(kLlama, "{\"model_type\": "), HasSubstr(absl::StrCat(kPath, ":1:")));
}

TEST(CheckHfConfig, ReadsTheFolder) {
  const absl::Status missing = CheckHfConfig("/nonexistent", Compile(kGpt2), kGpt2);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("cannot read /nonexistent/config.json"));
}

}  // namespace
}  // namespace trainc::hf
