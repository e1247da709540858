// A .train model with Llama's architecture as Hugging Face's
// LlamaForCausalLM stores it: config.json's keys (LlamaConfig) and, for
// every tensor, its name there and where it sits in trainc's parameters
// (runtime/checkpoint/hf_folder.h reads the same mapping back).
//
// A model qualifies when its parameters are exactly those of
// dsl_examples/llama_tiny.train: embed_tokens, h.N.{input_layernorm,
// self_attn.qkv, self_attn.o_proj, post_attention_layernorm,
// mlp.gate_proj, mlp.up_proj, mlp.down_proj}, norm and an untied lm_head,
// with one causal_attention (rope on), one rmsnorm eps and one activation
// (silu, gelu or relu) in the MLPs; otherwise
// LlamaLayoutOf says what is missing or extra.
#ifndef TRAINC_TOOLS_HF_LLAMA_LAYOUT_H_
#define TRAINC_TOOLS_HF_LLAMA_LAYOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/spec/train_spec.h"
#include "tools/hf/gpt2_layout.h"

namespace trainc::hf {

struct LlamaLayout {
  int64_t vocab = 0, positions = 0, width = 0, layers = 0, heads = 0, kv_heads = 0;
  int64_t head_dim = 0, intermediate = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000;
  // The MLP's activation as transformers' ACT2FN names it: "silu" (Llama's
  // own), "gelu" (erf), "gelu_pytorch_tanh" or "relu".
  std::string hidden_act = "silu";
  std::vector<HfTensor> tensors;
  // By LlamaConfig key (num_attention_heads, ...): the statement that sets
  // its value.
  std::map<std::string, KeySource> sources;
};

absl::StatusOr<LlamaLayout> LlamaLayoutOf(const ModelSpec& model);

// config.json for transformers' LlamaConfig.
std::string LlamaConfigJson(const LlamaLayout& layout);

}  // namespace trainc::hf

#endif  // TRAINC_TOOLS_HF_LLAMA_LAYOUT_H_
