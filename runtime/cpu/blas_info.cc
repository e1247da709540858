#include "runtime/cpu/blas_info.h"

#include <cblas.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace trainc {
namespace cpu {

CpuIsa DetectCpuIsa() {
  CpuIsa isa;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  isa.avx2 = __builtin_cpu_supports("avx2");
  isa.avx512f = __builtin_cpu_supports("avx512f");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (isa.avx512f && __get_cpuid_count(7, 1, &a, &b, &c, &d)) isa.avx512_bf16 = (a >> 5) & 1;
  // CPUID.7.0:EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) isa.amx = ((d >> 22) & 1) && ((d >> 24) & 1);
#endif
  return isa;
}

IsaLevel LevelOf(const CpuIsa& isa) {
  if (isa.avx512f) return IsaLevel::kAvx512;
  if (isa.avx2) return IsaLevel::kAvx2;
  return IsaLevel::kSse;
}

std::string IsaName(const CpuIsa& isa) {
  std::vector<std::string> parts = {isa.avx512f ? "AVX-512" : isa.avx2 ? "AVX2" : "SSE"};
  if (isa.avx512_bf16) parts.push_back("avx512_bf16");
  if (isa.amx) parts.push_back("AMX");
  return absl::StrJoin(parts, ", ");
}

IsaLevel CoreLevel(absl::string_view core) {
  // OpenBLAS's x86 DYNAMIC_ARCH core names (driver/others/dynamic.c).
  static const struct {
    const char* name;
    IsaLevel level;
  } kCores[] = {
      {"katmai", IsaLevel::kSse},        {"coppermine", IsaLevel::kSse},
      {"northwood", IsaLevel::kSse},     {"prescott", IsaLevel::kSse},
      {"banias", IsaLevel::kSse},        {"atom", IsaLevel::kSse},
      {"core2", IsaLevel::kSse},         {"penryn", IsaLevel::kSse},
      {"dunnington", IsaLevel::kSse},    {"nehalem", IsaLevel::kSse},
      {"athlon", IsaLevel::kSse},        {"opteron", IsaLevel::kSse},
      {"opteron_sse3", IsaLevel::kSse},  {"barcelona", IsaLevel::kSse},
      {"nano", IsaLevel::kSse},          {"bobcat", IsaLevel::kSse},
      {"sandybridge", IsaLevel::kAvx},   {"bulldozer", IsaLevel::kAvx},
      {"piledriver", IsaLevel::kAvx},    {"steamroller", IsaLevel::kAvx},
      {"haswell", IsaLevel::kAvx2},      {"excavator", IsaLevel::kAvx2},
      {"zen", IsaLevel::kAvx2},          {"skylakex", IsaLevel::kAvx512},
      {"cooperlake", IsaLevel::kAvx512}, {"sapphirerapids", IsaLevel::kAvx512},
  };
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(core));
  for (const auto& c : kCores) {
    if (lower == c.name) return c.level;
  }
  return IsaLevel::kUnknown;
}

bool IsFallbackCore(absl::string_view core, const CpuIsa& isa) {
  const IsaLevel level = CoreLevel(core);
  return level != IsaLevel::kUnknown && level < IsaLevel::kAvx2 &&
         LevelOf(isa) >= IsaLevel::kAvx2;
}

BlasInfo DescribeBlas() {
  BlasInfo info;
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
  const std::vector<absl::string_view> words =
      absl::StrSplit(openblas_get_config(), ' ', absl::SkipEmpty());
  info.library = words.size() >= 2 ? absl::StrCat(words[0], " ", words[1]) : "OpenBLAS";
  info.core = openblas_get_corename();
  info.isa = DetectCpuIsa();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  info.core_from_env = env != nullptr;  // even empty: OpenBLAS acts on it
  info.fallback = IsFallbackCore(info.core, info.isa);
  return info;
}

std::string BlasSummary(const BlasInfo& info) {
  return absl::StrCat(info.library, ", ", info.core, " kernels (CPU: ", IsaName(info.isa), ")",
                      info.core_from_env ? "; OPENBLAS_CORETYPE set by the environment" : "");
}

std::string BlasFallbackWarning(const BlasInfo& info) {
  if (!info.fallback || info.core_from_env) return "";
  const bool avx512 = LevelOf(info.isa) == IsaLevel::kAvx512;
  return absl::StrCat(
      "warning: OpenBLAS does not know this CPU and runs its ", info.core, " kernels on an ",
      avx512 ? "AVX-512" : "AVX2", " CPU (3-6x slower matrix products); set OPENBLAS_CORETYPE=",
      avx512 ? "SkylakeX (AVX-512) or Haswell (AVX2)" : "Haswell (AVX2)");
}

}  // namespace cpu
}  // namespace trainc
