#include "tools/hf/config_check.h"

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/util/number_text.h"
#include "runtime/json/json.h"
#include "tools/hf/gpt2_layout.h"
#include "tools/hf/llama_layout.h"

namespace trainc::hf {
namespace {

// One key: the folder's value and the model's, and how they must relate.
struct Check {
  std::string key;        // as reported: config.json's usual spelling
  JsonValue folder;       // transformers' default when config.json lacks it
  std::string absent;     // non-empty then: what that default is
  JsonValue model;        // what the .train trains
  bool at_least = false;  // folder >= model, not ==
  std::string note;       // why the model's value cannot be another
};

// The first of `keys` config.json has (a null counting as absent when
// `null_is_default`), else transformers' default `value`, described.
Check Read(const JsonValue& config, const std::vector<std::string>& keys, JsonValue value,
           const std::string& default_text = "", bool null_is_default = false) {
  for (const std::string& key : keys) {
    const JsonValue* v = config.Find(key);
    if (v != nullptr && !(null_is_default && v->is_null())) return {keys[0], *v, ""};
  }
  return {keys[0], std::move(value), default_text.empty() ? "default" : default_text};
}

JsonValue Int(int64_t i) { return JsonValue::Integer(i); }
JsonValue Num(double d) { return JsonValue::Number(d); }
JsonValue Str(const std::string& s) { return JsonValue::String(s); }
JsonValue Bool(bool b) { return JsonValue::Bool(b); }

// The folder's integer at `check` (0 when not an integer), for defaults
// computed from other keys.
int64_t IntOf(const Check& check) {
  return check.folder.is_number() ? static_cast<int64_t>(check.folder.number_value()) : 0;
}

// Activation names ACT2FN computes alike.
std::string Canonical(const std::string& act) {
  if (act == "gelu_pytorch_tanh") return "gelu_new";
  if (act == "swish") return "silu";
  return act;
}

bool Same(const JsonValue& a, const JsonValue& b) {
  if (a.is_number() && b.is_number()) return a.number_value() == b.number_value();
  if (a.type() != b.type()) return false;
  if (a.is_bool()) return a.bool_value() == b.bool_value();
  if (a.is_string()) return Canonical(a.string_value()) == Canonical(b.string_value());
  return a.is_null();  // the model's values are never arrays or objects
}

std::string Text(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::kNull:
      return "null";
    case JsonValue::Type::kBool:
      return v.bool_value() ? "true" : "false";
    case JsonValue::Type::kNumber:
      return v.is_integer() ? absl::StrCat(v.integer_value()) : ShortestDouble(v.number_value());
    case JsonValue::Type::kString:
      return JsonQuote(v.string_value());
    case JsonValue::Type::kArray: {
      std::vector<std::string> items;
      for (const JsonValue& item : v.array_items()) items.push_back(Text(item));
      return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    }
    case JsonValue::Type::kObject: {
      std::vector<std::string> items;
      for (const auto& [key, item] : v.object_items()) {
        items.push_back(absl::StrCat(JsonQuote(key), ": ", Text(item)));
      }
      return absl::StrCat("{", absl::StrJoin(items, ", "), "}");
    }
  }
  return "";
}

std::string Where(const std::string& train_file, const KeySource& source) {
  std::string out = train_file;
  if (source.location.line > 0) {
    absl::StrAppend(&out, ":", source.location.line, ":", source.location.column);
  }
  if (!source.statement.empty()) absl::StrAppend(&out, " (", source.statement, ")");
  return out;
}

// What differs, one line per key.
std::vector<std::string> Mismatches(const std::vector<Check>& checks, const char* config_class,
                                    const std::map<std::string, KeySource>& sources,
                                    const std::string& config_path, const std::string& train_file) {
  std::vector<std::string> out;
  for (const Check& c : checks) {
    const bool ok = c.at_least
                        ? c.folder.is_number() && c.folder.number_value() >= c.model.number_value()
                        : Same(c.folder, c.model);
    if (ok) continue;
    auto source = sources.find(c.key);
    const std::string where =
        Where(train_file, source == sources.end() ? KeySource{} : source->second);
    std::string line = absl::StrCat(config_path, ": ", c.key, " is ", Text(c.folder));
    if (!c.absent.empty()) {
      absl::StrAppend(&line, " (absent: ",
                      c.absent == "default" ? absl::StrCat(config_class, "'s default") : c.absent,
                      ")");
    }
    if (c.at_least) {  // the note names the model's value
      absl::StrAppend(&line, ", fewer than ", c.note, " ", Text(c.model), " of ", where);
    } else {
      absl::StrAppend(&line, ", but ", where, " has ", Text(c.model));
      if (!c.note.empty()) absl::StrAppend(&line, " (", c.note, ")");
    }
    out.push_back(std::move(line));
  }
  return out;
}

// add(check, model value, note): `check` completed with the model's value
// and why it cannot be another, appended to `out`.
auto AppendTo(std::vector<Check>& out) {
  return [&out](Check check, JsonValue model, std::string note = "") {
    check.model = std::move(model);
    check.note = std::move(note);
    out.push_back(std::move(check));
  };
}

std::vector<Check> Gpt2Checks(const JsonValue& c, const Gpt2Layout& l) {
  std::vector<Check> out;
  auto add = AppendTo(out);
  add(Read(c, {"vocab_size"}, Int(50257)), Int(l.vocab));
  add(Read(c, {"n_positions", "max_position_embeddings"}, Int(1024)), Int(l.positions),
      "wpe has a row per position of the context");
  const Check width = Read(c, {"n_embd", "hidden_size"}, Int(768));
  add(width, Int(l.width));
  add(Read(c, {"n_layer", "num_hidden_layers"}, Int(12)), Int(l.layers));
  add(Read(c, {"n_head", "num_attention_heads"}, Int(12)), Int(l.heads));
  add(Read(c, {"n_inner"}, Int(4 * IntOf(width)), "null, 4 x n_embd", true), Int(4 * l.width));
  add(Read(c, {"activation_function"}, Str("gelu_new")), Str(l.activation));
  add(Read(c, {"layer_norm_epsilon"}, Num(1e-5)), Num(l.layer_norm_eps));
  add(Read(c, {"tie_word_embeddings"}, Bool(true)), Bool(true), "the .train's head is tied to wte");
  add(Read(c, {"scale_attn_weights"}, Bool(true)), Bool(true),
      "causal_attention scales by 1 / sqrt(head size)");
  add(Read(c, {"scale_attn_by_inverse_layer_idx"}, Bool(false)), Bool(false),
      "trainc's attention has no per-layer scale");
  add(Read(c, {"add_cross_attention"}, Bool(false)), Bool(false),
      "trainc's GPT-2 has no cross-attention");
  return out;
}

std::vector<Check> LlamaChecks(const JsonValue& c, const LlamaLayout& l) {
  std::vector<Check> out;
  auto add = AppendTo(out);
  add(Read(c, {"vocab_size"}, Int(32000)), Int(l.vocab));
  const Check width = Read(c, {"hidden_size"}, Int(4096));
  add(width, Int(l.width));
  add(Read(c, {"intermediate_size"}, Int(11008)), Int(l.intermediate));
  add(Read(c, {"num_hidden_layers"}, Int(32)), Int(l.layers));
  const Check heads = Read(c, {"num_attention_heads"}, Int(32));
  add(heads, Int(l.heads));
  add(Read(c, {"num_key_value_heads"}, Int(IntOf(heads)), "null, num_attention_heads", true),
      Int(l.kv_heads));
  const int64_t h = IntOf(heads);
  add(Read(c, {"head_dim"}, Int(h > 0 ? IntOf(width) / h : 0),
           "null, hidden_size / num_attention_heads", true),
      Int(l.head_dim));
  Check positions = Read(c, {"max_position_embeddings"}, Int(2048));
  positions.at_least = true;
  add(positions, Int(l.positions), "the context");
  add(Read(c, {"hidden_act"}, Str("silu")), Str(l.hidden_act));
  add(Read(c, {"rms_norm_eps"}, Num(1e-6)), Num(l.rms_norm_eps));
  add(Read(c, {"rope_theta"}, Num(10000)), Num(l.rope_theta));
  add(Read(c, {"rope_scaling"}, JsonValue()), JsonValue(),
      "trainc's rotary positions have no scaling");
  add(Read(c, {"attention_bias"}, Bool(false)), Bool(false),
      "the .train's q|k|v and o_proj have no bias");
  add(Read(c, {"mlp_bias"}, Bool(false)), Bool(false), "the .train's MLP has no bias");
  add(Read(c, {"tie_word_embeddings"}, Bool(false)), Bool(false),
      "the .train's lm_head is a weight of its own");
  return out;
}

}  // namespace

absl::Status CheckHfConfigText(const std::string& config_path, absl::string_view text,
                               const ModelSpec& model, const std::string& train_file) {
  absl::StatusOr<JsonValue> config = ParseJson(text);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ":", config.status().message()));
  }
  const JsonValue* type = config->Find("model_type");
  if (!config->is_object() || type == nullptr || !type->is_string()) {
    return absl::InvalidArgumentError(config_path + ": no \"model_type\" string");
  }
  absl::StatusOr<Gpt2Layout> gpt2 = Gpt2LayoutOf(model);
  absl::StatusOr<LlamaLayout> llama =
      gpt2.ok() ? absl::StatusOr<LlamaLayout>(absl::UnknownError("unused")) : LlamaLayoutOf(model);
  if (!gpt2.ok() && !llama.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a Hugging Face folder initialises a model with GPT-2's or Llama's layout, and the "
        "model of ",
        train_file, " has neither: ", gpt2.status().message(), "; and ", llama.status().message()));
  }
  const std::string want = gpt2.ok() ? "gpt2" : "llama";
  if (type->string_value() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, ": model_type is ", Text(*type), ", but the model of ", train_file, " has ",
        gpt2.ok() ? "GPT-2's" : "Llama's", " layout (\"", want, "\")"));
  }
  const std::vector<std::string> wrong =
      gpt2.ok() ? Mismatches(Gpt2Checks(*config, *gpt2), "GPT2Config", gpt2->sources, config_path,
                             train_file)
                : Mismatches(LlamaChecks(*config, *llama), "LlamaConfig", llama->sources,
                             config_path, train_file);
  if (wrong.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(config_path, " describes another model than ",
                                                 train_file, " trains:\n  ",
                                                 absl::StrJoin(wrong, "\n  ")));
}

absl::Status CheckHfConfig(const std::string& dir, const ModelSpec& model,
                           const std::string& train_file) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return CheckHfConfigText(path, text.str(), model, train_file);
}

}  // namespace trainc::hf
