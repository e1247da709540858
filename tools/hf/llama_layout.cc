#include "tools/hf/llama_layout.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/checkpoint/hf_folder.h"

namespace trainc::hf {
namespace {

using ops::ModelOp;

absl::Status NotLlama(const ModelSpec& model, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "model ", model.name, " does not have Llama's layout (LlamaForCausalLM): ", why));
}

// ACT2FN's name of an activation op ("" for another op).
std::string ActivationOf(const OpSpec& op) {
  if (op.op == ModelOp::kSilu || op.op == ModelOp::kRelu) return ops::ModelOpName(op.op);
  if (op.op == ModelOp::kGelu) return op.args.at("approximate").s == "tanh" ? "gelu_pytorch_tanh" : "gelu";
  return "";
}

// The attention's, the norms' and the MLP's constants, each the same in
// every layer, and the statements that set them (the first of each).
absl::Status ReadOps(const ModelSpec& model, LlamaLayout& l) {
  std::set<int64_t> heads, kv_heads;
  std::set<double> eps, theta;
  std::set<std::string> act;
  bool no_rope = false;
  auto source = [&](const std::vector<std::string>& keys, const OpSpec& op) {
    for (const std::string& key : keys) l.sources.emplace(key, SourceOfOp(op));
  };
  for (const OpSpec& op : model.ops) {
    if (op.op == ModelOp::kCausalAttention) {
      heads.insert(op.args.at("heads").i);
      const int64_t kv = op.args.at("kv_heads").i;
      kv_heads.insert(kv == 0 ? op.args.at("heads").i : kv);
      theta.insert(op.args.at("rope_theta").AsDouble());
      no_rope |= !op.args.at("rope").b;
      source({"num_attention_heads", "num_key_value_heads", "rope_theta", "rope_scaling"}, op);
    }
    if (op.op == ModelOp::kRmsNorm) {
      eps.insert(op.args.at("eps").AsDouble());
      source({"rms_norm_eps"}, op);
    }
    if (const std::string a = ActivationOf(op); !a.empty()) {
      act.insert(a);
      source({"hidden_act"}, op);
    }
    if (op.op == ModelOp::kLayerNorm || op.op == ModelOp::kDropout) {
      return NotLlama(model, absl::StrCat("it has a ", ops::ModelOpName(op.op), " (", op.name, ")"));
    }
  }
  if (heads.size() != 1 || kv_heads.size() != 1 || theta.size() != 1) {
    return NotLlama(model, "expected one causal_attention shape in every layer");
  }
  if (no_rope) return NotLlama(model, "its attention has no rotary positions (rope = true)");
  if (eps.size() != 1) return NotLlama(model, "expected one rmsnorm eps");
  if (act.size() != 1) return NotLlama(model, "expected one activation (silu) in every MLP");
  l.heads = *heads.begin();
  l.kv_heads = *kv_heads.begin();
  l.rope_theta = *theta.begin();
  l.rms_norm_eps = *eps.begin();
  l.hidden_act = *act.begin();
  return absl::OkStatus();
}

// The statements that set the keys read from parameters' shapes.
void AddParameterSources(const ModelSpec& model, LlamaLayout& l) {
  l.sources["vocab_size"] = l.sources["hidden_size"] =
      SourceOfParameter(model, "embed_tokens.weight");
  l.sources["intermediate_size"] = l.sources["mlp_bias"] =
      SourceOfParameter(model, "h.0.mlp.gate_proj.weight");
  l.sources["head_dim"] = l.sources["attention_bias"] =
      SourceOfParameter(model, "h.0.self_attn.qkv.weight");
  l.sources["tie_word_embeddings"] = SourceOfParameter(model, "lm_head.weight");
  l.sources["num_hidden_layers"] = SourceOfLayers(model);
  const ValueSpec& input = model.inputs[0];
  l.sources["max_position_embeddings"] = {input.location, "input " + input.name};
}

// Every tensor LlamaForCausalLM has, in trainc's terms.
void AddTensors(LlamaLayout& l) {
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    l.tensors.push_back({name, HfLlamaName(name), std::move(shape)});
  };
  const int64_t c = l.width, q = l.heads * l.head_dim, kv = l.kv_heads * l.head_dim;
  add("embed_tokens.weight", {l.vocab, c});
  for (int64_t i = 0; i < l.layers; ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    add(h + "input_layernorm.weight", {c});
    const std::string qkv = h + "self_attn.qkv.weight";
    const std::vector<std::string> parts = LlamaQkvParts(qkv);
    const int64_t begin[] = {0, q, q + kv}, rows[] = {q, kv, kv};
    for (int p = 0; p < 3; ++p) {
      l.tensors.push_back({qkv, parts[p], {q + 2 * kv, c}, false, begin[p], rows[p]});
    }
    add(h + "self_attn.o_proj.weight", {c, q});
    add(h + "post_attention_layernorm.weight", {c});
    add(h + "mlp.gate_proj.weight", {l.intermediate, c});
    add(h + "mlp.up_proj.weight", {l.intermediate, c});
    add(h + "mlp.down_proj.weight", {c, l.intermediate});
  }
  add("norm.weight", {c});
  add("lm_head.weight", {l.vocab, c});
}

}  // namespace

absl::StatusOr<LlamaLayout> LlamaLayoutOf(const ModelSpec& model) {
  std::map<std::string, std::vector<int64_t>> params;
  for (const ParameterSpec& p : model.parameters) params[p.name] = p.shape;
  auto embed = params.find("embed_tokens.weight");
  auto gate = params.find("h.0.mlp.gate_proj.weight");
  if (embed == params.end() || embed->second.size() != 2 || gate == params.end() ||
      gate->second.size() != 2) {
    return NotLlama(model, "no embed_tokens.weight [vocab, width] and h.0.mlp.gate_proj.weight");
  }
  if (model.inputs.size() != 1 || model.inputs[0].shape.size() != 1) {
    return NotLlama(model, "expected one input of token ids [ctx]");
  }
  LlamaLayout l;
  l.vocab = embed->second[0];
  l.width = embed->second[1];
  l.intermediate = gate->second[0];
  l.positions = model.inputs[0].shape[0];
  while (params.count(absl::StrCat("h.", l.layers, ".input_layernorm.weight"))) ++l.layers;
  if (auto s = ReadOps(model, l); !s.ok()) return s;
  auto qkv = params.find("h.0.self_attn.qkv.weight");
  if (qkv == params.end() || qkv->second.size() != 2 ||
      qkv->second[0] % (l.heads + 2 * l.kv_heads) != 0) {
    return NotLlama(model, "no h.0.self_attn.qkv.weight [(heads + 2 kv_heads) d, width]");
  }
  l.head_dim = qkv->second[0] / (l.heads + 2 * l.kv_heads);
  if (l.heads * l.head_dim != l.width) {
    return NotLlama(model, absl::StrCat("heads x head size is ", l.heads * l.head_dim,
                                        ", not the width ", l.width,
                                        " (transformers' LlamaAttention needs them equal)"));
  }
  AddTensors(l);
  if (const std::string why = ParameterMismatch(model, l.tensors, "Llama's"); !why.empty()) {
    return NotLlama(model, why);
  }
  AddParameterSources(model, l);
  return l;
}

std::string LlamaConfigJson(const LlamaLayout& l) {
  return absl::StrFormat(
      "{\n"
      "  \"architectures\": [\"LlamaForCausalLM\"],\n"
      "  \"model_type\": \"llama\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"hidden_size\": %d,\n"
      "  \"intermediate_size\": %d,\n"
      "  \"num_hidden_layers\": %d,\n"
      "  \"num_attention_heads\": %d,\n"
      "  \"num_key_value_heads\": %d,\n"
      "  \"head_dim\": %d,\n"
      "  \"max_position_embeddings\": %d,\n"
      "  \"hidden_act\": \"%s\",\n"
      "  \"rms_norm_eps\": %.17g,\n"
      "  \"rope_theta\": %.17g,\n"
      "  \"rope_scaling\": null,\n"
      "  \"attention_bias\": false,\n"
      "  \"attention_dropout\": 0.0,\n"
      "  \"tie_word_embeddings\": false,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"use_cache\": true,\n"
      "  \"torch_dtype\": \"float32\"\n"
      "}\n",
      l.vocab, l.width, l.intermediate, l.layers, l.heads, l.kv_heads, l.head_dim, l.positions,
      l.hidden_act, l.rms_norm_eps, l.rope_theta);
}

}  // namespace trainc::hf
