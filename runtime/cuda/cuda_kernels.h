// The CUDA backend's kernel table, for its tests: which kernel ops
// (runtime/device/kernel_ops.h) it runs. The table itself lives in
// cuda_kernels.cc.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_
#define TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_

#include "runtime/device/kernel_ops.h"

namespace trainc::cuda {

// False when built without the CUDA toolkit (there is no table then).
bool KernelTableBuilt();

// Whether the CUDA backend has a kernel for `op`.
bool HasKernel(KernelOp op);

}  // namespace trainc::cuda

#endif  // TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_
