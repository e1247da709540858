// hf_export: a trainc GPT-2 checkpoint as a Hugging Face model folder
// (config.json + model.safetensors) that transformers' GPT2LMHeadModel
// loads with from_pretrained.
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
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/checkpoint/safetensors.h"
#include "tools/cli/option_parser.h"
#include "tools/hf/gpt2_layout.h"

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
          "(dsl_examples/tiny_gpt.train, gpt2_small.train). Model constants may be\n"
          "overridden as in train (--layers 2).\n")
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
  if (!t.transposed) return in;
  std::vector<float> out(in.size());
  Transpose(in.data(), t.shape[0], t.shape[1], out.data());
  return out;
}

absl::Status Export(const Args& args) {
  CompileOptions model_only;
  model_only.read_data = false;
  FrontendResult compiled = CompileFile(args.file, args.overrides, model_only);
  if (!compiled.spec) {
    std::cerr << FormatDiagnostics(compiled.diagnostics, compiled.source);
    return absl::InvalidArgumentError(args.file + " does not compile");
  }
  ASSIGN_OR_RETURN(const hf::Gpt2Layout layout, hf::Gpt2LayoutOf(compiled.spec->model));
  ASSIGN_OR_RETURN(const SafetensorsFile checkpoint, SafetensorsFile::Read(args.checkpoint));
  std::vector<std::vector<float>> data;
  std::vector<TensorRef> tensors;
  data.reserve(layout.tensors.size());
  for (const hf::HfTensor& t : layout.tensors) {
    ASSIGN_OR_RETURN(std::vector<float> d, HfData(checkpoint, args.checkpoint, t));
    data.push_back(std::move(d));
    std::vector<int64_t> shape = t.shape;
    if (t.transposed) std::swap(shape[0], shape[1]);
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
  out << hf::Gpt2ConfigJson(layout);
  out.close();
  if (!out) return absl::DataLossError("cannot write " + config);
  std::cout << "hf_export: " << args.out << ": GPT2LMHeadModel, " << layout.layers
            << " layers x " << layout.width << " wide, " << layout.heads << " heads, vocab "
            << layout.vocab << ", context " << layout.positions << "\n";
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
