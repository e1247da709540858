// Autodiff: reverse-mode differentiation of a forward graph, as a pass.
//
// Appends, after the forward nodes, the backward nodes (instruction ops of
// the op table, from each forward op's gradient rule there) that compute
// d(loss)/d(parameter) for every parameter the loss depends on.
// The loss seen by the gradient is `loss_scale * loss_sum`; the planner
// passes 1 / global_batch so that the step's gradient is that of the mean
// over the global batch whatever its split into ranks and micro-steps.
//
// Gradients are created only where needed: values that depend on no
// parameter (inputs, labels, anything computed only from them) get none,
// so the first layer's linear_grad_input is never emitted, and mse's target
// is a constant even when computed. When a value has several consumers the
// first contribution to its gradient is written with accumulate=0, later
// ones with accumulate=1 (no zero-fill). Parameter gradients are written
// with accumulate=0 here; the planner rewrites that per micro-step.
//
// For overlap, a layer's parameter gradients are emitted before its input
// gradient: the bucket holding them can start its all-reduce while the
// input gradient is still being computed.
#ifndef TRAINC_COMPILER_AUTODIFF_AUTODIFF_H_
#define TRAINC_COMPILER_AUTODIFF_AUTODIFF_H_

#include "compiler/graph/pass.h"

namespace trainc {

class Autodiff : public GraphPass {
 public:
  explicit Autodiff(double loss_scale) : loss_scale_(loss_scale) {}

  absl::string_view name() const override { return "autodiff"; }
  absl::StatusOr<bool> Run(Graph* graph) override;

 private:
  double loss_scale_;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_AUTODIFF_AUTODIFF_H_
