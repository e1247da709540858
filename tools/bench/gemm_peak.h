// The achievable matrix-product rate of GPU 0, measured with cuBLAS: the
// denominator of gpu_bench's "percent of peak".
#ifndef TRAINC_TOOLS_BENCH_GEMM_PEAK_H_
#define TRAINC_TOOLS_BENCH_GEMM_PEAK_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace trainc {

// GPU 0's name (cudaGetDeviceProperties) and memory (cudaMemGetInfo).
struct GpuFacts {
  std::string name;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};
absl::StatusOr<GpuFacts> QueryGpu();

// TFLOP/s of a square n x n x n cublasGemmEx (fp32 in/out; TF32 tensor
// cores when `tf32`), best of several timed runs.
absl::StatusOr<double> MeasureGemmTflops(int n, bool tf32);

}  // namespace trainc

#endif  // TRAINC_TOOLS_BENCH_GEMM_PEAK_H_
