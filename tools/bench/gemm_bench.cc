// gemm_bench: the CPU's matrix products of trainc's example models, one
// thread, on each library --blas can pick (runtime/cpu/gemm.h): the
// measurement behind `auto`.
//
//   bazel run -c opt //tools/bench:gemm_bench
//   OPENBLAS_CORETYPE=Prescott bazel run -c opt //tools/bench:gemm_bench
//
// Each figure is the best of 5 timed batches of calls (the machine may be
// shared: the minimum is the least disturbed), in microseconds per call
// and GFLOP/s.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"

namespace trainc {
namespace {

struct Shape {
  const char* name;
  bool trans_a, trans_b;
  int64_t m, n, k;
};

// Linear forward is (rows, out, in) with B transposed, its input gradient
// (rows, in, out), its weight gradient (out, in, rows) with A transposed;
// attention's blocks are 64 query rows by head size 32.
constexpr Shape kShapes[] = {
    {"mlp linear 784->256, 256 rows", false, true, 256, 256, 784},
    {"mlp its input gradient", false, false, 256, 784, 256},
    {"mlp its weight gradient", true, false, 256, 784, 256},
    {"mlp linear 128->10", false, true, 256, 10, 128},
    {"gpt c_attn 128->384, 2048 rows", false, true, 2048, 384, 128},
    {"gpt c_fc 128->512", false, true, 2048, 512, 128},
    {"gpt c_proj 512->128", false, true, 2048, 128, 512},
    {"gpt c_proj weight gradient", true, false, 128, 512, 2048},
    {"gpt logits 128->256", false, true, 2048, 256, 128},
    {"attention scores 64x64, d 32", false, true, 64, 64, 32},
    {"attention P V 64x32, 64 keys", false, false, 64, 32, 64},
    {"attention dK 64x32", true, false, 64, 32, 64},
    {"llama gate 256->688", false, true, 2048, 688, 256},
    {"llama down 688->256", false, true, 2048, 256, 688},
    {"cnn head 3136->256", false, true, 256, 256, 3136},
};

double MicrosPerCall(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                     std::vector<float>& c) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  auto call = [&] {
    cpu::Sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
               c.data(), s.n);
  };
  const int64_t calls = std::max<int64_t>(1, 40000000 / (s.m * s.n * s.k));
  call();  // oneDNN generates its kernels on the first call
  double best = 1e30;
  for (int batch = 0; batch < 5; ++batch) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < calls; ++i) call();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - t0;
    best = std::min(best, took.count() / calls);
  }
  return best;
}

int Main() {
  cpu::SetBlasThreads(1);
  cpu::SetDnnlThreads(1);
  const cpu::BlasInfo info = cpu::DescribeBlas();
  std::printf("gemm_bench: one thread; us per call (GFLOP/s), best of 5 batches\n");
  std::printf("openblas: %s\nonednn:   %s\n", cpu::BlasSummary(info).c_str(),
              cpu::OneDnnSummary().c_str());
  std::printf("%-34s %20s %20s %8s\n", "product (m x n x k)", "openblas", "onednn",
              "speedup");
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float& x : a) x = u(gen);
    for (float& x : b) x = u(gen);
    double us[2];
    const cpu::GemmLibrary libs[2] = {cpu::GemmLibrary::kOpenBlas, cpu::GemmLibrary::kOneDnn};
    for (int i = 0; i < 2; ++i) {
      cpu::SetGemmLibrary(libs[i]);
      us[i] = MicrosPerCall(s, a, b, c);
    }
    const double gflop = 2e-3 * s.m * s.n * s.k;  // per microsecond: GFLOP/s
    std::printf("%-34s %10.1f (%6.1f) %10.1f (%6.1f) %7.2fx\n", s.name, us[0], gflop / us[0],
                us[1], gflop / us[1], us[0] / us[1]);
  }
  return 0;
}

}  // namespace
}  // namespace trainc

int main() { return trainc::Main(); }
