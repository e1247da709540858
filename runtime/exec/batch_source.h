// BatchSource: where the executor's load_batch instructions get their data.
//
// The data pipeline (runtime/data) implements it; the executor calls Fill
// once per micro-step, in order, on the thread that runs the step. A step
// whose capture failed is issued again, so Fill must serve the same data
// when called again for the same micro-step of the same step.
#ifndef TRAINC_RUNTIME_EXEC_BATCH_SOURCE_H_
#define TRAINC_RUNTIME_EXEC_BATCH_SOURCE_H_

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"

namespace trainc {

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Uploads this rank's micro-step `micro_step` (0 .. plan.accumulate - 1
  // of the current optimizer step) into plan.input_buffers, in their order
  // (features f32, labels i32), with device.Upload. Which global samples a
  // rank's micro-step holds is the source's business; for the
  // deterministic-mode guarantee it must be global micro-batch
  // rank * accumulate + micro_step.
  virtual absl::Status Fill(int micro_step, const Plan& plan,
                            Device& device) = 0;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_BATCH_SOURCE_H_
