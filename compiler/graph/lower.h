// Lowering: ModelSpec (per-sample shapes) -> forward Graph of one micro-step.
#ifndef TRAINC_COMPILER_GRAPH_LOWER_H_
#define TRAINC_COMPILER_GRAPH_LOWER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "compiler/spec/train_spec.h"

namespace trainc {

// Every per-sample shape gets `micro_batch` in front; an i32 class label
// `i32[C]` becomes i32[micro_batch] (one index per sample); a loss op's
// scalar becomes [1] (the micro-batch's loss_sum). Layernorm and
// cross_entropy get their saved-for-backward outputs ("n/mean", "n/rstd",
// "loss/probs"). The spec is trusted (checked by the front end), but
// inconsistencies that would make a wrong plan are still reported as
// InvalidArgument rather than crashing.
absl::StatusOr<Graph> LowerModel(const ModelSpec& model, int64_t micro_batch);

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_LOWER_H_
