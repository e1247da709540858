#include "tools/hf/gpt2_layout.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ops/op_table.h"
#include "runtime/checkpoint/hf_folder.h"

namespace trainc::hf {
namespace {

using ops::ModelOp;

// The tensors of layer i, by trainc name suffix.
constexpr const char* kLayer[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
};

// GPT-2's shape of a layer tensor for width c.
std::vector<int64_t> LayerShape(const std::string& suffix, int64_t c) {
  if (suffix == "attn.c_attn.weight") return {3 * c, c};
  if (suffix == "attn.c_attn.bias") return {3 * c};
  if (suffix == "attn.c_proj.weight") return {c, c};
  if (suffix == "mlp.c_fc.weight") return {4 * c, c};
  if (suffix == "mlp.c_fc.bias") return {4 * c};
  if (suffix == "mlp.c_proj.weight") return {c, 4 * c};
  return {c};
}

std::string Shape(const std::vector<int64_t>& s) { return ops::ShapeText(s); }

absl::Status NotGpt2(const ModelSpec& model, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "model ", model.name, " does not have GPT-2's layout (GPT2LMHeadModel): ", why));
}

// The ops' constants GPT2Config needs, each the same in every layer, and
// the statements that set them (the first of each).
absl::Status ReadOps(const ModelSpec& model, Gpt2Layout& l) {
  std::set<int64_t> heads;
  std::set<double> eps, dropout;
  std::set<std::string> activation;
  bool tied = false;
  auto source = [&](const std::vector<std::string>& keys, const OpSpec& op) {
    for (const std::string& key : keys) l.sources.emplace(key, SourceOfOp(op));
  };
  for (const OpSpec& op : model.ops) {
    if (op.op == ModelOp::kCausalAttention) {
      heads.insert(op.args.at("heads").i);
      source({"n_head", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
              "add_cross_attention"},
             op);
    }
    if (op.op == ModelOp::kLayerNorm) {
      eps.insert(op.args.at("eps").AsDouble());
      source({"layer_norm_epsilon"}, op);
    }
    if (op.op == ModelOp::kDropout) dropout.insert(op.args.at("p").AsDouble());
    if (op.op == ModelOp::kGelu) {
      activation.insert(op.args.at("approximate").s == "tanh" ? "gelu_new" : "gelu");
      source({"activation_function"}, op);
    }
    if (op.op == ModelOp::kLinear && op.shared_parameters.count("weight") &&
        op.shared_parameters.at("weight") == "wte.weight") {
      tied = true;
      source({"tie_word_embeddings"}, op);
    }
  }
  if (heads.size() != 1) return NotGpt2(model, "expected one causal_attention head count");
  if (eps.size() != 1) return NotGpt2(model, "expected one layernorm eps");
  if (activation.size() != 1) return NotGpt2(model, "expected one gelu form in every MLP");
  if (dropout.size() > 1) return NotGpt2(model, "its dropouts differ");
  if (!tied) return NotGpt2(model, "its output layer is not tied to wte.weight");
  l.heads = *heads.begin();
  l.layer_norm_eps = *eps.begin();
  l.activation = *activation.begin();
  l.dropout = dropout.empty() ? 0.0 : *dropout.begin();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Gpt2Layout> Gpt2LayoutOf(const ModelSpec& model) {
  std::map<std::string, std::vector<int64_t>> params;
  for (const ParameterSpec& p : model.parameters) params[p.name] = p.shape;
  auto wte = params.find("wte.weight"), wpe = params.find("wpe.weight");
  if (wte == params.end() || wpe == params.end() || wte->second.size() != 2 ||
      wpe->second.size() != 2) {
    return NotGpt2(model, "no wte.weight [vocab, width] and wpe.weight [positions, width]");
  }
  Gpt2Layout l;
  l.vocab = wte->second[0];
  l.width = wte->second[1];
  l.positions = wpe->second[0];
  while (params.count(absl::StrCat("h.", l.layers, ".ln_1.weight"))) ++l.layers;
  if (l.layers == 0) return NotGpt2(model, "no layer h.0");
  // Named and laid out as runtime/checkpoint/hf_folder.h reads them back.
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    l.tensors.push_back(
        {name, kHfGpt2Prefix + name, std::move(shape), IsHfGpt2Conv1DWeight(name)});
  };
  add("wte.weight", {l.vocab, l.width});
  add("wpe.weight", {l.positions, l.width});
  for (int64_t i = 0; i < l.layers; ++i) {
    for (const char* suffix : kLayer) {
      add(absl::StrCat("h.", i, ".", suffix), LayerShape(suffix, l.width));
    }
  }
  add("ln_f.weight", {l.width});
  add("ln_f.bias", {l.width});
  if (const std::string why = ParameterMismatch(model, l.tensors, "GPT-2's"); !why.empty()) {
    return NotGpt2(model, why);
  }
  if (auto s = ReadOps(model, l); !s.ok()) return s;
  if (l.width % l.heads != 0) return NotGpt2(model, "heads do not divide the width");
  l.sources["vocab_size"] = l.sources["n_embd"] = SourceOfParameter(model, "wte.weight");
  l.sources["n_positions"] = SourceOfParameter(model, "wpe.weight");
  l.sources["n_layer"] = SourceOfLayers(model);
  l.sources["n_inner"] = SourceOfParameter(model, "h.0.mlp.c_fc.weight");
  return l;
}

KeySource SourceOfOp(const OpSpec& op) {
  return {op.location, absl::StrCat(op.name, " = ", ops::ModelOpName(op.op))};
}

KeySource SourceOfParameter(const ModelSpec& model, const std::string& name) {
  for (const OpSpec& op : model.ops) {
    for (const std::string& p : op.parameters) {
      bool shared = false;
      for (const auto& [arg, param] : op.shared_parameters) shared |= param == p;
      if (p == name && !shared) return SourceOfOp(op);
    }
  }
  return {};
}

KeySource SourceOfLayers(const ModelSpec& model) {
  auto it = model.repeat_locations.find("h");
  if (it != model.repeat_locations.end()) return {it->second, "h = repeat"};
  return {};
}

std::string ParameterMismatch(const ModelSpec& model, const std::vector<HfTensor>& tensors,
                              const std::string& whose) {
  std::map<std::string, std::vector<int64_t>> params;
  for (const ParameterSpec& p : model.parameters) params[p.name] = p.shape;
  std::set<std::string> expected;
  for (const HfTensor& t : tensors) {
    expected.insert(t.trainc_name);
    auto it = params.find(t.trainc_name);
    if (it == params.end()) return "no parameter " + t.trainc_name;
    if (it->second != t.shape) {
      return absl::StrCat(t.trainc_name, " is ", Shape(it->second), ", ", whose, " is ",
                          Shape(t.shape));
    }
  }
  for (const auto& [name, shape] : params) {
    if (!expected.count(name)) return "an extra parameter " + name;
  }
  return "";
}

std::string Gpt2ConfigJson(const Gpt2Layout& l) {
  return absl::StrFormat(
      "{\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"n_ctx\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": null,\n"
      "  \"activation_function\": \"%s\",\n"
      "  \"resid_pdrop\": %.17g,\n"
      "  \"embd_pdrop\": %.17g,\n"
      "  \"attn_pdrop\": %.17g,\n"
      "  \"layer_norm_epsilon\": %.17g,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"tie_word_embeddings\": true,\n"
      "  \"use_cache\": true,\n"
      "  \"torch_dtype\": \"float32\"\n"
      "}\n",
      l.vocab, l.positions, l.positions, l.width, l.layers, l.heads, l.activation, l.dropout,
      l.dropout, l.dropout, l.layer_norm_eps);
}

}  // namespace trainc::hf
