// Dataset: a data set held in host memory, ready to batch. Two kinds:
//
// Labelled examples (idx): features are f32 rows (the raw bytes times
// DataConfig.scale, e.g. 1/255), labels i32 class indices. Fashion-MNIST's
// training set is 60000 x 784 floats, 188 MB: small enough to keep whole,
// which makes a shuffled gather trivial and identical on every rank.
//
// Token windows (text, tokens): one i32 token stream; example i is the
// window of T + 1 tokens [i*T, i*T + T] (windows overlap by one token, as
// in llm.c's loader): its first T tokens are the model's input, its last T
// the next-token targets. Windows are views into the stream.
//
//   ASSIGN_OR_RETURN(Dataset train, LoadTrainDataset(plan));
#ifndef TRAINC_RUNTIME_DATA_DATASET_H_
#define TRAINC_RUNTIME_DATA_DATASET_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/plan/plan.h"
#include "runtime/data/pixel_cache.h"

namespace trainc {

class Dataset {
 public:
  // Labelled examples: `features` holds size() rows of `feature_dim`
  // floats; `labels` one per row.
  Dataset(int64_t feature_dim, std::vector<float> features,
          std::vector<int32_t> labels);
  // Images as bytes (shared by the machine's ranks when mapped from the
  // pixel cache), each feature pixel * scale.
  Dataset(std::shared_ptr<const PixelBlock> pixels, double scale,
          std::vector<int32_t> labels);

  // Token windows of `context` (T > 0) + 1 tokens over `tokens`:
  // size() = (tokens.size() - 1) / T, the tokens after the last whole
  // window unused.
  // bytes_per_token: the text bytes per token of the stream (1 for bytes,
  // the ratio for tokenized text, 0 when unknown: llm.c shards).
  static Dataset TokenWindows(std::vector<int32_t> tokens, int64_t context,
                              double bytes_per_token = 1.0);

  bool is_token_windows() const { return context_ > 0; }

  // Examples (or windows).
  int64_t size() const {
    if (context_ == 0) return static_cast<int64_t>(labels_.size());
    const int64_t n = static_cast<int64_t>(tokens_.size());
    return n < 2 ? 0 : (n - 1) / context_;
  }

  // Labelled examples only.
  int64_t feature_dim() const { return feature_dim_; }
  // Example i's feature_dim() features into `out`: pixel * scale rounded
  // once from double (the correctly rounded pixel / 255 for scale 1/255,
  // as PyTorch's x.float() / 255).
  void CopyFeatures(int64_t i, float* out) const;
  // Asks the CPU to start loading example i's pixels (a hint; no effect on
  // results): a shuffled batch reads its images from all over the set.
  void PrefetchFeatures(int64_t i) const;
  // Images mapped from the machine's pixel cache (one copy for all ranks).
  bool shares_pixels() const { return pixels_ != nullptr && pixels_->shared; }
  int32_t label(int64_t i) const { return labels_[i]; }

  // Token windows only: T, and window i's T + 1 tokens.
  int64_t context() const { return context_; }
  absl::Span<const int32_t> window(int64_t i) const {
    return {tokens_.data() + i * context_, static_cast<size_t>(context_ + 1)};
  }
  int64_t token_count() const { return static_cast<int64_t>(tokens_.size()); }
  // Bits per byte are nats per token / ln 2 / this (0: unknown).
  double bytes_per_token() const { return bytes_per_token_; }

 private:
  Dataset() = default;

  int64_t feature_dim_ = 0;
  std::vector<float> features_;
  std::shared_ptr<const PixelBlock> pixels_;  // or images as bytes
  double scale_ = 1.0;
  std::array<float, 256> pixel_value_{};  // float(pixel * scale_), each byte
  std::vector<int32_t> labels_;
  int64_t context_ = 0;  // 0: labelled examples
  double bytes_per_token_ = 0;
  std::vector<int32_t> tokens_;
};

// Reads an IDX pair (images, labels) and checks that they describe the same
// number of examples. Each image becomes one row of rows*cols features.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       double scale);

// A text / tokens source (see tokens.h) sliced by `split`, as windows of
// `context` + 1 tokens; with vocab > 0 every token must be < vocab. Fails
// when the slice holds less than one window. `which` names the set in
// errors ("training"). With a `tokenizer` (text only: a SentencePiece
// model's path) the slice's bytes are encoded into its token ids.
absl::StatusOr<Dataset> LoadTokenDataset(DataFormat format,
                                         const std::vector<std::string>& paths,
                                         TokenSplit split, int64_t context,
                                         int64_t vocab,
                                         const std::string& which = "token",
                                         const std::string& tokenizer = "");

// The plan's training / evaluation sets: idx (train_paths / eval_paths:
// images then labels) or text / tokens, windows of `context` tokens (which
// these need: > 0) with the set's split and config.token_vocab.
absl::StatusOr<Dataset> LoadTrainDataset(const DataConfig& config,
                                         int64_t context = 0);
absl::StatusOr<Dataset> LoadEvalDataset(const DataConfig& config,
                                        int64_t context = 0);

// The same for `plan.data`, with the window length of text / tokens taken
// from the plan: TokenContext.
absl::StatusOr<Dataset> LoadTrainDataset(const Plan& plan);
absl::StatusOr<Dataset> LoadEvalDataset(const Plan& plan);

// T of a language model's plan: the row width (the product of the
// dimensions after the batch) of its one i32 input buffer, `input tokens:
// i32[T]`. An error when there is none, or several of different widths.
absl::StatusOr<int64_t> TokenContext(const Plan& plan);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_DATASET_H_
