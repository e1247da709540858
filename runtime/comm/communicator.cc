#include "runtime/comm/communicator.h"

#include "absl/strings/str_cat.h"

namespace trainc {

absl::Status Communicator::AllReduceSumBf16(float* /*data*/, int64_t /*count*/,
                                            void* /*stream*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), ": no bf16 gradient all-reduce (grad_comm = bf16)"));
}

absl::Status Communicator::ReduceScatterSumBf16(float* /*data*/,
                                                int64_t /*count*/,
                                                void* /*stream*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), ": no bf16 gradient reduce-scatter (grad_comm = bf16)"));
}

}  // namespace trainc
