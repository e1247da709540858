#include "runtime/data/dataset.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/util/status_macros.h"
#include "runtime/data/idx.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/tokens.h"
#include "compiler/ops/kernel_families.h"

namespace trainc {
namespace {

bool IsTokenFormat(const DataConfig& config) {
  return config.format == DataFormat::kText || config.format == DataFormat::kTokens;
}

absl::StatusOr<Dataset> LoadFromConfig(const DataConfig& config,
                                       const std::vector<std::string>& paths,
                                       const TokenSplit& split,
                                       int64_t context, const char* which) {
  if (IsTokenFormat(config)) {
    if (context <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", which, " set (", EnumName(config.format),
          ") needs the window length: the model's token input width"));
    }
    return LoadTokenDataset(config.format, paths, split, context,
                            config.token_vocab, which, config.tokenizer);
  }
  if (config.format != DataFormat::kIdx) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data format '", EnumName(config.format),
        "' is not supported (idx, text or tokens)"));
  }
  if (paths.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", which, " set needs 2 idx files (images, labels), got ",
        paths.size()));
  }
  return LoadIdxDataset(paths[0], paths[1], config.scale);
}

}  // namespace

Dataset::Dataset(int64_t feature_dim, std::vector<float> features,
                 std::vector<int32_t> labels)
    : feature_dim_(feature_dim),
      features_(std::move(features)),
      labels_(std::move(labels)) {}

Dataset::Dataset(std::shared_ptr<const PixelBlock> pixels, double scale,
                 std::vector<int32_t> labels)
    : feature_dim_(pixels->rows * pixels->cols),
      pixels_(std::move(pixels)),
      scale_(scale),
      labels_(std::move(labels)) {
  for (int v = 0; v < 256; ++v) pixel_value_[v] = static_cast<float>(v * scale_);
}

void Dataset::CopyFeatures(int64_t i, float* out) const {
  if (pixels_ == nullptr) {
    std::copy_n(features_.data() + i * feature_dim_, feature_dim_, out);
    return;
  }
  // Scaling in double and rounding once gives the correctly rounded
  // pixel / 255 for scale = 1/255, the value PyTorch's `x.float() / 255`
  // produces; a float multiply would differ in the last bit for some pixels.
  // A byte has 256 values: each was scaled once, in the constructor (the
  // double conversions per pixel were most of a batch's load time).
  const uint8_t* p = pixels_->pixels().data() + i * feature_dim_;
  for (int64_t j = 0; j < feature_dim_; ++j) out[j] = pixel_value_[p[j]];
}

void Dataset::PrefetchFeatures(int64_t i) const {
  if (pixels_ == nullptr || i < 0 || i >= size()) return;
  const uint8_t* p = pixels_->pixels().data() + i * feature_dim_;
  for (int64_t j = 0; j < feature_dim_; j += 64) __builtin_prefetch(p + j);
}

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       double scale) {
  ASSIGN_OR_RETURN(std::shared_ptr<const PixelBlock> images, LoadIdxPixels(images_path));
  ASSIGN_OR_RETURN(IdxLabels labels, ReadIdxLabels(labels_path));
  if (static_cast<int64_t>(labels.labels.size()) != images->count) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, " holds ", images->count, " images but ", labels_path,
        " holds ", labels.labels.size(), " labels"));
  }
  std::vector<int32_t> classes(labels.labels.begin(), labels.labels.end());
  return Dataset(std::move(images), scale, std::move(classes));
}

Dataset Dataset::TokenWindows(std::vector<int32_t> tokens, int64_t context,
                              double bytes_per_token) {
  Dataset d;
  d.context_ = context;
  d.tokens_ = std::move(tokens);
  d.bytes_per_token_ = bytes_per_token;
  return d;
}

namespace {

// The split's bytes (one token each) encoded by the tokenizer at `path`;
// every id must be < vocab (the model's) when vocab > 0.
absl::StatusOr<std::vector<int32_t>> Tokenize(const std::vector<int32_t>& bytes,
                                              const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(const Tokenizer tokenizer, Tokenizer::Load(path));
  if (vocab > 0 && tokenizer.vocab() > vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " has ", tokenizer.vocab(), " pieces but the model's vocabulary is ", vocab,
        ": make the embedding (and the output layer) at least ", tokenizer.vocab(), " wide"));
  }
  std::string text(bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) text[i] = static_cast<char>(bytes[i]);
  return tokenizer.Encode(text);
}

}  // namespace

absl::StatusOr<Dataset> LoadTokenDataset(DataFormat format,
                                         const std::vector<std::string>& paths,
                                         TokenSplit split, int64_t context,
                                         int64_t vocab,
                                         const std::string& which,
                                         const std::string& tokenizer) {
  if (context <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token windows need a positive length, got ", context));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                   ReadTokenStream(format, paths, split, tokenizer.empty() ? vocab : 0));
  double bytes_per_token = format == DataFormat::kText ? 1.0 : 0.0;
  if (!tokenizer.empty()) {
    if (format != DataFormat::kText) {
      return absl::InvalidArgumentError("a tokenizer encodes text(...) data only");
    }
    const double bytes = static_cast<double>(tokens.size());
    ASSIGN_OR_RETURN(tokens, Tokenize(tokens, tokenizer, vocab));
    bytes_per_token = tokens.empty() ? 0.0 : bytes / static_cast<double>(tokens.size());
  }
  if (static_cast<int64_t>(tokens.size()) < context + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", which, " set (", EnumName(format), ", ",
        paths.size() == 1 ? paths[0] : absl::StrCat(paths.size(), " files from ", paths[0]),
        ", split ",
        split.begin, ":", split.end, ") holds ", tokens.size(),
        " tokens, fewer than one window of ", context + 1, " (", context,
        " input tokens and the next one)"));
  }
  return Dataset::TokenWindows(std::move(tokens), context, bytes_per_token);
}

absl::StatusOr<Dataset> LoadTrainDataset(const DataConfig& config,
                                         int64_t context) {
  return LoadFromConfig(config, config.train_paths, config.train_split,
                        context, "training");
}

absl::StatusOr<Dataset> LoadEvalDataset(const DataConfig& config,
                                        int64_t context) {
  return LoadFromConfig(config, config.eval_paths, config.eval_split, context,
                        "evaluation");
}

absl::StatusOr<int64_t> TokenContext(const Plan& plan) {
  int64_t context = 0;
  std::vector<std::string> inputs;
  for (int id : plan.input_buffers) {
    if (id < 0 || id >= static_cast<int>(plan.buffers.size())) continue;
    const Buffer& b = plan.buffers[id];
    inputs.push_back(absl::StrCat(b.name, " (", BufferKindName(b.kind), " ",
                                  DTypeName(b.dtype), ")"));
    if (b.kind != BufferKind::kInput || b.dtype != DType::kI32) continue;
    int64_t width = 1;
    for (size_t i = 1; i < b.shape.size(); ++i) width *= b.shape[i];
    if (context != 0 && width != context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan has i32 inputs of widths ", context, " and ", width,
          ": token windows need one length"));
    }
    context = width;
  }
  if (context <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", EnumName(plan.data.format),
        " data set needs a model with a token input (input tokens: i32[T]); "
        "the plan's inputs are: ",
        inputs.empty() ? "none" : absl::StrJoin(inputs, ", ")));
  }
  return context;
}

namespace {

// The class count of the plan's cross_entropy over a one-index-per-sample
// label (its logits' last dimension); 0 when there is none.
int64_t ClassCount(const Plan& plan) {
  for (const Instruction& in : plan.instructions) {
    if (!IsCrossEntropy(KernelOpOfInstruction(in.op)) || in.inputs.size() != 2) continue;
    const Buffer& logits = plan.buffers[in.inputs[0]];
    const Buffer& label = plan.buffers[in.inputs[1]];
    if (label.shape.size() == 1 && !logits.shape.empty()) return logits.shape.back();
  }
  return 0;
}

// Every label is checked when the data set is loaded, naming the file, the
// index and the value, not when its batch first reaches the loss (in the
// evaluation set, only after a whole epoch).
absl::Status CheckClassLabels(const Dataset& data, int64_t classes,
                              const std::string& labels_path) {
  if (classes <= 0) return absl::OkStatus();
  for (int64_t i = 0; i < data.size(); ++i) {
    const int32_t label = data.label(i);
    if (label < 0 || label >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          labels_path, ": label ", label, " of example ", i,
          " is outside [0, ", classes, "), the model's classes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> Checked(absl::StatusOr<Dataset> data, const Plan& plan,
                                const std::vector<std::string>& paths) {
  if (!data.ok() || plan.data.format != DataFormat::kIdx || paths.size() != 2) return data;
  RETURN_IF_ERROR(CheckClassLabels(*data, ClassCount(plan), paths[1]));
  return data;
}

}  // namespace

absl::StatusOr<Dataset> LoadTrainDataset(const Plan& plan) {
  int64_t context = 0;
  if (IsTokenFormat(plan.data)) {
    ASSIGN_OR_RETURN(context, TokenContext(plan));
  }
  return Checked(LoadTrainDataset(plan.data, context), plan,
                 plan.data.train_paths);
}

absl::StatusOr<Dataset> LoadEvalDataset(const Plan& plan) {
  int64_t context = 0;
  if (IsTokenFormat(plan.data)) {
    ASSIGN_OR_RETURN(context, TokenContext(plan));
  }
  return Checked(LoadEvalDataset(plan.data, context), plan,
                 plan.data.eval_paths);
}

}  // namespace trainc
