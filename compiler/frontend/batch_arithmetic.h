// global_batch = gpus × micro_batch × accumulate: checking and inference.
//
// Rules, in order:
//  1. All four known and consistent: done.
//  2. All four known but inconsistent because a flag overrode one of them:
//     the flag wins, and the first of accumulate, micro_batch, gpus,
//     global_batch that came from the file (not from a flag) is dropped and
//     re-inferred. global_batch goes last because it is the training recipe
//     (it sets the optimisation); flags usually change only how it is split.
//     E.g. file: global_batch=256 micro_batch=64 gpus=2 accumulate=2, flag
//     --gpus 4: accumulate is re-inferred as 256 / (4 × 64) = 1.
//     All four inconsistent with no flag involved is an error.
//  3. Three known: the fourth is inferred (global_batch as the product, the
//     others by exact division; a remainder is an error showing the
//     arithmetic).
//  4. Fewer: accumulate defaults to 1; then, if still fewer than three,
//     gpus defaults to 1; then rule 3. So `global_batch = 256,
//     micro_batch = 64` infers gpus = 4 (accumulate 1). micro_batch and
//     global_batch both missing is an error.
// Every value must be a positive integer; products must fit in int64.
#ifndef TRAINC_COMPILER_FRONTEND_BATCH_ARITHMETIC_H_
#define TRAINC_COMPILER_FRONTEND_BATCH_ARITHMETIC_H_

#include <cstdint>
#include <string>
#include <variant>

namespace trainc::frontend {

enum class BatchField { kGpus, kMicroBatch, kAccumulate, kGlobalBatch };

const char* BatchFieldName(BatchField field);

struct BatchValue {
  enum class Source { kUnset, kFile, kFlag };
  int64_t value = 0;  // > 0 when set
  Source source = Source::kUnset;

  bool set() const { return source != Source::kUnset; }
};

struct BatchRequest {
  BatchValue gpus;
  BatchValue micro_batch;
  BatchValue accumulate;
  BatchValue global_batch;

  BatchValue& at(BatchField field);
  const BatchValue& at(BatchField field) const;
};

struct BatchSizes {
  int64_t gpus = 1;
  int64_t micro_batch = 0;
  int64_t accumulate = 1;
  int64_t global_batch = 0;
  // Rule 2: a value from the file that a flag made inconsistent and that
  // was re-inferred; `dropped_value` is what the file said.
  bool dropped = false;
  BatchField dropped_field = BatchField::kAccumulate;
  int64_t dropped_value = 0;
};

struct BatchError {
  BatchField blame;     // the field whose setting the error points at
  std::string message;  // shows the arithmetic
  std::string hint;
};

std::variant<BatchSizes, BatchError> ResolveBatch(const BatchRequest& request);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_BATCH_ARITHMETIC_H_
