// A .train model with GPT-2's architecture as Hugging Face's
// GPT2LMHeadModel stores it: config.json's keys, and for every parameter
// its name there ("transformer.h.0.attn.c_attn.weight") and whether its
// layout is transposed (GPT-2's Conv1D keeps weights as [in, out]; trainc's
// linear, as nn.Linear, as [out, in]).
//
// A model qualifies when its parameters are exactly GPT-2's (wte, wpe,
// h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f)
// with GPT-2's shapes and its head is tied to wte (dsl_examples/tiny_gpt
// and gpt2_small); otherwise Gpt2LayoutOf says what is missing or extra.
#ifndef TRAINC_TOOLS_HF_GPT2_LAYOUT_H_
#define TRAINC_TOOLS_HF_GPT2_LAYOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/spec/train_spec.h"

namespace trainc::hf {

struct HfTensor {
  std::string trainc_name;      // "h.0.attn.c_attn.weight"
  std::string hf_name;          // "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;   // trainc's shape ([3C, C])
  bool transposed = false;      // stored as [C, 3C] by Hugging Face
  // Hugging Face's tensor is rows [row_begin, row_begin + rows) of
  // trainc's (Llama's q_proj inside the fused q|k|v); rows 0: all of it.
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// The .train statement a config.json key's value comes from (an op, the
// repeat of the layers, the input declaration), for messages.
struct KeySource {
  SourceLocation location;  // line and column (the file is the caller's)
  std::string statement;    // "h.0.attn.y = causal_attention"
};

struct Gpt2Layout {
  int64_t vocab = 0, positions = 0, width = 0, layers = 0, heads = 0;
  std::string activation;  // "gelu_new" (tanh form) or "gelu" (erf)
  double layer_norm_eps = 1e-5;
  double dropout = 0;      // the model's dropout p (0: none)
  std::vector<HfTensor> tensors;
  // By GPT2Config key (n_head, ...): the statement that sets its value.
  std::map<std::string, KeySource> sources;
};

absl::StatusOr<Gpt2Layout> Gpt2LayoutOf(const ModelSpec& model);

// Why the model's parameters are not exactly `tensors`' trainc names and
// shapes ("no parameter x", "an extra parameter x", "x is [a], <whose> is
// [b]"), or "" when they are. For every layout of tools/hf.
std::string ParameterMismatch(const ModelSpec& model, const std::vector<HfTensor>& tensors,
                              const std::string& whose);

// The statement an op is (its location, "name = op"); the one that creates
// parameter `name`; the repeat(...) that makes the layers h.N ({} when
// none). For every layout of tools/hf.
KeySource SourceOfOp(const OpSpec& op);
KeySource SourceOfParameter(const ModelSpec& model, const std::string& name);
KeySource SourceOfLayers(const ModelSpec& model);

// config.json for transformers' GPT2Config.
std::string Gpt2ConfigJson(const Gpt2Layout& layout);

}  // namespace trainc::hf

#endif  // TRAINC_TOOLS_HF_GPT2_LAYOUT_H_
