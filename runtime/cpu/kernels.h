// CPU kernels for every compute op of compiler/plan/plan.h.
//
// Plain functions over raw fp32 pointers: the CPU device resolves a plan's
// buffers to pointers once and calls these in its hot loop, and the unit
// tests call them directly against double-precision references.
//
// Conventions. Row-major; `rows` is the batch dimension. Every kernel that
// writes a gradient takes `accumulate` (false: out = v, true: out += v).
// Outputs must not alias inputs unless stated. Matrix products go to
// OpenBLAS or oneDNN (gemm.h's Sgemm); the elementwise loops are written so the compiler
// vectorises them, and are cloned for AVX2/AVX-512 (picked at load time).
#ifndef TRAINC_RUNTIME_CPU_KERNELS_H_
#define TRAINC_RUNTIME_CPU_KERNELS_H_

#include <cstdint>
#include <string>

#include "runtime/device/kernel_args.h"

namespace trainc {
namespace cpu {

// Activation fused into the bias loop of Linear (see LinearForward).
using ::trainc::Activation;

// y[B,out] = x[B,in] w[out,in]^T + b[out] (b may be null). If `act` is not
// kNone, also act_out[B,out] = act(y) in the same pass over y; act_out
// null: y = act(y) in place (linear_<act> without pre).
void LinearForward(const float* x, const float* w, const float* b, int64_t rows,
                   int64_t in, int64_t out, float* y, Activation act,
                   float* act_out);
// dx[B,in] (+)= dy[B,out] w[out,in].
void LinearGradInput(const float* dy, const float* w, int64_t rows, int64_t in,
                     int64_t out, bool accumulate, float* dx);
// dw[out,in] (+)= dy^T x; db[out] (+)= column sums of dy (db may be null).
void LinearGradParams(const float* dy, const float* x, int64_t rows,
                      int64_t in, int64_t out, bool accumulate, float* dw,
                      float* db);

// LinearForward after its product y = x w^T: y += b (b may be null), then
// the activation into act_out (or over y).
void LinearEpilogue(const float* b, int64_t rows, int64_t out, float* y, Activation act,
                    float* act_out);
// LinearGradParams' db[out] (+)= column sums of dy[rows, out], rows in
// order; the second reads dy as bf16 (widened exactly, so the same sums).
void LinearGradBias(const float* dy, int64_t rows, int64_t out, bool accumulate, float* db);
void LinearGradBias(const uint16_t* dy, int64_t rows, int64_t out, bool accumulate, float* db);

// A pointwise op (compiler/ops/pointwise.h) over n elements:
// y[i] (+)= F(a[i]) or F(a[i], b[i]); b is unused by a unary op. y may
// not alias a or b unless it equals them exactly.
using PointwiseFn = void (*)(const float* a, const float* b, int64_t n,
                             bool accumulate, float* y);
// nullptr for an op that is not pointwise.
PointwiseFn PointwiseKernel(KernelOp op);

// A stateless unit family's loops in f32 (compiler/ops/kernel_families.h:
// its Run<float>), compiled here with the loops above and below: -O3, cloned
// for AVX2/AVX-512, no FMA contraction; or, for a family with a CPU kernel
// of its own, that kernel (OwnCpuKernel: attention.h). "" or why the
// operands were refused (compiler/ops/unit_family.h).
template <typename Args>
using UnitRunFn = std::string (*)(KernelOp op, const Args& a, const float* const* x,
                                  float* const* y, bool accumulate);
#define TRAINC_CPU_UNIT_RUN(Fam, snake)                                                     \
  std::string Run##Fam(KernelOp op, const ops::Fam##Family::Args& a, const float* const* x, \
                       float* const* y, bool accumulate);
TRAINC_STATELESS_FAMILIES(TRAINC_CPU_UNIT_RUN)
#undef TRAINC_CPU_UNIT_RUN

// ---- The step's tail: gradient sums and the optimizers -------------------

// dst[i] = sum over k in [0, n) of src[k * count + i], k in increasing order
// (bit-reproducible). dst may be src itself (slot 0), nothing else of src.
void OrderedSum(const float* src, int64_t n, int64_t count, float* dst);

// precision = bf16's staging: runtime/device/bf16.h's WidenBf16 and
// NarrowToBf16 (the same bits), in the SIMD clones.
void WidenStaged(const uint16_t* src, int64_t n, float* dst);
void NarrowStaged(const float* src, int64_t n, uint16_t* dst);

// Sets OpenBLAS's thread count for this process (see CpuDeviceOptions).
void SetBlasThreads(int threads);

}  // namespace cpu
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CPU_KERNELS_H_
