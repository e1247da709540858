#include "tools/bench/gemm_peak.h"

#include <algorithm>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

#define PEAK_CHECK(expr, ok_value)                                     \
  do {                                                                 \
    auto peak_err_ = (expr);                                           \
    if (peak_err_ != (ok_value)) {                                     \
      status = absl::InternalError(absl::StrCat(#expr, " failed: ",    \
                                                static_cast<int>(peak_err_))); \
      goto done;                                                       \
    }                                                                  \
  } while (0)

}  // namespace

absl::StatusOr<GpuFacts> QueryGpu() {
  cudaDeviceProp props;
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
    return absl::UnavailableError("cudaGetDeviceProperties(0) failed");
  }
  GpuFacts facts;
  facts.name = props.name;
  size_t free = 0, total = 0;
  if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    return absl::UnavailableError("cudaMemGetInfo failed");
  }
  facts.total_bytes = static_cast<int64_t>(total);
  facts.free_bytes = static_cast<int64_t>(free);
  return facts;
}

absl::StatusOr<double> MeasureGemmTflops(int n, bool tf32) {
  absl::Status status;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  const size_t bytes = static_cast<size_t>(n) * n * sizeof(float);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasComputeType_t compute =
      tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  float best_ms = 1e30f;
  PEAK_CHECK(cudaSetDevice(0), cudaSuccess);
  PEAK_CHECK(cudaMalloc(&a, bytes), cudaSuccess);
  PEAK_CHECK(cudaMalloc(&b, bytes), cudaSuccess);
  PEAK_CHECK(cudaMalloc(&c, bytes), cudaSuccess);
  // Values do not change the rate; zeros avoid denormal corner cases.
  PEAK_CHECK(cudaMemset(a, 0, bytes), cudaSuccess);
  PEAK_CHECK(cudaMemset(b, 0, bytes), cudaSuccess);
  PEAK_CHECK(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  PEAK_CHECK(cudaEventCreate(&start), cudaSuccess);
  PEAK_CHECK(cudaEventCreate(&stop), cudaSuccess);
  for (int rep = 0; rep < 8; ++rep) {  // rep 0 warms up
    PEAK_CHECK(cudaEventRecord(start, nullptr), cudaSuccess);
    for (int i = 0; i < 5; ++i) {
      PEAK_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
                              &alpha, a, CUDA_R_32F, n, b, CUDA_R_32F, n,
                              &beta, c, CUDA_R_32F, n, compute,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    }
    PEAK_CHECK(cudaEventRecord(stop, nullptr), cudaSuccess);
    PEAK_CHECK(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0;
    PEAK_CHECK(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
    if (rep > 0) best_ms = std::min(best_ms, ms / 5);
  }
done:
  if (stop) cudaEventDestroy(stop);
  if (start) cudaEventDestroy(start);
  if (handle) cublasDestroy(handle);
  cudaFree(c);
  cudaFree(b);
  cudaFree(a);
  if (!status.ok()) return status;
  return 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e-3) / 1e12;
}

}  // namespace trainc
