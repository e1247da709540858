#include "compiler/graph/pipeline.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

std::vector<std::string> Names(const PipelineOptions& options) {
  std::vector<std::string> names;
  for (const PipelineStep& step : TrainPipelineSteps()) {
    if (step.runs(options)) names.push_back(step.name);
  }
  return names;
}

// The one list, in order, each step with its precondition and each made
// pass named as its step.
TEST(Pipeline, DeclaresEveryPassInOrder) {
  PipelineOptions all;
  all.bf16 = true;
  all.recompute = {"block"};
  EXPECT_EQ(Names(all), (std::vector<std::string>{
                            "dce", "relu_after_max_pool", "autodiff", "mixed_precision", "fuse_classifier",
                            "fuse_linear_gelu", "fuse_linear_activation", "fuse_conv_relu",
                            "fuse_linear_gelu_grad", "fuse_swiglu", "recompute",
                            "fuse_add_layernorm"}));
  for (const PipelineStep& step : TrainPipelineSteps()) {
    EXPECT_NE(std::string(step.precondition), "") << step.name;
    if (step.make == nullptr) continue;
    EXPECT_EQ(step.make(all)->name(), step.name);
  }
}

// fusion = false runs no fusion at all; the defaults run every one.
TEST(Pipeline, FusionFalseDisablesEveryFusion) {
  PipelineOptions off;
  off.fusion = false;
  EXPECT_EQ(Names(off), (std::vector<std::string>{"dce", "autodiff"}));
  int fusions = 0;
  for (const std::string& name : Names(PipelineOptions())) {
    fusions += name.rfind("fuse_", 0) == 0;
  }
  EXPECT_EQ(fusions, 7);
}

}  // namespace
}  // namespace trainc
