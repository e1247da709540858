// A "plugin" of a future ABI version (for cuda_loader_test).
#include "runtime/cuda/cuda_plugin_abi.h"

namespace {
trainc::CudaPluginV2 MakeFuturePlugin() {
  trainc::CudaPluginV2 plugin{};
  plugin.abi_version = TRAINC_CUDA_PLUGIN_ABI_VERSION + 998;
  plugin.toolchain = TRAINC_CUDA_PLUGIN_TOOLCHAIN;
  return plugin;
}
const trainc::CudaPluginV2 kFuture = MakeFuturePlugin();
}  // namespace

extern "C" const trainc::CudaPluginV2* trainc_cuda_plugin_v2() { return &kFuture; }
