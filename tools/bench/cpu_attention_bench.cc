// cpu_attention_bench: the CPU's attention kernel alone (runtime/cpu/
// attention.h), forward + backward on one micro-batch of tiny_gpt's and
// llama_tiny's layer shapes, in f32 (the kernel every f32 run uses, and
// bf16's when widened) and with the products on oneDNN's bf16 kernels
// (precision = bf16 where the CPU has them). Prints ms per layer and per
// step (times the model's layers), the median of the timed repetitions.
//
// One thread (OpenBLAS's and oneDNN's), as cpu_bench's one-rank rows.
//
//   bazel run -c opt //tools/bench:cpu_attention_bench [-- --reps 20]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "compiler/ops/bf16.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/kernels.h"

namespace trainc {
namespace {

struct Shape {
  const char* key;  // --only
  const char* name;
  attention::Geometry g;
  int layers;
};

attention::Geometry Geometry(int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d, bool rope) {
  attention::Geometry g;
  g.batch = b, g.seq = t, g.heads = h, g.kv_heads = kv, g.head_dim = d, g.rope = rope;
  return g;
}

// This thread's CPU time: on a machine shared with other work, wall time
// counts the others' turns too.
double ThreadMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

std::vector<uint16_t> Bf16Of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

// The fastest forward + backward of `reps` (after 2 untimed): on a shared
// machine the minimum is the least disturbed.
double Time(const attention::Geometry& g, bool bf16, int reps) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(dist(gen)));
    return v;
  };
  std::vector<float> qkv = random(g.batch * g.seq * g.QkvWidth());
  std::vector<float> dy = random(g.batch * g.seq * g.OutWidth());
  std::vector<float> y(dy.size()), lse(g.batch * g.heads * g.seq), delta(lse.size());
  std::vector<float> dqkv(qkv.size());
  // precision = bf16: q|k|v, dy, y and dqkv are the bf16 tensors the
  // kernel reads and writes as they are (attention.h).
  std::vector<uint16_t> qkv16 = Bf16Of(qkv), dy16 = Bf16Of(dy), y16 = Bf16Of(y);
  std::vector<uint16_t> dqkv16(qkv16.size());
  auto at = [&](std::vector<float>& f, std::vector<uint16_t>& b) {
    return bf16 ? reinterpret_cast<float*>(b.data()) : f.data();
  };
  const float* fx[] = {at(qkv, qkv16)};
  float* fy[] = {at(y, y16), lse.data()};
  const float* gx[] = {at(dy, dy16), at(qkv, qkv16), at(y, y16), lse.data()};
  float* gy[] = {at(dqkv, dqkv16), delta.data()};
  attention::Geometry forward = g, backward = g;
  // As cpu::PrepareAttention marks a bf16 plan's operands.
  forward.native_inputs = bf16 ? 0b1 : 0;
  backward.native_inputs = bf16 ? 0b111 : 0;
  forward.native_outputs = backward.native_outputs = bf16 ? 1 : 0;
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    const double start = ThreadMs();
    std::string why = cpu::OwnCpuKernel(KernelOp::kAttention, forward, fx, fy, false);
    if (why.empty()) {
      why = cpu::OwnCpuKernel(KernelOp::kAttentionGrad, backward, gx, gy, false);
    }
    if (!why.empty()) {
      std::fprintf(stderr, "cpu_attention_bench: %s\n", why.c_str());
      std::exit(1);
    }
    if (r >= 2) ms.push_back(ThreadMs() - start);
  }
  return *std::min_element(ms.begin(), ms.end());
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  using namespace trainc;
  int reps = 20;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: cpu_attention_bench [--reps N] [--only gpt|llama|gpt1024]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  cpu::SetBlasThreads(1);
  cpu::SetDnnlThreads(1);
  const bool native = cpu::Bf16Gemm::Native();
  std::printf("attention forward + backward, fastest of %d; bf16 products: %s\n", reps,
              native ? cpu::Bf16GemmSummary().c_str() : "none here (widened)");
  const Shape shapes[] = {
      {"gpt", "tiny_gpt (32 x 64, 4 heads x 32)", Geometry(32, 64, 4, 4, 32, false), 4},
      {"llama", "llama_tiny (32 x 64, 8 heads / 2 kv x 32, rope)", Geometry(32, 64, 8, 2, 32, true), 6},
      {"gpt1024", "tiny_gpt at ctx 1024 (2 x 1024)", Geometry(2, 1024, 4, 4, 32, false), 4}};
  std::printf("%-48s %12s %12s %12s %12s\n", "shape", "f32 ms/layer", "f32 ms/step",
              "bf16 ms/layer", "bf16 ms/step");
  for (const Shape& s : shapes) {
    if (!only.empty() && only != s.key) continue;
    const double f32 = Time(s.g, false, reps);
    const double bf16 = native ? Time(s.g, true, reps) : 0;
    std::printf("%-48s %12.2f %12.1f %12.2f %12.1f\n", s.name, f32, f32 * s.layers, bf16,
                bf16 * s.layers);
  }
  return 0;
}
