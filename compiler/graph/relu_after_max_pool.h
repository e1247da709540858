// ReluAfterMaxPool: `max_pool2d(relu(x))` becomes `relu(max_pool2d(x))`
// on the forward graph, before autodiff, when the pooling is the relu's
// only reader: the relu and its gradient then run over the pooled image
// (a quarter of the elements for 2x2 windows) instead of the full one.
//
// The two give the same bits, forward and backward. relu is monotone and
// maps every value <= 0 (and NaN) to +0, and max pooling keeps the first
// maximum of its window (strict `<` from the lowest float): where a
// window's maximum is > 0 both pick the same element and value; elsewhere
// both give +0 (a window of -0 and +0 included: relu(-0) is +0). The
// gradient reaches x only at that element, and only where its value is
// > 0, in both orders, so dx is the same too. Every max-pooling window
// holds at least one element of x, padded or not.
//
// The pooling node takes the relu's place in the program and reads x; its
// output is the relu's former value, reshaped to the pooled shape and
// renamed "<pooled>.pre"; the relu takes the pooling's place and writes
// the pooled value the model reads. Runs under fusion = true, before
// autodiff (compiler/graph/pipeline.h); FuseConvRelu then finds no relu
// after such a convolution.
#ifndef TRAINC_COMPILER_GRAPH_RELU_AFTER_MAX_POOL_H_
#define TRAINC_COMPILER_GRAPH_RELU_AFTER_MAX_POOL_H_

#include "compiler/graph/pass.h"

namespace trainc {

class ReluAfterMaxPool : public GraphPass {
 public:
  absl::string_view name() const override { return "relu_after_max_pool"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_RELU_AFTER_MAX_POOL_H_
