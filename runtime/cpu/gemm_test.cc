#include "runtime/cpu/gemm.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace cpu {
namespace {

BlasInfo Info(const char* core, bool from_env) {
  BlasInfo info;
  info.library = "OpenBLAS 0.3.21";
  info.core = core;
  info.isa = {.avx2 = true, .avx512f = true, .avx512_bf16 = true, .amx = true};
  info.core_from_env = from_env;
  info.fallback = IsFallbackCore(core, info.isa);
  return info;
}

// Restores the library in use when a test ends.
class GemmTest : public ::testing::Test {
 protected:
  ~GemmTest() override { SetGemmLibrary(GemmLibrary::kOpenBlas); }
};

TEST_F(GemmTest, AutoRunsOneDnnOnAvx512OrOverAFallbackOpenBlas) {
  for (bool env : {false, true}) {
    // OPENBLAS_CORETYPE=Prescott is kept for OpenBLAS; auto does not use it.
    for (IsaLevel onednn : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
      EXPECT_EQ(ResolveBlas(BlasChoice::kAuto, Info("Prescott", env), onednn),
                GemmLibrary::kOneDnn);
    }
    // OpenBLAS's own kernels: oneDNN only where its kernels are AVX-512
    // ones (not under ONEDNN_MAX_CPU_ISA=AVX2).
    EXPECT_EQ(ResolveBlas(BlasChoice::kAuto, Info("SkylakeX", env), IsaLevel::kAvx2),
              GemmLibrary::kOpenBlas);
    EXPECT_EQ(ResolveBlas(BlasChoice::kAuto, Info("Haswell", env), IsaLevel::kAvx2),
              GemmLibrary::kOpenBlas);
    // A core pinned by OPENBLAS_CORETYPE that is not a fallback is kept.
    EXPECT_EQ(ResolveBlas(BlasChoice::kAuto, Info("SkylakeX", env), IsaLevel::kAvx512),
              env ? GemmLibrary::kOpenBlas : GemmLibrary::kOneDnn);
  }
  EXPECT_EQ(ResolveBlas(BlasChoice::kOpenBlas, Info("Prescott", false)), GemmLibrary::kOpenBlas);
  EXPECT_EQ(ResolveBlas(BlasChoice::kOpenBlas, Info("SkylakeX", false), IsaLevel::kAvx512),
            GemmLibrary::kOpenBlas);
  EXPECT_EQ(ResolveBlas(BlasChoice::kOneDnn, Info("SkylakeX", false)), GemmLibrary::kOneDnn);
}

TEST_F(GemmTest, TrainBlasEnvironmentVariable) {
  unsetenv("TRAINC_BLAS");
  EXPECT_EQ(*BlasChoiceFromEnv(), BlasChoice::kAuto);
  setenv("TRAINC_BLAS", "onednn", 1);
  EXPECT_EQ(*BlasChoiceFromEnv(), BlasChoice::kOneDnn);
  setenv("TRAINC_BLAS", "openblas", 1);
  EXPECT_EQ(*BlasChoiceFromEnv(), BlasChoice::kOpenBlas);
  setenv("TRAINC_BLAS", "mkl", 1);
  const absl::StatusOr<BlasChoice> bad = BlasChoiceFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "TRAINC_BLAS: expected auto, openblas, onednn; got 'mkl'");
  unsetenv("TRAINC_BLAS");
}

TEST_F(GemmTest, SummarySaysWhichLibraryAndWhy) {
  const BlasInfo prescott = Info("Prescott", false);
  EXPECT_EQ(GemmSummary(GemmLibrary::kOpenBlas, BlasChoice::kOpenBlas, prescott),
            BlasSummary(prescott));
  const std::string cpu = " (CPU: AVX-512, avx512_bf16, AMX); ";
  EXPECT_EQ(GemmSummary(GemmLibrary::kOneDnn, BlasChoice::kAuto, prescott),
            OneDnnSummary() + cpu +
                "auto: OpenBLAS 0.3.21 would run its Prescott kernels, a fallback");
  EXPECT_EQ(GemmSummary(GemmLibrary::kOneDnn, BlasChoice::kAuto, Info("Prescott", true)),
            OneDnnSummary() + cpu +
                "auto: OpenBLAS 0.3.21 would run its Prescott kernels (OPENBLAS_CORETYPE set by "
                "the environment), a fallback");
  EXPECT_EQ(GemmSummary(GemmLibrary::kOneDnn, BlasChoice::kOneDnn, Info("SkylakeX", false)),
            OneDnnSummary() + cpu + "asked for (--blas or TRAINC_BLAS)");
  EXPECT_EQ(GemmSummary(GemmLibrary::kOneDnn, BlasChoice::kAuto, Info("SkylakeX", false)),
            OneDnnSummary() + cpu + "auto: AVX-512 kernels (--blas openblas for OpenBLAS's)");
  EXPECT_EQ(OneDnnSummary().rfind("oneDNN ", 0), 0u) << OneDnnSummary();
  EXPECT_NE(OneDnnSummary().find(" kernels"), std::string::npos) << OneDnnSummary();
}

TEST_F(GemmTest, WarnsOnlyWhenAFallbackOpenBlasRuns) {
  EXPECT_EQ(GemmWarning(GemmLibrary::kOpenBlas, Info("Prescott", false)),
            BlasFallbackWarning(Info("Prescott", false)) +
                ", or leave the matrix products to oneDNN (--blas auto or onednn)");
  EXPECT_EQ(GemmWarning(GemmLibrary::kOneDnn, Info("Prescott", false)), "");
  EXPECT_EQ(GemmWarning(GemmLibrary::kOpenBlas, Info("Prescott", true)), "");
  EXPECT_EQ(GemmWarning(GemmLibrary::kOpenBlas, Info("SkylakeX", false)), "");
}

std::vector<float> Random(int64_t n, int seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// Row-major op(A)[m,k] op(B)[k,n] in double, plus beta C.
std::vector<double> Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const std::vector<float>& a, const std::vector<float>& b,
                              float beta, const std::vector<float>& c) {
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = beta * static_cast<double>(c[i * n + j]);
      for (int64_t p = 0; p < k; ++p) {
        s += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
             (tb ? b[j * k + p] : b[p * n + j]);
      }
      out[i * n + j] = s;
    }
  }
  return out;
}

TEST_F(GemmTest, BothLibrariesComputeEveryTransposition) {
  const int64_t m = 37, n = 70, k = 129;
  const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2), c0 = Random(m * n, 3);
  for (GemmLibrary lib : {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn}) {
    SetGemmLibrary(lib);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> c = c0;
        Sgemm(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, beta, c.data(),
              n);
        const std::vector<double> want = Reference(ta, tb, m, n, k, a, b, beta, c0);
        for (int64_t i = 0; i < m * n; ++i) {
          // 0.5 * want's product part is what alpha scales; both are O(10).
          const double expected = want[i] - 0.5 * (want[i] - beta * c0[i]);
          ASSERT_NEAR(c[i], expected, 1e-4)
              << "library " << static_cast<int>(lib) << " ta " << ta << " tb " << tb;
        }
      }
    }
  }
}

// C = A[m,k] B[k,n]^T, from operands copied to `shift` floats past an
// aligned start: arena offsets differ between a plan's splits.
std::vector<float> ShiftedProduct(int shift, int64_t m, int64_t n, int64_t k,
                                  const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> ab(shift + a.size()), bb(shift + b.size()), cb(shift + m * n);
  std::memcpy(ab.data() + shift, a.data(), a.size() * sizeof(float));
  std::memcpy(bb.data() + shift, b.data(), b.size() * sizeof(float));
  Sgemm(false, true, m, n, k, 1.0f, ab.data() + shift, k, bb.data() + shift, k, 0.0f,
        cb.data() + shift, n);
  return std::vector<float>(cb.begin() + shift, cb.end());
}

TEST_F(GemmTest, SameBitsWhereverTheOperandsLie) {
  const int64_t m = 64, n = 96, k = 784;
  const std::vector<float> a = Random(m * k, 4), b = Random(n * k, 5);
  std::vector<std::vector<float>> by_library;
  for (GemmLibrary lib : {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn}) {
    SetGemmLibrary(lib);
    const std::vector<float> first = ShiftedProduct(0, m, n, k, a, b);
    for (int shift : {0, 1, 3, 16}) {
      const std::vector<float> again = ShiftedProduct(shift, m, n, k, a, b);
      ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << "library " << static_cast<int>(lib) << " shift " << shift;
    }
    by_library.push_back(first);
  }
  // The switch is real: two libraries do not sum 784 terms in the same
  // order everywhere.
  EXPECT_NE(std::memcmp(by_library[0].data(), by_library[1].data(),
                        by_library[0].size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace cpu
}  // namespace trainc
