#include "runtime/cpu/blas_info.h"

#include <string>

#include "gtest/gtest.h"

namespace trainc {
namespace cpu {
namespace {

CpuIsa Sse() { return {}; }
CpuIsa Avx2() { return {.avx2 = true}; }
CpuIsa Avx512() { return {.avx2 = true, .avx512f = true}; }
CpuIsa Amx() { return {.avx2 = true, .avx512f = true, .avx512_bf16 = true, .amx = true}; }

TEST(BlasInfoTest, CoreLevelsFollowOpenBlasNames) {
  for (const char* core : {"Prescott", "Core2", "Penryn", "Nehalem", "Atom", "Barcelona",
                           "Opteron_SSE3", "Bobcat", "Nano"}) {
    EXPECT_EQ(CoreLevel(core), IsaLevel::kSse) << core;
  }
  for (const char* core : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"}) {
    EXPECT_EQ(CoreLevel(core), IsaLevel::kAvx) << core;
  }
  for (const char* core : {"Haswell", "Zen", "Excavator"}) {
    EXPECT_EQ(CoreLevel(core), IsaLevel::kAvx2) << core;
  }
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    EXPECT_EQ(CoreLevel(core), IsaLevel::kAvx512) << core;
  }
  EXPECT_EQ(CoreLevel("skylakex"), IsaLevel::kAvx512);  // any case
  EXPECT_EQ(CoreLevel("ARMV8"), IsaLevel::kUnknown);
  EXPECT_EQ(CoreLevel("Unknown"), IsaLevel::kUnknown);
}

TEST(BlasInfoTest, SseAndAvxKernelsOnAvx2OrBetterAreFallbacks) {
  for (const CpuIsa& isa : {Avx2(), Avx512(), Amx()}) {
    EXPECT_TRUE(IsFallbackCore("Prescott", isa));
    EXPECT_TRUE(IsFallbackCore("Nehalem", isa));
    EXPECT_TRUE(IsFallbackCore("Sandybridge", isa));
    EXPECT_FALSE(IsFallbackCore("Haswell", isa));
    EXPECT_FALSE(IsFallbackCore("Zen", isa));
    EXPECT_FALSE(IsFallbackCore("ARMV8", isa));  // not in the table: no claim
  }
  EXPECT_FALSE(IsFallbackCore("SkylakeX", Avx512()));
  EXPECT_FALSE(IsFallbackCore("SapphireRapids", Amx()));
  // A CPU without AVX2 runs what it can.
  EXPECT_FALSE(IsFallbackCore("Prescott", Sse()));
  EXPECT_FALSE(IsFallbackCore("Sandybridge", Sse()));
}

TEST(BlasInfoTest, IsaNames) {
  EXPECT_EQ(IsaName(Sse()), "SSE");
  EXPECT_EQ(IsaName(Avx2()), "AVX2");
  EXPECT_EQ(IsaName(Avx512()), "AVX-512");
  EXPECT_EQ(IsaName(Amx()), "AVX-512, avx512_bf16, AMX");
}

BlasInfo Info(const char* core, const CpuIsa& isa, bool from_env) {
  BlasInfo info;
  info.library = "OpenBLAS 0.3.21";
  info.core = core;
  info.isa = isa;
  info.core_from_env = from_env;
  info.fallback = IsFallbackCore(core, isa);
  return info;
}

TEST(BlasInfoTest, SummaryNamesLibraryKernelsAndIsa) {
  EXPECT_EQ(BlasSummary(Info("Prescott", Avx512(), false)),
            "OpenBLAS 0.3.21, Prescott kernels (CPU: AVX-512)");
  EXPECT_EQ(BlasSummary(Info("Prescott", Avx512(), true)),
            "OpenBLAS 0.3.21, Prescott kernels (CPU: AVX-512); OPENBLAS_CORETYPE set by the "
            "environment");
}

TEST(BlasInfoTest, WarnsOfOpenBlassOwnFallbackWithWhatToSet) {
  EXPECT_EQ(BlasFallbackWarning(Info("Prescott", Amx(), false)),
            "warning: OpenBLAS does not know this CPU and runs its Prescott kernels on an "
            "AVX-512 CPU (3-6x slower matrix products); set OPENBLAS_CORETYPE=SkylakeX "
            "(AVX-512) or Haswell (AVX2)");
  EXPECT_EQ(BlasFallbackWarning(Info("Nehalem", Avx2(), false)),
            "warning: OpenBLAS does not know this CPU and runs its Nehalem kernels on an "
            "AVX2 CPU (3-6x slower matrix products); set OPENBLAS_CORETYPE=Haswell (AVX2)");
  // No fallback, or a core the environment pinned (respected): nothing to say.
  EXPECT_EQ(BlasFallbackWarning(Info("SkylakeX", Avx512(), false)), "");
  EXPECT_EQ(BlasFallbackWarning(Info("Prescott", Avx512(), true)), "");
}

TEST(BlasInfoTest, DescribesTheLinkedOpenBlas) {
  const BlasInfo info = DescribeBlas();
  EXPECT_EQ(info.library.rfind("OpenBLAS ", 0), 0u) << info.library;
  EXPECT_FALSE(info.core.empty());
}

}  // namespace
}  // namespace cpu
}  // namespace trainc
