// The safetensors file format (https://github.com/huggingface/safetensors):
//
//   8 bytes   N, little-endian u64
//   N bytes   JSON header: {"__metadata__": {"key": "value", ...},
//                           "name": {"dtype": "F32", "shape": [2, 3],
//                                    "data_offsets": [begin, end]}, ...}
//             padded with spaces so that the data starts 8-byte aligned
//   the rest  raw little-endian tensor data; offsets are relative to its
//             start and the tensors tile it exactly
//
// Writing is atomic: a temporary file in the same directory, fsync, rename,
// so a crash leaves either the old file or the new one, never half of one.
// Reading checks everything (header size, JSON, dtype, shape vs. byte
// count, offsets inside the file, no gaps or overlaps) and says what is
// wrong and where.
#ifndef TRAINC_RUNTIME_CHECKPOINT_SAFETENSORS_H_
#define TRAINC_RUNTIME_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trainc {

// A tensor to write; `data` must stay valid during the call.
struct TensorRef {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "I32", "F64", ...
  std::vector<int64_t> shape;
  absl::Span<const char> data;
};

// Bytes per element of a safetensors dtype, or an error for an unknown one.
absl::StatusOr<int64_t> SafetensorsDTypeBytes(const std::string& dtype);

// The whole file, in memory. Tensors are written in the order given.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorRef>& tensors,
    const std::map<std::string, std::string>& metadata);

absl::Status WriteSafetensorsFile(
    const std::string& path, const std::vector<TensorRef>& tensors,
    const std::map<std::string, std::string>& metadata);

// Several files written as one: every file is written whole to a temporary
// beside it first (in the order given), and only then are they renamed into
// place, the first one last, so that the first file under its final name
// means the others are there too. A write that fails (a full disk) leaves
// every old file as it was.
struct SafetensorsOutput {
  std::string path;
  std::vector<TensorRef> tensors;
  std::map<std::string, std::string> metadata;
};
absl::Status WriteSafetensorsFiles(const std::vector<SafetensorsOutput>& files);

class SafetensorsFile {
 public:
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0;  // into the data section
    int64_t end = 0;
  };

  // `name` appears in errors (usually the path).
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes,
                                               const std::string& name);
  static absl::StatusOr<SafetensorsFile> Read(const std::string& path);

  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const Tensor* Find(const std::string& name) const;
  absl::Span<const char> Data(const Tensor& tensor) const;

 private:
  std::string bytes_;
  int64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CHECKPOINT_SAFETENSORS_H_
