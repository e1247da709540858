// Dataset: a labelled data set held in host memory, ready to batch.
//
// Features are f32 rows (the raw bytes times DataConfig.scale, e.g. 1/255),
// labels i32 class indices. Fashion-MNIST's training set is 60000 x 784
// floats, 188 MB: small enough to keep whole, which makes a shuffled
// gather trivial and identical on every rank.
//
//   ASSIGN_OR_RETURN(Dataset train, LoadTrainDataset(plan.data));
#ifndef TRAINC_RUNTIME_DATA_DATASET_H_
#define TRAINC_RUNTIME_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/plan/plan.h"

namespace trainc {

class Dataset {
 public:
  // `features` holds size() rows of `feature_dim` floats; `labels` one per
  // row.
  Dataset(int64_t feature_dim, std::vector<float> features,
          std::vector<int32_t> labels);

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t feature_dim() const { return feature_dim_; }

  absl::Span<const float> features(int64_t i) const {
    return {features_.data() + i * feature_dim_,
            static_cast<size_t>(feature_dim_)};
  }
  int32_t label(int64_t i) const { return labels_[i]; }

 private:
  int64_t feature_dim_;
  std::vector<float> features_;
  std::vector<int32_t> labels_;
};

// Reads an IDX pair (images, labels) and checks that they describe the same
// number of examples. Each image becomes one row of rows*cols features.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       double scale);

// The plan's training / evaluation sets (DataConfig.train_paths /
// eval_paths: images then labels). Fails for a format other than "idx".
absl::StatusOr<Dataset> LoadTrainDataset(const DataConfig& config);
absl::StatusOr<Dataset> LoadEvalDataset(const DataConfig& config);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_DATASET_H_
