// The training graph's pass pipeline, declared once: every pass in order,
// when it runs and why it sits where it does. The planner builds it from
// a train { } block's settings (compiler/planner/planner.cc); every
// fusion is one of these passes, so a plan shows each fusion as its fused
// op and the backends only run it (they never decide to fuse).
//
//   PipelineOptions options;  // fusion = true, f32, nothing recomputed
//   PassPipeline pipeline = TrainPipeline(options, std::make_unique<Autodiff>(scale));
//   RETURN_IF_ERROR(pipeline.Run(&graph).status());
//
// Autodiff is the caller's (compiler/autodiff depends on this package);
// it runs at its place in the list.
#ifndef TRAINC_COMPILER_GRAPH_PIPELINE_H_
#define TRAINC_COMPILER_GRAPH_PIPELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "compiler/graph/pass.h"

namespace trainc {

// The train { } settings the pipeline depends on.
struct PipelineOptions {
  bool bf16 = false;    // precision = bf16: MixedPrecision
  bool fusion = true;   // fusion = false: no fusion pass at all
  std::vector<std::string> recompute;  // blocks whose activations are recomputed
};

// One pass of the pipeline.
struct PipelineStep {
  const char* name;          // the pass's name()
  const char* precondition;  // when it runs, and its place: what must run before / after
  bool (*runs)(const PipelineOptions& options);
  // The pass; null for autodiff (the caller's).
  std::unique_ptr<GraphPass> (*make)(const PipelineOptions& options);
};

// Every pass, in the order they run.
const std::vector<PipelineStep>& TrainPipelineSteps();

// The passes of TrainPipelineSteps that run under `options`, autodiff
// being `autodiff`.
PassPipeline TrainPipeline(const PipelineOptions& options, std::unique_ptr<GraphPass> autodiff);

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_PIPELINE_H_
