// A subword tokenizer for text data: a SentencePiece model (spm_train from
// Debian's sentencepiece package writes one), behind
// `text(..., tokenizer = "file.model")`, tools/tokenize and tools/sample.
//
//   ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::Load("spm.model"));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, t.Encode("the cat"));
//
// Errors name the model file.
#ifndef TRAINC_RUNTIME_DATA_TOKENIZER_H_
#define TRAINC_RUNTIME_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainc {

namespace spm {
class Processor;
}

class Tokenizer {
 public:
  static absl::StatusOr<Tokenizer> Load(const std::string& model_path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The number of token ids (ids are in [0, vocab())).
  int64_t vocab() const;
  const std::string& path() const { return path_; }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // Ids outside [0, vocab()) are an error naming the first.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

 private:
  Tokenizer();
  std::string path_;
  std::unique_ptr<spm::Processor> processor_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_TOKENIZER_H_
