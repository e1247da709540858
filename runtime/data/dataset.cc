#include "runtime/data/dataset.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/data/idx.h"

namespace trainc {
namespace {

absl::StatusOr<Dataset> LoadFromConfig(const DataConfig& config,
                                       const std::vector<std::string>& paths,
                                       const char* which) {
  if (config.format != "idx") {
    return absl::InvalidArgumentError(absl::StrCat(
        "data format '", config.format, "' is not supported (only idx)"));
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

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       double scale) {
  ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path));
  ASSIGN_OR_RETURN(IdxLabels labels, ReadIdxLabels(labels_path));
  if (static_cast<int64_t>(labels.labels.size()) != images.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, " holds ", images.count, " images but ", labels_path,
        " holds ", labels.labels.size(), " labels"));
  }
  // Scaling in double and rounding once gives the correctly rounded
  // pixel / 255 for scale = 1/255, the value PyTorch's `x.float() / 255`
  // produces; a float multiply would differ in the last bit for some pixels.
  std::vector<float> features(images.pixels.size());
  for (size_t i = 0; i < features.size(); ++i) {
    features[i] = static_cast<float>(images.pixels[i] * scale);
  }
  std::vector<int32_t> classes(labels.labels.begin(), labels.labels.end());
  return Dataset(images.rows * images.cols, std::move(features),
                 std::move(classes));
}

absl::StatusOr<Dataset> LoadTrainDataset(const DataConfig& config) {
  return LoadFromConfig(config, config.train_paths, "training");
}

absl::StatusOr<Dataset> LoadEvalDataset(const DataConfig& config) {
  return LoadFromConfig(config, config.eval_paths, "evaluation");
}

}  // namespace trainc
