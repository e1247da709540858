// absl::Status from CUDA runtime, cuBLAS and cuDNN errors (internal to the
// CUDA backend). Every runtime and library call goes through one of these,
// so a failure surfaces as a Status naming the call, never as a crash or
// exit().
//
//   CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));
//   CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(...));
#ifndef TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_
#define TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

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

// With cuDNN's own account of the failure (cuDNN 9 keeps the calling
// thread's last error message; a NOT_SUPPORTED says what it refused).
inline absl::Status CudnnErrorToStatus(cudnnStatus_t err, const char* expr,
                                       const char* file, int line) {
  std::string message = absl::StrCat(file, ":", line, ": ", expr, ": ",
                                     cudnnGetErrorString(err));
#if CUDNN_MAJOR >= 9
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') absl::StrAppend(&message, " (", detail, ")");
#endif
  return absl::InternalError(message);
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

#define CUDNN_RETURN_IF_ERROR(expr)                                         \
  do {                                                                      \
    const cudnnStatus_t trainc_cudnn_err_ = (expr);                         \
    if (trainc_cudnn_err_ != CUDNN_STATUS_SUCCESS) {                        \
      return ::trainc::cuda::CudnnErrorToStatus(trainc_cudnn_err_, #expr,   \
                                                __FILE__, __LINE__);        \
    }                                                                       \
  } while (0)

#endif  // TRAINC_RUNTIME_CUDA_CUDA_STATUS_H_
