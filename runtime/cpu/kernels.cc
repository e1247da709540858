#include "runtime/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/store.h"
#include "runtime/device/bf16.h"


namespace trainc {
namespace cpu {

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }

void LinearForward(const float* x, const float* w, const float* b, int64_t rows,
                   int64_t in, int64_t out, float* y, Activation act, float* act_out) {
  Sgemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  LinearEpilogue(b, rows, out, y, act, act_out);
}

// One pass over y adds the bias and applies a fused activation (into
// act_out, or over y itself), element by element as the activation's own
// kernel would.
TRAINC_SIMD_CLONES
void LinearEpilogue(const float* b, int64_t rows, int64_t out, float* y, Activation act,
                    float* act_out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * out;
    float* ar = act_out ? act_out + r * out : yr;
    if (b != nullptr) {
      for (int64_t j = 0; j < out; ++j) yr[j] += b[j];
    }
    switch (act) {
      case Activation::kNone:
        break;
      case Activation::kRelu:
        for (int64_t j = 0; j < out; ++j) ar[j] = pointwise::Relu::F(yr[j]);
        break;
      case Activation::kGelu:
        for (int64_t j = 0; j < out; ++j) ar[j] = pointwise::Gelu::F(yr[j]);
        break;
      case Activation::kTanh:
        for (int64_t j = 0; j < out; ++j) ar[j] = pointwise::Tanh::F(yr[j]);
        break;
    }
  }
}

void LinearGradInput(const float* dy, const float* w, int64_t rows, int64_t in,
                     int64_t out, bool accumulate, float* dx) {
  Sgemm(false, false, rows, in, out, 1.0f, dy, out, w, in, accumulate ? 1.0f : 0.0f, dx, in);
}

void LinearGradParams(const float* dy, const float* x, int64_t rows,
                      int64_t in, int64_t out, bool accumulate, float* dw,
                      float* db) {
  Sgemm(true, false, out, in, rows, 1.0f, dy, out, x, in, accumulate ? 1.0f : 0.0f, dw, in);
  if (db != nullptr) LinearGradBias(dy, rows, out, accumulate, db);
}

namespace {

inline float Load(float v) { return v; }
inline float Load(uint16_t v) { return Bf16ToFloat(v); }

// Row by row so the inner loop is a contiguous vector add.
template <typename T>
inline __attribute__((always_inline)) void ColumnSums(const T* dy, int64_t rows, int64_t out,
                                                      bool accumulate, float* __restrict db) {
  if (!accumulate) std::fill(db, db + out, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict dyr = dy + r * out;
    for (int64_t j = 0; j < out; ++j) db[j] += Load(dyr[j]);
  }
}

}  // namespace

TRAINC_SIMD_CLONES
void LinearGradBias(const float* dy, int64_t rows, int64_t out, bool accumulate, float* db) {
  ColumnSums(dy, rows, out, accumulate, db);
}

TRAINC_SIMD_CLONES
void LinearGradBias(const uint16_t* dy, int64_t rows, int64_t out, bool accumulate, float* db) {
  ColumnSums(dy, rows, out, accumulate, db);
}

// A unit family's Run<float>, or the backend's own kernel for a family
// that has one (compiler/ops/unit_family.h; attention's: attention.h).
// Always inlined into Run<Family>'s SIMD clones below, as unit::RunUnit is:
// a Run<float> inlined into it (swiglu's) is compiled for each clone's ISA.
template <typename Family>
__attribute__((always_inline)) inline std::string RunOnCpu(KernelOp op,
                                                           const typename Family::Args& a,
                                                           const float* const* x,
                                                           float* const* y, bool accumulate) {
  if constexpr (ops::unit::HasOwnCpuKernel<Family>::value) {
    return OwnCpuKernel(op, a, x, y, accumulate);
  } else {
    return ops::unit::RunUnit<Family, float>(op, a, x, y, accumulate);
  }
}
#define TRAINC_CPU_UNIT_RUN(Fam, snake)                                                 \
  TRAINC_SIMD_CLONES std::string Run##Fam(KernelOp op, const ops::Fam##Family::Args& a, \
                                          const float* const* x, float* const* y,       \
                                          bool accumulate) {                            \
    return RunOnCpu<ops::Fam##Family>(op, a, x, y, accumulate);                         \
  }
TRAINC_STATELESS_FAMILIES(TRAINC_CPU_UNIT_RUN)
#undef TRAINC_CPU_UNIT_RUN

// ---- The step's tail: gradient sums and the optimizers -------------------

TRAINC_SIMD_CLONES
void WidenStaged(const uint16_t* src, int64_t n, float* dst) { WidenBf16(src, n, dst); }

TRAINC_SIMD_CLONES
void NarrowStaged(const float* src, int64_t n, uint16_t* dst) { NarrowToBf16(src, n, dst); }

TRAINC_SIMD_CLONES
void OrderedSum(const float* src, int64_t n, int64_t count, float* dst) {
  // k outer, i inner: a vector loop per slot, and the additions for each i
  // still happen in increasing k, so the result is fixed bit for bit.
  if (dst != src) std::memmove(dst, src, count * sizeof(float));
  for (int64_t k = 1; k < n; ++k) {
    const float* __restrict s = src + k * count;
    float* __restrict d = dst;
    for (int64_t i = 0; i < count; ++i) d[i] += s[i];
  }
}

// ---------------------------------------------------------------------------
// Pointwise ops: one loop pair per arity, instantiated per formula. Two
// loops, not a select per element: that keeps both vectorised.

namespace {

template <typename F>
__attribute__((always_inline)) inline void Unary(const float* __restrict a, int64_t n,
                                                 bool accumulate, float* __restrict y) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) y[i] += F::F(a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = F::F(a[i]);
  }
}

template <typename F>
__attribute__((always_inline)) inline void Binary(const float* __restrict a,
                                                  const float* __restrict b, int64_t n,
                                                  bool accumulate, float* __restrict y) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) y[i] += F::F(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = F::F(a[i], b[i]);
  }
}

}  // namespace

#define TRAINC_CPU_POINTWISE_1(Name) Unary<pointwise::Name>(a, n, accumulate, y)
#define TRAINC_CPU_POINTWISE_2(Name) Binary<pointwise::Name>(a, b, n, accumulate, y)
#define TRAINC_CPU_POINTWISE(op, Name, arity)                                   \
  TRAINC_SIMD_CLONES void Pointwise##Name(const float* a, const float* b,      \
                                          int64_t n, bool accumulate, float* y) { \
    (void)b;                                                                    \
    TRAINC_CPU_POINTWISE_##arity(Name);                                         \
  }
TRAINC_POINTWISE_OPS(TRAINC_CPU_POINTWISE)
#undef TRAINC_CPU_POINTWISE

PointwiseFn PointwiseKernel(KernelOp op) {
  switch (op) {
#define TRAINC_CPU_POINTWISE_CASE(op, Name, arity) \
  case KernelOp::k##Name:                          \
    return &Pointwise##Name;
    TRAINC_POINTWISE_OPS(TRAINC_CPU_POINTWISE_CASE)
#undef TRAINC_CPU_POINTWISE_CASE
    default:
      return nullptr;
  }
}

}  // namespace cpu
}  // namespace trainc
