// Hugging Face model folders (config.json + model.safetensors, as
// save_pretrained writes them) read as trainc weights, for --init-from.
//
// Supported:
//  - GPT2LMHeadModel (model_type "gpt2"). Its tensors are named
//    "transformer.<trainc name>" (dsl_examples/tiny_gpt.train uses GPT-2's
//    names) and its Conv1D projections are stored [in, out], the transpose
//    of trainc's (nn.Linear's) [out, in]; lm_head is tied to wte and the
//    attention's mask buffers are not weights.
//  - LlamaForCausalLM (model_type "llama"), named as
//    dsl_examples/llama_tiny.train: "model.layers.N.<x>" is "h.N.<x>",
//    "model.<x>" is "<x>" (embed_tokens, norm), lm_head stays; a layer's
//    q_proj, k_proj and v_proj are one trainc linear,
//    h.N.self_attn.qkv.weight, their rows stacked in that order (what
//    causal_attention's q|k|v layout reads).
// tools/hf_export writes the same mappings the other way.
#ifndef TRAINC_RUNTIME_CHECKPOINT_HF_FOLDER_H_
#define TRAINC_RUNTIME_CHECKPOINT_HF_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/safetensors.h"

namespace trainc {

// The prefix of GPT2LMHeadModel's tensors.
inline constexpr char kHfGpt2Prefix[] = "transformer.";

// Whether trainc parameter `name` is one of GPT-2's Conv1D weights
// (h.N.attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj), stored transposed.
bool IsHfGpt2Conv1DWeight(const std::string& name);

// Llama's names: trainc's "h.3.mlp.up_proj.weight" is
// "model.layers.3.mlp.up_proj.weight", "norm.weight" "model.norm.weight",
// "lm_head.weight" itself. (The fused q|k|v is LlamaQkvParts'.)
std::string HfLlamaName(const std::string& trainc_name);
// The three Hugging Face tensors stacked in trainc's h.N.self_attn.qkv.weight
// (q_proj, k_proj, v_proj of layer N), or none for another name.
std::vector<std::string> LlamaQkvParts(const std::string& trainc_name);

// `in` [rows, cols] row-major as [cols, rows] into `out`: GPT-2's Conv1D
// layout to trainc's and back.
void Transpose(const float* in, int64_t rows, int64_t cols, float* out);

// Whether `path` is a folder with a config.json (a Hugging Face model).
bool IsHfFolder(const std::string& path);

// The folder's weights under trainc's names and layouts, as one in-memory
// safetensors file. Fails naming the folder for another model type, a
// non-f32 tensor or a Conv1D weight that is not 2-D.
absl::StatusOr<SafetensorsFile> ReadHfFolder(const std::string& dir);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CHECKPOINT_HF_FOLDER_H_
