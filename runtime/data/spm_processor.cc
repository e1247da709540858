#include "runtime/data/spm_processor.h"

#include <sentencepiece_processor.h>

namespace trainc::spm {

struct Processor::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Processor::Processor() : impl_(std::make_unique<Impl>()) {}
Processor::~Processor() = default;

std::string Processor::Load(const std::string& model_path) {
  const sentencepiece::util::Status s = impl_->sp.Load(model_path);
  return s.ok() ? "" : s.ToString();
}

std::string Processor::Encode(const std::string& text, std::vector<int>* ids) const {
  const sentencepiece::util::Status s = impl_->sp.Encode(text, ids);
  return s.ok() ? "" : s.ToString();
}

std::string Processor::Decode(const std::vector<int>& ids, std::string* text) const {
  const sentencepiece::util::Status s = impl_->sp.Decode(ids, text);
  return s.ok() ? "" : s.ToString();
}

int Processor::PieceCount() const { return impl_->sp.GetPieceSize(); }

}  // namespace trainc::spm
