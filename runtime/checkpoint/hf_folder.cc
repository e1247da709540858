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

absl::StatusOr<SafetensorsFile> ReadHfFolder(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::string type, ModelType(dir));
  if (type != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        dir, ": a Hugging Face '", type, "' model; --init-from reads GPT2LMHeadModel folders "
        "(model_type gpt2) only"));
  }
  const std::string path = dir + "/model.safetensors";
  ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Read(path));
  std::vector<std::vector<char>> data;
  std::vector<TensorRef> tensors;
  data.reserve(file.tensors().size());
  for (const auto& [hf_name, t] : file.tensors()) {
    const std::string name = absl::StartsWith(hf_name, kHfGpt2Prefix)
                                 ? hf_name.substr(std::strlen(kHfGpt2Prefix))
                                 : hf_name;
    if (Skipped(name)) continue;
    if (t.dtype != "F32") {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", hf_name, " is ", t.dtype, "; save the model in float32 "
          "(model.float().save_pretrained(...))"));
    }
    const absl::Span<const char> bytes = file.Data(t);
    std::vector<int64_t> shape = t.shape;
    data.emplace_back(bytes.begin(), bytes.end());
    if (IsHfGpt2Conv1DWeight(name)) {
      if (shape.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", hf_name, " is not 2-D"));
      }
      Transpose(reinterpret_cast<const float*>(bytes.data()), shape[0], shape[1],  // [in, out]
                reinterpret_cast<float*>(data.back().data()));
      std::swap(shape[0], shape[1]);
    }
    tensors.push_back({name, "F32", shape, absl::Span<const char>(data.back())});
  }
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(tensors, {{"format", "pt"}}));
  return SafetensorsFile::Parse(std::move(bytes), path);
}

}  // namespace trainc
