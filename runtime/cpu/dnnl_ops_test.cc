// The oneDNN convolution and pooling kernels against the float64 reference
// semantics (compiler/autodiff/reference_eval, itself checked by finite
// differences), on plans the real compiler makes: every instruction's
// outputs are compared right after it runs, forward and backward, with
// padding, strides, a bias-free convolution, a global average, gradient
// accumulation and a plan compiled for too little workspace.
#include "runtime/cpu/dnnl_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/autodiff/reference_eval.h"
#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"

namespace trainc {
namespace {

std::string Source(const std::string& model, int accumulate) {
  return absl::StrCat("model m {\n", model, "\n}\n",
                      "data { train = idx(\"/dev/null\", \"/dev/null\") }\n",
                      "train {\n  gpus = 1  micro_batch = 3  accumulate = ", accumulate,
                      "  steps = 1\n  optimizer = sgd(lr = 0.1)\n}\n");
}

constexpr char kCnn[] = R"(
  input  x: f32[2, 9, 9]
  label  y: i32[4]
  c1     = relu(conv2d(x, 8, kernel = 3, padding = 1))
  p1     = max_pool2d(c1, 3)
  c2     = conv2d(p1, 16, kernel = 2, bias = false)
  a2     = avg_pool2d(c2, 2, stride = 1, padding = 1)
  c3     = relu(conv2d(a2, 5, kernel = 3, stride = 2, padding = 1))
  g      = linear(global_avg_pool(a2), 4)
  logits = linear(flatten(c3), 4) + g
  loss   = cross_entropy(logits, y)
)";

// fusion = false: each convolution and its relu stay two instructions;
// fusion = true: c3's are one (conv2d_relu), and c1's relu runs after the
// max pooling (compiler/graph/relu_after_max_pool.h).
absl::StatusOr<Plan> CompileCnn(int accumulate, PlanOptions options, bool fusion = true) {
  FrontendResult r = CompileSource(Source(kCnn, accumulate), "cnn.train");
  if (!r.spec) return absl::InvalidArgumentError(FormatDiagnostics(r.diagnostics, r.source));
  r.spec->train.fusion = fusion;
  return BuildPlan(*r.spec, options);
}

PlanOptions CpuOptions() {
  PlanOptions options;
  options.workspace = cpu::WorkspaceBytes;
  return options;
}

// Runs every instruction but the optimizer on the CPU device and on the
// reference, with the same inputs and parameters, comparing each output
// (conv2d_relu's: the relu of the convolution, oneDNN's post-op).
void CompareWithReference(const Plan& plan, bool fused) {
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  ASSERT_TRUE(device.Prepare(plan).ok());
  PlanInterpreter reference(plan);
  char* arena = device.arena();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int id, bool labels) {
    const Buffer& b = plan.buffers[id];
    TensorRef ref = reference.buffer(id);
    for (int64_t i = 0; i < b.bytes / 4; ++i) {
      if (labels) {
        const int32_t v = static_cast<int32_t>(rng() % 4);
        std::memcpy(arena + b.offset + 4 * i, &v, 4);
        ref.data[i] = v;
      } else {
        const float v = u(rng);
        std::memcpy(arena + b.offset + 4 * i, &v, 4);
        ref.data[i] = v;
      }
    }
  };
  for (int id : plan.parameter_buffers) fill(id, false);
  const std::vector<bool> blocked = cpu::BlockedBuffers(plan);
  const int64_t block = cpu::ChannelBlock();
  int checked = 0, checked_blocked = 0, fused_convolutions = 0;
  StepState step;
  for (const Instruction& instr : plan.instructions) {
    if (instr.op == "optimizer" || instr.op == "all_reduce") continue;
    if (instr.op == "load_batch") {
      for (int id : instr.outputs) fill(id, plan.buffers[id].dtype == DType::kI32);
      continue;
    }
    ASSERT_TRUE(reference.Run(instr).ok()) << instr.label;
    absl::Status s = device.RunKernel(plan, instr, step);
    ASSERT_TRUE(s.ok()) << instr.label << ": " << s;
    if (instr.op == "conv2d_relu") ++fused_convolutions;
    for (int id : instr.outputs) {
      const Buffer& b = plan.buffers[id];
      // The workspace and max pooling's argmax are the backend's own.
      if (b.kind == BufferKind::kWorkspace || b.dtype == DType::kI32) continue;
      const float* raw = reinterpret_cast<const float*>(arena + b.offset);
      std::vector<float> got(raw, raw + b.bytes / 4);
      if (blocked[id]) {  // back to NCHW, as cpu::BlockedBuffers documents
        const int64_t C = b.shape[1], H = b.shape[2], W = b.shape[3];
        for (int64_t n = 0; n < b.shape[0]; ++n) {
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t hw = 0; hw < H * W; ++hw) {
              got[(n * C + c) * H * W + hw] =
                  raw[((n * (C / block) + c / block) * H * W + hw) * block + c % block];
            }
          }
        }
        ++checked_blocked;
      }
      TensorRef want = reference.buffer(id);
      double worst = 0, scale = 1e-6;
      for (int64_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(got[i] - want.data[i]));
        scale = std::max(scale, std::abs(want.data[i]));
      }
      EXPECT_LT(worst / scale, 2e-6) << instr.label << " -> " << b.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  // The 16- and 8-channel images between convolutions and pooling.
  EXPECT_GT(checked_blocked, 4);
  // c1's, once per micro-step, where the plan fuses (fusion = true).
  EXPECT_EQ(fused_convolutions > 0, fused);
}

TEST(DnnlOps, MatchesTheReferenceForwardAndBackward) {
  absl::StatusOr<Plan> plan = CompileCnn(1, CpuOptions(), /*fusion=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->memory.workspace_bytes, 0);
  CompareWithReference(*plan, /*fused=*/false);
}

// c3's relu done by the convolution (conv2d_relu, oneDNN's post-op), c1's
// over p1.
TEST(DnnlOps, FusedConvolutionAndRelu) {
  absl::StatusOr<Plan> plan = CompileCnn(2, CpuOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  CompareWithReference(*plan, /*fused=*/true);
}

// Micro-step 1 adds its parameter gradients to micro-step 0's: oneDNN
// cannot accumulate, so the workspace holds the product and the kernel adds.
TEST(DnnlOps, AccumulatesOverMicroSteps) {
  absl::StatusOr<Plan> plan = CompileCnn(2, CpuOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  bool accumulated_conv = false;
  for (const Instruction& in : plan->instructions) {
    if (in.op == "conv2d_grad_params" && in.attrs.at("accumulate") == 1) accumulated_conv = true;
  }
  EXPECT_TRUE(accumulated_conv);
  CompareWithReference(*plan, /*fused=*/true);
}

// A plan compiled without the CPU's workspace sizes is refused, saying why.
TEST(DnnlOps, RefusesAPlanWithTooLittleWorkspace) {
  absl::StatusOr<Plan> plan = CompileCnn(1, PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(plan->arena_bytes).ok());
  absl::Status s = device.Prepare(*plan);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("bytes of workspace, the plan reserves 0"),
            std::string::npos)
      << s;
}

TEST(DnnlOps, WorkspaceIsZeroForOtherOps) {
  absl::StatusOr<Plan> plan = CompileCnn(1, CpuOptions());
  ASSERT_TRUE(plan.ok());
  for (const Instruction& in : plan->instructions) {
    if (in.op != "relu" && in.op != "linear") continue;
    absl::StatusOr<int64_t> bytes = cpu::WorkspaceBytes(*plan, in);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(*bytes, 0);
  }
}

}  // namespace
}  // namespace trainc
