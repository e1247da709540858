// Reading the IDX format (MNIST, Fashion-MNIST), plain or gzip-compressed.
//
// An IDX file is a big-endian header (two zero bytes, a type byte, the
// number of dimensions, then one 32-bit size per dimension) followed by the
// data. Only unsigned bytes (type 0x08) are supported: images are
// 0x00000803 (count x rows x cols), labels 0x00000801 (count).
//
//   ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(path));
//
// Every error names the file and says what is wrong, e.g.
//   "train-labels-idx1-ubyte.gz: expected 60000 labels, file ends after 59872".
#ifndef TRAINC_RUNTIME_DATA_IDX_H_
#define TRAINC_RUNTIME_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainc {

struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

struct IdxLabels {
  std::vector<uint8_t> labels;
};

// Both accept gzip-compressed and plain files (told apart by content, not
// by name).
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);
absl::StatusOr<IdxLabels> ReadIdxLabels(const std::string& path);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_IDX_H_
