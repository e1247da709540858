#include "runtime/cpu/gemm.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {
namespace cpu {
namespace {

std::atomic<GemmLibrary> library_in_use{GemmLibrary::kOpenBlas};

const char* DnnlIsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown ISA";
  }
}

}  // namespace

absl::StatusOr<BlasChoice> BlasChoiceFromEnv() {
  const char* env = std::getenv("TRAINC_BLAS");
  if (env == nullptr || *env == '\0') return BlasChoice::kAuto;
  const std::optional<BlasChoice> choice = ParseEnum<BlasChoice>(env);
  if (!choice) {
    return absl::InvalidArgumentError(absl::StrCat("TRAINC_BLAS: expected ",
                                                   absl::StrJoin(EnumNames<BlasChoice>(), ", "),
                                                   "; got '", env, "'"));
  }
  return *choice;
}

absl::StatusOr<BlasChoice> WithBlasEnv(BlasChoice choice) {
  if (choice != BlasChoice::kAuto) return choice;
  return BlasChoiceFromEnv();
}

IsaLevel OneDnnLevel() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return IsaLevel::kSse;
    case dnnl_cpu_isa_avx: return IsaLevel::kAvx;
    case dnnl_cpu_isa_avx2:
    case dnnl_cpu_isa_avx2_vnni: return IsaLevel::kAvx2;
    case dnnl_cpu_isa_avx512_core:
    case dnnl_cpu_isa_avx512_core_vnni:
    case dnnl_cpu_isa_avx512_core_bf16:
    case dnnl_cpu_isa_avx512_core_amx: return IsaLevel::kAvx512;
    default: return IsaLevel::kUnknown;  // Xeon Phi's avx512_mic, or none
  }
}

GemmLibrary ResolveBlas(BlasChoice choice, const BlasInfo& info, IsaLevel onednn) {
  switch (choice) {
    case BlasChoice::kOpenBlas: return GemmLibrary::kOpenBlas;
    case BlasChoice::kOneDnn: return GemmLibrary::kOneDnn;
    case BlasChoice::kAuto: break;
  }
  if (info.fallback) return GemmLibrary::kOneDnn;
  // A core pinned by hand (OPENBLAS_CORETYPE) that is not a fallback: the
  // user chose OpenBLAS's kernels, for speed or for its results.
  if (info.core_from_env) return GemmLibrary::kOpenBlas;
  return onednn == IsaLevel::kAvx512 ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas;
}

void SetGemmLibrary(GemmLibrary library) { library_in_use.store(library); }

GemmLibrary GemmLibraryInUse() { return library_in_use.load(); }

std::string OneDnnSummary() {
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch, ", ",
                      DnnlIsaName(dnnl_get_effective_cpu_isa()), " kernels");
}

std::string GemmSummary(GemmLibrary library, BlasChoice choice, const BlasInfo& info) {
  if (library == GemmLibrary::kOpenBlas) return BlasSummary(info);
  const std::string why =
      choice != BlasChoice::kAuto ? "asked for (--blas or TRAINC_BLAS)"
      : info.fallback
          ? absl::StrCat("auto: ", info.library, " would run its ", info.core, " kernels",
                         info.core_from_env ? " (OPENBLAS_CORETYPE set by the environment)" : "",
                         ", a fallback")
          : "auto: AVX-512 kernels (--blas openblas for OpenBLAS's)";
  return absl::StrCat(OneDnnSummary(), " (CPU: ", IsaName(info.isa), "); ", why);
}

std::string GemmWarning(GemmLibrary library, const BlasInfo& info) {
  const std::string warning = BlasFallbackWarning(info);
  if (library != GemmLibrary::kOpenBlas || warning.empty()) return "";
  return absl::StrCat(warning, ", or leave the matrix products to oneDNN (--blas auto or onednn)");
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (library_in_use.load(std::memory_order_relaxed) == GemmLibrary::kOneDnn &&
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
                 c, ldc) == dnnl_success) {
    return;
  }
  // OpenBLAS, and oneDNN's refusals (none for the arguments the kernels pass;
  // both libraries accept the same ones): the product is computed either way.
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cpu
}  // namespace trainc
