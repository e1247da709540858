// The CPU backend's matrix products: one entry point, Sgemm, that runs
// either OpenBLAS's cblas_sgemm or oneDNN's dnnl_sgemm, chosen once per
// process (--blas on `train` and `cpu_bench`).
//
// OpenBLAS picks its kernels from a table of CPU models and falls back to
// SSE-era ones on a model newer than its build (blas_info.h); oneDNN picks
// them from the instruction set the CPU reports. `auto` runs oneDNN where
// its kernels are AVX-512 ones (on trainc's models it beat OpenBLAS's
// SkylakeX kernels: docs/numbers.md) or where OpenBLAS's kernels are such a
// fallback, and OpenBLAS elsewhere (AVX2 and older, where neither won
// throughout, or under ONEDNN_MAX_CPU_ISA=AVX2). The two libraries round
// differently: --blas openblas keeps the results OpenBLAS gave.
// An OPENBLAS_CORETYPE set in the environment is never overridden: OpenBLAS
// runs that core wherever OpenBLAS runs, and `auto` runs OpenBLAS when that
// core is not a fallback (whoever pinned it chose OpenBLAS's kernels).
//
// Both are bitwise reproducible from call to call for a given shape, thread
// count and ISA, which is what deterministic mode needs (every split runs
// the same micro-batch shapes).
#ifndef TRAINC_RUNTIME_CPU_GEMM_H_
#define TRAINC_RUNTIME_CPU_GEMM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/plan/settings.h"
#include "runtime/cpu/blas_info.h"

namespace trainc {
namespace cpu {

// --blas: what the user asked for.
enum class BlasChoice { kAuto, kOpenBlas, kOneDnn };
// What runs.
enum class GemmLibrary { kOpenBlas, kOneDnn };

}  // namespace cpu

template <>
struct EnumTable<cpu::BlasChoice> {
  static constexpr EnumNameEntry<cpu::BlasChoice> kEntries[] = {
      {cpu::BlasChoice::kAuto, "auto"},
      {cpu::BlasChoice::kOpenBlas, "openblas"},
      {cpu::BlasChoice::kOneDnn, "onednn"}};
};

namespace cpu {

// TRAINC_BLAS (auto, openblas or onednn; unset or empty: auto): what --blas
// auto means, how a whole test suite is run on one library. An error names
// the variable and the values it takes.
absl::StatusOr<BlasChoice> BlasChoiceFromEnv();
// `choice`, or for kAuto BlasChoiceFromEnv().
absl::StatusOr<BlasChoice> WithBlasEnv(BlasChoice choice);

// The instruction set of the kernels oneDNN runs here: the CPU's, or less
// under ONEDNN_MAX_CPU_ISA.
IsaLevel OneDnnLevel();

// The library `choice` runs on this machine: kAuto is oneDNN when `onednn`
// is kAvx512 or when `info.fallback` (OpenBLAS's kernels, whoever chose
// them, are far below the CPU's instruction set), else OpenBLAS.
GemmLibrary ResolveBlas(BlasChoice choice, const BlasInfo& info,
                        IsaLevel onednn = OneDnnLevel());

// Process-wide, like OpenBLAS's and OpenMP's thread counts (CpuDevice sets
// it). OpenBLAS until set.
void SetGemmLibrary(GemmLibrary library);
GemmLibrary GemmLibraryInUse();

// oneDNN's version and the instruction set its kernels use:
// "oneDNN 2.6.3, avx512_core_amx kernels".
std::string OneDnnSummary();

// What runs the matrix products, for the run summary and cpu_bench:
// BlasSummary(info) for OpenBLAS; for oneDNN, OneDnnSummary() with the CPU
// and why (auto over a fallback OpenBLAS or on AVX-512, or asked for).
std::string GemmSummary(GemmLibrary library, BlasChoice choice, const BlasInfo& info);

// The warning to print at start, empty when nothing slow runs: OpenBLAS
// running a fallback it chose itself (BlasFallbackWarning, plus --blas).
std::string GemmWarning(GemmLibrary library, const BlasInfo& info);

// Row-major C[m,n] = alpha op(A) op(B) + beta C, op(X) = X or X^T, on the
// library in use. lda, ldb and ldc are row strides, as cblas_sgemm's.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

}  // namespace cpu
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CPU_GEMM_H_
