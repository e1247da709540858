// SentencePiece behind an interface of the standard library only: its
// header declares names in namespace absl that clash with Abseil's, so it
// is included by spm_processor.cc alone (tokenizer.h is what code uses).
#ifndef TRAINC_RUNTIME_DATA_SPM_PROCESSOR_H_
#define TRAINC_RUNTIME_DATA_SPM_PROCESSOR_H_

#include <memory>
#include <string>
#include <vector>

namespace trainc::spm {

class Processor {
 public:
  Processor();
  ~Processor();
  // Each returns "" on success, else SentencePiece's message.
  std::string Load(const std::string& model_path);
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;
  int PieceCount() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainc::spm

#endif  // TRAINC_RUNTIME_DATA_SPM_PROCESSOR_H_
