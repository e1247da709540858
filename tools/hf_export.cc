// hf_export: a trainc GPT-2 or Llama checkpoint as a Hugging Face model
// folder (config.json + model.safetensors) that transformers'
// GPT2LMHeadModel or LlamaForCausalLM loads with from_pretrained.
//
//   bazel-bin/tools/hf_export model.train step.safetensors out/
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"
#include "compiler/spec/model_signature.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/checkpoint/safetensors.h"
#include "tools/cli/option_parser.h"
#include "tools/hf/gpt2_layout.h"
#include "tools/hf/llama_layout.h"

namespace trainc {
namespace {

struct Args {
  std::string file, checkpoint, out;
  Overrides overrides;
};

OptionParser MakeParser(Args* args) {
  OptionParser parser;
  parser.Usage({"hf_export [options] FILE.train CHECKPOINT OUT_DIR"})
      .Description(
          "Writes OUT_DIR/config.json and OUT_DIR/model.safetensors: the weights of\n"
          "CHECKPOINT (a safetensors file from train --save or a periodic checkpoint)\n"
          "under the names, layouts and config keys of Hugging Face transformers'\n"
          "GPT2LMHeadModel, for a FILE.train model with GPT-2's architecture\n"
          "(dsl_examples/tiny_gpt.train, gpt2_small.train), or LlamaForCausalLM, for\n"
          "one with Llama's (dsl_examples/llama_tiny.train: its fused q|k|v becomes\n"
          "q_proj, k_proj and v_proj). Model constants may be overridden as in train\n"
          "(--layers 2).\n")
      .TrainOverrides(&args->overrides);
  return parser;
}

absl::StatusOr<std::optional<Args>> ParseArgs(int argc, char** argv) {
  Args args;
  const OptionParser parser = MakeParser(&args);
  std::vector<std::string> positional;
  ASSIGN_OR_RETURN(const bool help, parser.Parse(argc, argv, &positional));
  if (help) {
    std::cout << parser.Help();
    return std::optional<Args>();
  }
  if (positional.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected FILE.train, CHECKPOINT and OUT_DIR, got ", positional.size(),
        " arguments (see --help)"));
  }
  args.file = positional[0];
  args.checkpoint = positional[1];
  args.out = positional[2];
  return std::optional<Args>(args);
}

// The checkpoint's tensor, f32 and shaped as the model says, in the
// layout Hugging Face stores it.
absl::StatusOr<std::vector<float>> HfData(const SafetensorsFile& file, const std::string& path,
                                          const hf::HfTensor& t) {
  const SafetensorsFile::Tensor* found = file.Find(t.trainc_name);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": no tensor ", t.trainc_name));
  }
  if (found->dtype != "F32" || found->shape != t.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", t.trainc_name, " is ", found->dtype, " ", ops::ShapeText(found->shape),
        ", the model's is F32 ", ops::ShapeText(t.shape)));
  }
  const absl::Span<const char> bytes = file.Data(*found);
  std::vector<float> in(bytes.size() / sizeof(float));
  std::memcpy(in.data(), bytes.data(), bytes.size());
  if (t.rows > 0) {  // a row slice of a 2-D tensor
    const int64_t cols = t.shape[1];
    return std::vector<float>(in.begin() + t.row_begin * cols,
                              in.begin() + (t.row_begin + t.rows) * cols);
  }
  if (!t.transposed) return in;
  std::vector<float> out(in.size());
  Transpose(in.data(), t.shape[0], t.shape[1], out.data());
  return out;
}

// The model as one of the transformers classes: its tensors, config.json
// and a line for the user.
struct HfModel {
  std::vector<hf::HfTensor> tensors;
  std::string config;
  std::string summary;
};

absl::StatusOr<HfModel> LayoutOf(const ModelSpec& spec) {
  absl::StatusOr<hf::Gpt2Layout> gpt2 = hf::Gpt2LayoutOf(spec);
  if (gpt2.ok()) {
    return HfModel{gpt2->tensors, hf::Gpt2ConfigJson(*gpt2),
                   absl::StrCat("GPT2LMHeadModel, ", gpt2->layers, " layers x ", gpt2->width,
                                " wide, ", gpt2->heads, " heads, vocab ", gpt2->vocab,
                                ", context ", gpt2->positions)};
  }
  absl::StatusOr<hf::LlamaLayout> llama = hf::LlamaLayoutOf(spec);
  if (llama.ok()) {
    return HfModel{llama->tensors, hf::LlamaConfigJson(*llama),
                   absl::StrCat("LlamaForCausalLM, ", llama->layers, " layers x ", llama->width,
                                " wide, ", llama->heads, " heads over ", llama->kv_heads,
                                " key/value heads, vocab ", llama->vocab, ", context ",
                                llama->positions)};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(gpt2.status().message(), "; and ", llama.status().message()));
}

// The checkpoint's model signature (saved by train since plans carry one;
// older checkpoints have none and are taken on trust) against the .train's:
// weights of other heads, rope_theta or eps would be exported under this
// model's config.json.
absl::Status CheckSameModel(const SafetensorsFile& checkpoint, const Args& args,
                            const ModelSpec& model) {
  auto saved = checkpoint.metadata().find("model_signature");
  if (saved == checkpoint.metadata().end()) return absl::OkStatus();
  const std::string why = ModelSignatureDifference(
      saved->second, "the checkpoint's model", ModelSignature(model),
      absl::StrCat(args.file, "'s (with the options given here)"));
  if (why.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      args.checkpoint, " was trained as another model than ", args.file, ": ", why,
      ". Export with the .train file and the model options (--heads ...) its run used"));
}

absl::Status Export(const Args& args) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult compiled = CompileFile(args.file, args.overrides, model_only);
  if (!compiled.spec) {
    std::cerr << FormatDiagnostics(compiled.diagnostics, compiled.source);
    return absl::InvalidArgumentError(args.file + " does not compile");
  }
  ASSIGN_OR_RETURN(const HfModel model, LayoutOf(compiled.spec->model));
  ASSIGN_OR_RETURN(const SafetensorsFile checkpoint, SafetensorsFile::Read(args.checkpoint));
  RETURN_IF_ERROR(CheckSameModel(checkpoint, args, compiled.spec->model));
  std::vector<std::vector<float>> data;
  std::vector<TensorRef> tensors;
  data.reserve(model.tensors.size());
  for (const hf::HfTensor& t : model.tensors) {
    ASSIGN_OR_RETURN(std::vector<float> d, HfData(checkpoint, args.checkpoint, t));
    data.push_back(std::move(d));
    std::vector<int64_t> shape = t.shape;
    if (t.transposed) std::swap(shape[0], shape[1]);
    if (t.rows > 0) shape[0] = t.rows;
    tensors.push_back({t.hf_name, "F32", shape,
                       absl::Span<const char>(reinterpret_cast<const char*>(data.back().data()),
                                              data.back().size() * sizeof(float))});
  }
  if (::mkdir(args.out.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", args.out, ": ", std::strerror(errno)));
  }
  RETURN_IF_ERROR(WriteSafetensorsFile(args.out + "/model.safetensors", tensors,
                                       {{"format", "pt"}}));
  const std::string config = args.out + "/config.json";
  std::ofstream out(config);
  out << model.config;
  out.close();
  if (!out) return absl::DataLossError("cannot write " + config);
  std::cout << "hf_export: " << args.out << ": " << model.summary << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  absl::StatusOr<std::optional<trainc::Args>> args = trainc::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "hf_export: " << args.status().message() << "\n";
    return 2;
  }
  if (!args->has_value()) return 0;
  const absl::Status status = trainc::Export(**args);
  if (!status.ok()) {
    std::cerr << "hf_export: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
