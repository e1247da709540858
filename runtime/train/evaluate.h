// Evaluation of one rank's shard of the eval set: forward passes through
// the Executor, each batch scored on the host from the loss instruction's
// operands, and the totals summed over every rank.
//
//   ASSIGN_OR_RETURN(EvalHead head, FindEvalHead(plan));
//   ASSIGN_OR_RETURN(EvalResult result,
//                    Evaluate(plan, executor, device, host_comm, eval, head));
//
// The trainer (runtime/train/trainer.cc) decides when to evaluate and
// reports the result.
#ifndef TRAINC_RUNTIME_TRAIN_EVALUATE_H_
#define TRAINC_RUNTIME_TRAIN_EVALUATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/dataset.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"

namespace trainc {

// The evaluation head: the loss instruction's operands, read back after a
// forward pass to score a batch on the host (so that a short last batch's
// zero padding is simply not counted).
struct EvalHead {
  bool classification = false;
  const Buffer* prediction = nullptr;  // logits [B, .., C] or prediction [B, n]
  const Buffer* target = nullptr;      // labels i32 [B, ..] or target [B, n]
  int64_t rows_per_example = 1;        // classification: label entries per example
};

// The head of `plan`'s loss instruction (cross_entropy or mse) in
// micro-step 0; its buffers point into `plan`.
absl::StatusOr<EvalHead> FindEvalHead(const Plan& plan);

struct EvalResult {
  double accuracy = -1;
  double loss = 0;
  int64_t examples = 0;
};

// Scores every example of `eval` once, each rank its own shard, then sums
// the counts over the ranks of `comm` (the one collective, so ranks with
// different numbers of batches meet there). Collective: every rank calls it.
absl::StatusOr<EvalResult> Evaluate(const Plan& plan, Executor& executor,
                                    Device& device, Communicator& comm,
                                    const Dataset& eval, const EvalHead& head);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_EVALUATE_H_
