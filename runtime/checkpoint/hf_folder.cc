#include "runtime/checkpoint/hf_folder.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> ModelType(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  absl::StatusOr<JsonValue> config = ParseJson(text);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", config.status().message()));
  }
  const JsonValue* type = config->Find("model_type");
  if (type == nullptr || !type->is_string()) {
    return absl::InvalidArgumentError(path + ": no \"model_type\" string");
  }
  return type->string_value();
}

// Not weights: the tied head and the attention's causal-mask buffers.
bool Skipped(const std::string& name) {
  return name == "lm_head.weight" || absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias");
}

}  // namespace

bool IsHfGpt2Conv1DWeight(const std::string& name) {
  return absl::StartsWith(name, "h.") &&
         (absl::EndsWith(name, ".attn.c_attn.weight") ||
          absl::EndsWith(name, ".attn.c_proj.weight") ||
          absl::EndsWith(name, ".mlp.c_fc.weight") || absl::EndsWith(name, ".mlp.c_proj.weight"));
}

void Transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}

bool IsHfFolder(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::stat((path + "/config.json").c_str(), &st) == 0;
}

namespace {

// Tensors being built: their bytes live here until serialised.
struct Converted {
  std::vector<std::vector<char>> data;
  std::vector<TensorRef> tensors;
  void Add(std::string name, std::vector<int64_t> shape, std::vector<char> bytes) {
    data.push_back(std::move(bytes));
    tensors.push_back({std::move(name), "F32", std::move(shape), absl::Span<const char>(data.back())});
  }
};

absl::Status CheckF32(const std::string& path, const std::string& hf_name,
                      const SafetensorsFile::Tensor& t) {
  if (t.dtype == "F32") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": ", hf_name, " is ", t.dtype, "; save the model in float32 "
      "(model.float().save_pretrained(...))"));
}

absl::Status ReadGpt2(const std::string& path, const SafetensorsFile& file, Converted& out) {
  for (const auto& [hf_name, t] : file.tensors()) {
    const std::string name = absl::StartsWith(hf_name, kHfGpt2Prefix)
                                 ? hf_name.substr(std::strlen(kHfGpt2Prefix))
                                 : hf_name;
    if (Skipped(name)) continue;
    RETURN_IF_ERROR(CheckF32(path, hf_name, t));
    const absl::Span<const char> bytes = file.Data(t);
    std::vector<int64_t> shape = t.shape;
    std::vector<char> data(bytes.begin(), bytes.end());
    if (IsHfGpt2Conv1DWeight(name)) {
      if (shape.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", hf_name, " is not 2-D"));
      }
      Transpose(reinterpret_cast<const float*>(bytes.data()), shape[0], shape[1],  // [in, out]
                reinterpret_cast<float*>(data.data()));
      std::swap(shape[0], shape[1]);
    }
    out.Add(name, shape, std::move(data));
  }
  return absl::OkStatus();
}

// trainc's name of a Llama tensor that maps one to one ("" for q/k/v).
std::string TraincNameOfLlama(const std::string& hf_name) {
  constexpr char kLayers[] = "model.layers.", kModel[] = "model.";
  if (absl::EndsWith(hf_name, "_proj.weight") &&
      (absl::StrContains(hf_name, ".q_proj") || absl::StrContains(hf_name, ".k_proj") ||
       absl::StrContains(hf_name, ".v_proj"))) {
    return "";
  }
  if (absl::StartsWith(hf_name, kLayers)) return "h." + hf_name.substr(std::strlen(kLayers));
  if (absl::StartsWith(hf_name, kModel)) return hf_name.substr(std::strlen(kModel));
  return hf_name;
}

absl::Status ReadLlama(const std::string& path, const SafetensorsFile& file, Converted& out) {
  for (const auto& [hf_name, t] : file.tensors()) {
    if (absl::EndsWith(hf_name, "rotary_emb.inv_freq")) continue;  // a buffer, not a weight
    const std::string name = TraincNameOfLlama(hf_name);
    if (name.empty()) continue;  // fused below
    RETURN_IF_ERROR(CheckF32(path, hf_name, t));
    const absl::Span<const char> bytes = file.Data(t);
    out.Add(name, t.shape, std::vector<char>(bytes.begin(), bytes.end()));
  }
  // Each layer's q_proj, k_proj and v_proj, stacked as one q|k|v weight.
  for (int64_t layer = 0;; ++layer) {
    const std::string qkv = absl::StrCat("h.", layer, ".self_attn.qkv.weight");
    std::vector<int64_t> shape;
    std::vector<char> data;
    for (const std::string& part : LlamaQkvParts(qkv)) {
      const SafetensorsFile::Tensor* t = file.Find(part);
      if (t == nullptr) {
        if (shape.empty()) return absl::OkStatus();  // past the last layer
        return absl::InvalidArgumentError(absl::StrCat(path, ": no ", part));
      }
      RETURN_IF_ERROR(CheckF32(path, part, *t));
      if (t->shape.size() != 2 || (!shape.empty() && t->shape[1] != shape[1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": ", part, " is not [rows, hidden_size] like the other projections"));
      }
      if (shape.empty()) {
        shape = t->shape;
      } else {
        shape[0] += t->shape[0];
      }
      const absl::Span<const char> bytes = file.Data(*t);
      data.insert(data.end(), bytes.begin(), bytes.end());
    }
    out.Add(qkv, shape, std::move(data));
  }
}

}  // namespace

std::string HfLlamaName(const std::string& trainc_name) {
  if (absl::StartsWith(trainc_name, "h.")) return "model.layers." + trainc_name.substr(2);
  if (trainc_name == "lm_head.weight") return trainc_name;
  return "model." + trainc_name;
}

std::vector<std::string> LlamaQkvParts(const std::string& trainc_name) {
  constexpr char kSuffix[] = ".self_attn.qkv.weight";
  if (!absl::StartsWith(trainc_name, "h.") || !absl::EndsWith(trainc_name, kSuffix)) return {};
  const std::string layer =
      HfLlamaName(trainc_name.substr(0, trainc_name.size() - std::strlen(kSuffix)));
  return {layer + ".self_attn.q_proj.weight", layer + ".self_attn.k_proj.weight",
          layer + ".self_attn.v_proj.weight"};
}

absl::StatusOr<SafetensorsFile> ReadHfFolder(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string type, ModelType(dir));
  if (type != "gpt2" && type != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        dir, ": a Hugging Face '", type, "' model; --init-from reads GPT2LMHeadModel (gpt2) "
        "and LlamaForCausalLM (llama) folders"));
  }
  const std::string path = dir + "/model.safetensors";
  ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Read(path));
  Converted out;
  RETURN_IF_ERROR(type == "gpt2" ? ReadGpt2(path, file, out) : ReadLlama(path, file, out));
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(out.tensors, {{"format", "pt"}}));
  return SafetensorsFile::Parse(std::move(bytes), path);
}

}  // namespace trainc
