#include "tools/bench/gemm_peak.h"

namespace trainc {

absl::StatusOr<GpuFacts> QueryGpu() {
  return absl::UnavailableError("built without the CUDA toolkit");
}

absl::StatusOr<double> MeasureGemmTflops(int, bool) {
  return absl::UnavailableError("built without the CUDA toolkit");
}

}  // namespace trainc
