// absl::Status from CUDA runtime and cuBLAS errors (internal to the CUDA
// backend). Every runtime and library call goes through one of these, so a
// failure surfaces as a Status naming the call, never as a crash or exit().
//
//   CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));
#ifndef TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_
#define TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainc {
namespace cuda {

inline absl::Status CudaErrorToStatus(cudaError_t err, const char* expr,
                                      const char* file, int line) {
  // Out-of-memory is a resource problem the caller may act on (smaller
  // micro-batch); everything else is internal.
  const auto code = err == cudaErrorMemoryAllocation
                        ? absl::StatusCode::kResourceExhausted
                        : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", expr, ": ",
                                         cudaGetErrorName(err), " (",
                                         cudaGetErrorString(err), ")"));
}

inline absl::Status CublasErrorToStatus(cublasStatus_t err, const char* expr,
                                        const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ",
                                          cublasGetStatusString(err)));
}

}  // namespace cuda
}  // namespace trainc

#define CUDA_RETURN_IF_ERROR(expr)                                          \
  do {                                                                      \
    const cudaError_t trainc_cuda_err_ = (expr);                            \
    if (trainc_cuda_err_ != cudaSuccess) {                                  \
      return ::trainc::cuda::CudaErrorToStatus(trainc_cuda_err_, #expr,     \
                                               __FILE__, __LINE__);         \
    }                                                                       \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                                        \
  do {                                                                      \
    const cublasStatus_t trainc_cublas_err_ = (expr);                       \
    if (trainc_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                      \
      return ::trainc::cuda::CublasErrorToStatus(trainc_cublas_err_, #expr, \
                                                 __FILE__, __LINE__);       \
    }                                                                       \
  } while (0)

#endif  // TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_
