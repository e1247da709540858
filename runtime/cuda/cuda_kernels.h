// The CUDA backend's kernel table, for its tests: which kernel ops
// (runtime/device/kernel_ops.h) it runs. The table itself lives in
// cuda_kernels.cc.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_
#define TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_

#include <vector>

#include "runtime/device/kernel_args.h"
#include "runtime/device/kernel_ops.h"

namespace trainc::cuda {

// False when built without the CUDA toolkit (there is no table then).
bool KernelTableBuilt();

// Whether the CUDA backend has a kernel for `op`.
bool HasKernel(KernelOp op);

// precision = bf16: which of a resolved instruction's bf16 operands
// (KernelArgs::bf16, in order; `args` as ResolveKernels gives it) the
// CUDA kernels read and write as bf16 themselves, the rest being widened
// into f32 staging around the kernel. Host-side rules: no GPU needed.
std::vector<bool> NativeBf16Operands(const KernelArgs& args);

// Whether attention runs the tensor-core kernels (attention_mma.cu) on
// these sizes in this process's environment (kernels.h says when).
bool AttentionUsesMma(const attention::Geometry& g, bool bf16);

}  // namespace trainc::cuda

#endif  // TRAINC_RUNTIME_CUDA_CUDA_KERNELS_H_
