// The entry point of the CUDA plugin, libtrainc_cuda.so: the CUDA backend
// (CudaDevice, its kernels, cuBLAS/cuDNN) and the NCCL communicator, built
// as one shared object so that only processes that use a GPU load the CUDA
// libraries. runtime/cuda/cuda_loader.h finds and dlopen()s it.
//
// The entry point is C (extern "C", versioned by name and by `abi_version`)
// but the table holds C++ function pointers: Device, Communicator,
// absl::Status and std::string cross the boundary. So the plugin and the
// program that loads it must be built from the same sources by the same
// toolchain against the same (shared) Abseil and libstdc++ -- one Bazel
// build. `toolchain` records the compiler; the loader refuses a plugin
// built by another one.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_PLUGIN_ABI_H_
#define TRAINC_RUNTIME_CUDA_CUDA_PLUGIN_ABI_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"

// Bump when the table below changes in any way (and rename the symbol).
#define TRAINC_CUDA_PLUGIN_ABI_VERSION 2
#define TRAINC_CUDA_PLUGIN_SYMBOL "trainc_cuda_plugin_v2"

#define TRAINC_CUDA_PLUGIN_STR2(x) #x
#define TRAINC_CUDA_PLUGIN_STR(x) TRAINC_CUDA_PLUGIN_STR2(x)
// What both sides must agree on beyond the table's layout.
#define TRAINC_CUDA_PLUGIN_TOOLCHAIN \
  "cc " __VERSION__ ", cxx11abi " TRAINC_CUDA_PLUGIN_STR(_GLIBCXX_USE_CXX11_ABI)

namespace trainc {

struct CudaPluginV2 {
  int abi_version;        // TRAINC_CUDA_PLUGIN_ABI_VERSION
  const char* toolchain;  // TRAINC_CUDA_PLUGIN_TOOLCHAIN as the plugin saw it
  bool built_with_cuda;   // false: the no-toolkit stand-ins (cuda.bzl)

  // runtime/cuda/cuda_device.h.
  int (*device_count)();
  std::string (*unavailable_reason)();
  absl::StatusOr<std::unique_ptr<Device>> (*create_device)(int local_rank);
  absl::StatusOr<int64_t> (*workspace_bytes)(const Plan& plan,
                                             const Instruction& instr);
  absl::StatusOr<int64_t> (*bf16_staging_bytes)(const Plan& plan);

  // runtime/comm/nccl/nccl_communicator.h.
  absl::StatusOr<std::string> (*new_nccl_unique_id)();
  absl::StatusOr<std::unique_ptr<Communicator>> (*create_nccl)(
      int rank, int world_size, int local_rank, const std::string& unique_id);
  absl::StatusOr<std::unique_ptr<Communicator>> (*create_nccl_bootstrap)(
      int rank, int world_size, int local_rank, Communicator& bootstrap);
};

}  // namespace trainc

// Exported by libtrainc_cuda.so (its only exported symbol); never null.
extern "C" const trainc::CudaPluginV2* trainc_cuda_plugin_v2();

#endif  // TRAINC_RUNTIME_CUDA_CUDA_PLUGIN_ABI_H_
