// attention_bench: causal attention alone on one GPU, forward and
// forward + backward, in TFLOP/s, beside PyTorch's
// F.scaled_dot_product_attention (is_causal, its flash backend in bf16).
//
//   bazel run -c opt //tools/bench:attention_bench [-- --iters 20 --no-torch]
//
// Each shape runs the plan's two instructions, attention and
// attention_grad, through CudaDevice::RunKernel on random q|k|v (bf16
// operands, f32 log-sum-exp; and f32 with --fp32). FLOPs count the causal
// triangle as FlashAttention does: the forward 2 products of
// 2 B H d T (T + 1) / 2, the backward 5. PyTorch's figures come from
// tools/bench/torch_attention_bench.py on the same shapes. Exits with a
// message (status 0) on a machine without a GPU.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/plan/plan.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device/bf16.h"
#include "runtime/device/device.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

struct Args {
  int warmup = 3;
  int iters = 20;
  bool torch = true;
  bool bf16 = true;
};

// B, T, H, KV, d: GPT-2 small's attention at micro-batch 8 and 16, a
// Llama-style grouped-query layer, and a long context.
struct Shape {
  int64_t batch, seq, heads, kv_heads, head_dim;
  std::string Name() const {
    return absl::StrCat("B", batch, " T", seq, " H", heads, "/", kv_heads, " d", head_dim);
  }
  double PairFlops() const {  // one product over the causal triangle
    return 2.0 * batch * heads * head_dim * seq * (seq + 1) / 2.0;
  }
};
const Shape kShapes[] = {{8, 1024, 12, 12, 64}, {16, 1024, 12, 12, 64},
                         {4, 2048, 32, 8, 128}, {1, 8192, 16, 16, 64}};

// The plan of one attention layer: qkv -> y, lse; dy, qkv, y, lse -> dqkv,
// delta.
Plan AttentionPlan(const Shape& s, bool bf16) {
  Plan plan;
  plan.global_batch = plan.micro_batch = s.batch;
  plan.accumulate = 1;
  plan.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
  const int64_t width = (s.heads + 2 * s.kv_heads) * s.head_dim, out = s.heads * s.head_dim;
  int64_t offset = 0;
  auto add = [&](const char* name, std::vector<int64_t> shape, bool f32) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = name;
    b.kind = BufferKind::kActivation;
    b.dtype = bf16 && !f32 ? DType::kBF16 : DType::kF32;
    b.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : b.shape) n *= d;
    b.bytes = n * DTypeBytes(b.dtype);
    b.offset = offset;
    offset += (b.bytes + 255) / 256 * 256;
    plan.buffers.push_back(b);
    return b.id;
  };
  const int qkv = add("qkv", {s.batch, s.seq, width}, false);
  const int y = add("y", {s.batch, s.seq, out}, false);
  const int lse = add("lse", {s.batch, s.heads, s.seq}, true);
  const int dy = add("dy", {s.batch, s.seq, out}, false);
  const int dqkv = add("dqkv", {s.batch, s.seq, width}, false);
  const int delta = add("delta", {s.batch, s.heads, s.seq}, true);
  const std::map<std::string, double> attrs = {{"heads", double(s.heads)},
                                               {"kv_heads", double(s.kv_heads)}};
  Instruction fwd;
  fwd.id = 0;
  fwd.op = "attention";
  fwd.inputs = {qkv};
  fwd.outputs = {y, lse};
  fwd.attrs = attrs;
  fwd.label = "attention";
  Instruction bwd;
  bwd.id = 1;
  bwd.op = "attention_grad";
  bwd.inputs = {dy, qkv, y, lse};
  bwd.outputs = {dqkv, delta};
  bwd.attrs = attrs;
  bwd.attrs["accumulate"] = 0;
  bwd.phase = Phase::kBackward;
  bwd.label = "attention_grad";
  plan.instructions = {fwd, bwd};
  plan.arena_bytes = offset;
  return plan;
}

absl::Status UploadRandom(Device& device, const Buffer& b, std::mt19937& rng) {
  int64_t n = b.bytes / DTypeBytes(b.dtype);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  if (b.dtype == DType::kF32) return device.Upload(b.offset, values.data(), b.bytes);
  std::vector<uint16_t> half(n);
  NarrowToBf16(values.data(), n, half.data());
  return device.Upload(b.offset, half.data(), b.bytes);
}

// Mean milliseconds of `instructions` (run in order, then synchronised).
absl::StatusOr<double> TimeMs(Device& device, const Plan& plan, std::vector<int> instructions,
                              const Args& args) {
  for (int i = 0; i < args.warmup; ++i) {
    for (int id : instructions) {
      RETURN_IF_ERROR(device.RunKernel(plan, plan.instructions[id], StepState{}));
    }
  }
  RETURN_IF_ERROR(device.Synchronize());
  const absl::Time begin = absl::Now();
  for (int i = 0; i < args.iters; ++i) {
    for (int id : instructions) {
      RETURN_IF_ERROR(device.RunKernel(plan, plan.instructions[id], StepState{}));
    }
  }
  RETURN_IF_ERROR(device.Synchronize());
  return absl::ToDoubleMilliseconds(absl::Now() - begin) / args.iters;
}

struct Row {
  double fwd_ms = 0, step_ms = 0;
};

absl::StatusOr<Row> Measure(const Shape& s, const Args& args) {
  const Plan plan = AttentionPlan(s, args.bf16);
  ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateCudaDevice(0));
  RETURN_IF_ERROR(device->AllocateArena(plan.arena_bytes));
  std::mt19937 rng(7);
  for (const Buffer& b : plan.buffers) RETURN_IF_ERROR(UploadRandom(*device, b, rng));
  RETURN_IF_ERROR(device->Prepare(plan));
  Row r;
  ASSIGN_OR_RETURN(r.fwd_ms, TimeMs(*device, plan, {0}, args));
  ASSIGN_OR_RETURN(r.step_ms, TimeMs(*device, plan, {0, 1}, args));
  return r;
}

// name -> (forward ms, forward + backward ms) from the PyTorch script.
std::map<std::string, Row> RunTorch(const Args& args, bool* ran) {
  std::map<std::string, Row> out;
  std::string shapes;
  for (const Shape& s : kShapes) {
    absl::StrAppend(&shapes, shapes.empty() ? "" : ",", s.batch, ":", s.seq, ":", s.heads, ":",
                    s.kv_heads, ":", s.head_dim);
  }
  const std::string cmd =
      absl::StrCat("python3 tools/bench/torch_attention_bench.py --shapes ", shapes,
                   " --iters ", args.iters, args.bf16 ? "" : " --fp32", " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char line[1024];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    // "torch_attention B8 T1024 H12/12 d64 FWD_MS STEP_MS"
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    Row r;
    if (f.size() == 7 && f[0] == "torch_attention" && absl::SimpleAtod(f[5], &r.fwd_ms) &&
        absl::SimpleAtod(f[6], &r.step_ms)) {
      out[absl::StrCat(f[1], " ", f[2], " ", f[3], " ", f[4])] = r;
    }
  }
  *ran = pclose(pipe) == 0;
  return out;
}

int Main(const Args& args) {
  if (CudaDeviceCount() == 0) {
    std::cout << "attention_bench: no GPU here (" << CudaUnavailableReason()
              << "); nothing to measure\n";
    return 0;
  }
  bool torch_ran = false;
  const std::map<std::string, Row> torch =
      args.torch ? RunTorch(args, &torch_ran) : std::map<std::string, Row>();
  std::printf("causal attention, %s, forward and forward + backward (TFLOP/s: 2 products "
              "forward, 5 backward, over the causal triangle)\n",
              args.bf16 ? "bf16 operands, f32 accumulation" : "fp32");
  std::printf("%-26s | %9s %9s %9s %9s | %9s %9s %9s %9s\n", "shape", "fwd ms", "TFLOP/s",
              "f+b ms", "TFLOP/s", "SDPA fwd", "TFLOP/s", "SDPA f+b", "TFLOP/s");
  for (const Shape& s : kShapes) {
    absl::StatusOr<Row> r = Measure(s, args);
    if (!r.ok()) {
      std::printf("%-26s | %s\n", s.Name().c_str(), std::string(r.status().message()).c_str());
      continue;
    }
    auto tflops = [&](double products, double ms) {
      return ms > 0 ? products * s.PairFlops() / (ms * 1e-3) / 1e12 : 0.0;
    };
    std::printf("%-26s | %9.3f %9.1f %9.3f %9.1f", s.Name().c_str(), r->fwd_ms,
                tflops(2, r->fwd_ms), r->step_ms, tflops(7, r->step_ms));
    auto t = torch.find(s.Name());
    if (t != torch.end()) {
      std::printf(" | %9.3f %9.1f %9.3f %9.1f\n", t->second.fwd_ms, tflops(2, t->second.fwd_ms),
                  t->second.step_ms, tflops(7, t->second.step_ms));
    } else {
      std::printf(" | %9s\n", args.torch ? "-" : "--no-torch");
    }
  }
  if (args.torch && !torch_ran) {
    std::printf("(PyTorch figures missing: tools/bench/torch_attention_bench.py did not run)\n");
  }
  return 0;
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  trainc::Args args;
  trainc::OptionParser parser;
  auto positive = [](int* out) {
    return [out](const std::string& v) -> absl::Status {
      if (!absl::SimpleAtoi(v, out) || *out < 1) {
        return absl::InvalidArgumentError(absl::StrCat("not a positive integer: ", v));
      }
      return absl::OkStatus();
    };
  };
  parser.Usage({"attention_bench [options]"})
      .Description(
          "Causal attention alone on one GPU (trainc's tiled kernels, forward and\n"
          "forward + backward) in ms and TFLOP/s beside PyTorch's\n"
          "scaled_dot_product_attention on the same shapes.\n")
      .Value({"--warmup"}, "N", "untimed runs first (default 3)", positive(&args.warmup))
      .Value({"--iters"}, "N", "timed runs (default 20)", positive(&args.iters))
      .Switch({"--fp32"}, "f32 operands instead of bf16", [&args] { args.bf16 = false; })
      .Switch({"--no-torch"}, "do not run the PyTorch reference", [&args] { args.torch = false; });
  const absl::StatusOr<bool> help = parser.Parse(argc, argv);
  if (!help.ok()) {
    std::fprintf(stderr, "attention_bench: %s\n", std::string(help.status().message()).c_str());
    return 2;
  }
  if (*help) {
    std::fputs(parser.Help().c_str(), stdout);
    return 0;
  }
  return trainc::Main(args);
}
