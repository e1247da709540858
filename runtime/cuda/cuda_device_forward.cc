// cuda_device.h for programs: every call goes through the CUDA plugin
// (cuda_loader.h), loaded on first use, so the program itself links no CUDA
// library. The backend proper is CudaDeviceImpl (cuda_device_impl.h),
// inside libtrainc_cuda.so.
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_loader.h"

namespace trainc {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asked once: the driver first (cheap, and without it the plugin could
// not see a GPU anyway), then the plugin.
const Probe& GetProbe() {
  static const Probe* const probe = [] {
    auto* p = new Probe;
    if (absl::Status driver = CudaDriverPresent(); !driver.ok()) {
      p->reason = std::string(driver.message());
      return p;
    }
    absl::StatusOr<const CudaPluginV2*> plugin = CudaPlugin();
    if (!plugin.ok()) {
      p->reason = std::string(plugin.status().message());
      return p;
    }
    p->count = (*plugin)->device_count();
    if (p->count == 0) p->reason = (*plugin)->unavailable_reason();
    return p;
  }();
  return *probe;
}

}  // namespace

int CudaDeviceCount() { return GetProbe().count; }

std::string CudaUnavailableReason() { return GetProbe().reason; }

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int local_rank) {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->create_device(local_rank);
}

absl::StatusOr<int64_t> CudaWorkspaceBytes(const Plan& plan, const Instruction& instr) {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->workspace_bytes(plan, instr);
}

absl::StatusOr<int64_t> CudaBf16StagingBytes(const Plan& plan) {
  ASSIGN_OR_RETURN(const CudaPluginV2* plugin, CudaPlugin());
  return plugin->bf16_staging_bytes(plan);
}

}  // namespace trainc
