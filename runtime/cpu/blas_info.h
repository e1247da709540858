// What runs the CPU backend's matrix products: the BLAS library, the kernel
// set it picked, and the instruction set the CPU offers.
//
// Distribution OpenBLAS builds pick kernels from a table of CPU models; on a
// model newer than the build (Debian's 0.3.21 on a recent Xeon) they fall
// back to their Prescott (SSE3) kernels, 3 to 6 times slower, and say
// nothing. DescribeBlas names what runs so `train` and `cpu_bench` can say it,
// and IsFallbackCore decides whether it is such a fallback.
#ifndef TRAINC_RUNTIME_CPU_BLAS_INFO_H_
#define TRAINC_RUNTIME_CPU_BLAS_INFO_H_

#include <string>

#include "absl/strings/string_view.h"

namespace trainc {
namespace cpu {

// Instruction-set levels, in order: an OpenBLAS kernel set targets one, a CPU
// offers up to one.
enum class IsaLevel { kUnknown, kSse, kAvx, kAvx2, kAvx512 };

// The vector instruction sets this CPU (and its OS) supports.
struct CpuIsa {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;
  bool amx = false;  // AMX tiles with bf16
};

CpuIsa DetectCpuIsa();
IsaLevel LevelOf(const CpuIsa& isa);
// "AVX-512, avx512_bf16, AMX", "AVX2", "SSE".
std::string IsaName(const CpuIsa& isa);

// The level an OpenBLAS core name ("Prescott", "Haswell", "SkylakeX", ...,
// case-insensitive) targets; kUnknown for a name not in the table.
IsaLevel CoreLevel(absl::string_view core);

// True when `core` runs far below the CPU: an SSE/AVX-era kernel set on a CPU
// with AVX2 or AVX-512 (no FMA, half or a quarter of the vector width). An
// AVX2 set on an AVX-512 CPU is not a fallback (OpenBLAS picks Zen/Haswell
// kernels for AMD's AVX-512 CPUs on purpose); an unknown name is not either.
bool IsFallbackCore(absl::string_view core, const CpuIsa& isa);

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string core;     // "SkylakeX": the kernel set it runs
  CpuIsa isa;
  bool core_from_env = false;  // OPENBLAS_CORETYPE was set in the environment
  bool fallback = false;       // IsFallbackCore(core, isa)
};

// Asks the linked OpenBLAS and the CPU.
BlasInfo DescribeBlas();

// "OpenBLAS 0.3.21, SkylakeX kernels (CPU: AVX-512)", plus
// "; OPENBLAS_CORETYPE set by the environment" when it was.
std::string BlasSummary(const BlasInfo& info);

// The warning for a fallback OpenBLAS did on its own, with the
// OPENBLAS_CORETYPE values to set; empty when there is nothing to warn of
// (no fallback, or OPENBLAS_CORETYPE set by the environment: it is respected).
std::string BlasFallbackWarning(const BlasInfo& info);

}  // namespace cpu
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CPU_BLAS_INFO_H_
