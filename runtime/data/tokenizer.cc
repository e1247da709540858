#include "runtime/data/tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/data/spm_processor.h"

namespace trainc {

Tokenizer::Tokenizer() : processor_(std::make_unique<spm::Processor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& model_path) {
  Tokenizer t;
  t.path_ = model_path;
  if (const std::string error = t.processor_->Load(model_path); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_path, ": not a SentencePiece model (", error,
        "); spm_train --input=text.txt --model_prefix=spm --vocab_size=N makes one"));
  }
  return t;
}

int64_t Tokenizer::vocab() const { return processor_->PieceCount(); }

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  std::vector<int> ids;
  if (const std::string error = processor_->Encode(std::string(text), &ids); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot encode: ", error));
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": token ", i, " is ", ids[i], ", outside the model's ", vocab(), " pieces"));
    }
  }
  std::string text;
  const std::vector<int> in(ids.begin(), ids.end());
  if (const std::string error = processor_->Decode(in, &text); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot decode: ", error));
  }
  return text;
}

}  // namespace trainc
