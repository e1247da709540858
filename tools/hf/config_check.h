// Whether a Hugging Face folder's config.json describes the model a .train
// file trains, before --init-from reads its weights: tensors of the right
// shapes under another head split, rope_theta or norm eps would otherwise
// be trained as a different model.
//
// The expected values are the export's (Gpt2LayoutOf, LlamaLayoutOf), so
// import and export share one definition. Checked, with transformers'
// defaults (GPT2Config, LlamaConfig of 4.36) for keys config.json lacks:
//   both:  model_type, vocab_size, hidden size, layers, heads,
//          tie_word_embeddings, the activation
//   gpt2:  n_inner (null: 4 x n_embd), layer_norm_epsilon, n_positions
//          (= the context: wpe has that many rows), scale_attn_weights
//          (true), scale_attn_by_inverse_layer_idx and add_cross_attention
//          (false)
//   llama: num_key_value_heads (null: the heads), head_dim (null: hidden
//          / heads), intermediate_size, rope_theta, rms_norm_eps,
//          max_position_embeddings (at least the context: rotary positions
//          have no table), and what trainc cannot express: rope_scaling
//          (null), attention_bias and mlp_bias (false)
// Numbers compare exactly as JSON reads them (10000 and 10000.0 are equal).
// Training-only keys (dropouts, initializer_range) and numerics-only ones
// (pretraining_tp, reorder_and_upcast_attn, torch_dtype) are not checked.
#ifndef TRAINC_TOOLS_HF_CONFIG_CHECK_H_
#define TRAINC_TOOLS_HF_CONFIG_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "compiler/spec/train_spec.h"

namespace trainc::hf {

// Reads `dir`/config.json and compares it with `model`, compiled from
// `train_file`. Fails listing every key that differs, one a line: the
// config.json path, the key, both values and the .train statement
// (file:line:col) that sets the model's.
absl::Status CheckHfConfig(const std::string& dir, const ModelSpec& model,
                           const std::string& train_file);

// The same over config.json's text; `config_path` names it in messages.
absl::Status CheckHfConfigText(const std::string& config_path, absl::string_view text,
                               const ModelSpec& model, const std::string& train_file);

}  // namespace trainc::hf

#endif  // TRAINC_TOOLS_HF_CONFIG_CHECK_H_
