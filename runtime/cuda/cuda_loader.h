// Finds and loads the CUDA plugin (libtrainc_cuda.so, cuda_plugin_abi.h) on
// first use, so that a program links no CUDA library and loads them only
// when it asks for a GPU. The functions of cuda_device.h and
// nccl_communicator.h forward through it; most code never calls it.
//
// Where the plugin is looked for, first found wins:
//   1. $TRAINC_CUDA_PLUGIN (a path; when set, the only place looked at);
//   2. the Bazel runfiles of the program: $RUNFILES_DIR, $TEST_SRCDIR,
//      <exe>.runfiles (then trainc/runtime/cuda/libtrainc_cuda.so);
//   3. next to the executable (an installed layout);
//   4. the bazel-bin tree the executable sits in (bazel-bin/tools/train
//      finds bazel-bin/runtime/cuda/libtrainc_cuda.so).
// <exe> is /proc/self/exe. Errors name where it looked, dlopen's message
// (e.g. a missing libcudnn.so.9), a missing entry point, or an ABI or
// toolchain mismatch.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_LOADER_H_
#define TRAINC_RUNTIME_CUDA_CUDA_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_plugin_abi.h"

namespace trainc {

// The plugin, loaded by the first call (thread-safe); later calls return
// the same table, or the same error.
absl::StatusOr<const CudaPluginV2*> CudaPlugin();

// Searches and loads afresh (honours $TRAINC_CUDA_PLUGIN as it is now).
// The shared object stays loaded. For tests and diagnostics.
absl::StatusOr<const CudaPluginV2*> LoadCudaPlugin();

// dlopen()s the plugin at `path` and checks its entry point and ABI.
absl::StatusOr<const CudaPluginV2*> LoadCudaPluginFrom(const std::string& path);

// The paths LoadCudaPlugin() tries, in order (steps 2-4 above).
std::vector<std::string> CudaPluginSearchPath();

// Whether the NVIDIA driver (libcuda.so.1) can be loaded, without loading
// the plugin: FailedPrecondition with dlopen's message when it cannot.
absl::Status CudaDriverPresent();

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_CUDA_LOADER_H_
