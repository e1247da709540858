// Pointwise ops: each one's formula, written once and compiled three ways:
// in f32 by the CPU kernels (runtime/cpu/kernels.cc) and the CUDA kernels
// (runtime/cuda/pointwise.cu), and in f64 by the reference interpreter
// (compiler/autodiff/reference_eval.cc). The finite-difference checks and
// the PyTorch constants in the tests stay independent of it.
//
// A unary op is y = F(a); a binary op is y = F(a, b). Either may be asked
// to accumulate (y += F(...)) by its instruction; the gradient ops are
// pointwise ops themselves (relu_grad(dy, y) = y > 0 ? dy : 0).
//
// Adding a pointwise op: its formula struct below, one line in
// TRAINC_POINTWISE_OPS, and its OpDef (and ModelOpDef, if users call it) in
// op_table.cc. Every backend then has its kernel; the conformance test
// (runtime/conformance/op_conformance_test.cc) checks it against the reference and its
// gradient against finite differences.
#ifndef TRAINC_COMPILER_OPS_POINTWISE_H_
#define TRAINC_COMPILER_OPS_POINTWISE_H_

#include <math.h>

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TRAINC_HD __host__ __device__ __forceinline__
#else
#define TRAINC_HD inline
#endif

// X(instruction op, Formula, arity): every pointwise op. The backends'
// KernelOp is k<Formula> (runtime/device/kernel_ops.h).
#define TRAINC_POINTWISE_OPS(X)      \
  X(relu, Relu, 1)                   \
  X(relu_grad, ReluGrad, 2)          \
  X(gelu, Gelu, 1)                   \
  X(gelu_grad, GeluGrad, 2)          \
  X(gelu_tanh, GeluTanh, 1)          \
  X(gelu_tanh_grad, GeluTanhGrad, 2) \
  X(silu, Silu, 1)                   \
  X(silu_grad, SiluGrad, 2)          \
  X(tanh, Tanh, 1)                   \
  X(tanh_grad, TanhGrad, 2)          \
  X(add, Add, 2)                     \
  X(mul, Mul, 2)                     \
  X(mul_grad, MulGrad, 2)            \
  X(copy_grad, CopyGrad, 1)

namespace trainc::pointwise {

// The math library in each precision (float: the f-suffixed functions
// std::exp(float) and friends call on the host, CUDA's on the device).
namespace math {
TRAINC_HD float Exp(float x) { return expf(x); }
TRAINC_HD double Exp(double x) { return exp(x); }
TRAINC_HD float Erf(float x) { return erff(x); }
TRAINC_HD double Erf(double x) { return erf(x); }
TRAINC_HD float Tanh(float x) { return tanhf(x); }
TRAINC_HD double Tanh(double x) { return tanh(x); }

// e^z for z in [-86, 0] in f32 without libm, so the loops around it
// vectorise (libm's expf and tanhf are scalar calls: tanhf was 40% of a
// tiny GPT's CPU step, expf the Llama's SiLU; bf16 attention's softmax
// uses it too): Cody-Waite range reduction
// and Cephes' degree-6 polynomial, ~1 ulp. The result stays a normal float
// (e^-86 ~ 4e-38).
TRAINC_HD float ExpNonPositive(float z) {
  // k from z clamped by a select (a NaN becomes -87, so the conversion
  // below stays defined; z itself carries the NaN into the result).
  const float z_k = z > -87.0f ? z : -87.0f;
  const float k = floorf(z_k * 1.44269504088896341f + 0.5f);
  const float r = z - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // 2^k by building the exponent bits (k in [-124, 0]).
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
#ifdef __CUDA_ARCH__
  const float scale = __int_as_float(bits);
#else
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
#endif
  return er * scale;
}

// 1 + tanh(u). With e = exp(-2|u|), 1 + tanh u = 2 / (1 + e) for u >= 0
// and 2e / (1 + e) for u < 0: no cancellation where tanh u is near -1 (x
// well below 0 in GELU), which PyTorch's 1 + tanh(u) loses to |x| 2^-24.
TRAINC_HD float OnePlusTanh(float u) {
  // e stays a normal float (|u| clamped to 43); 2e / (1 + e) keeps its
  // relative precision down there, where GELU's tail lives. The select
  // (not fminf) keeps a NaN a NaN.
  const float abs_u = fabsf(u);
  const float a = 43.0f < abs_u ? 43.0f : abs_u;
  const float e = ExpNonPositive(-2.0f * a);
  return (u >= 0.0f ? 2.0f : 2.0f * e) / (1.0f + e);
}
TRAINC_HD double OnePlusTanh(double u) { return 1 + tanh(u); }

// The logistic sigmoid 1 / (1 + e^-x) and SiLU x sigmoid(x), in f32 through
// ExpNonPositive (vectorised; libm's expf was SiLU's cost): with
// e = e^-|x|, sigmoid is 1 / (1 + e) for x >= 0 and e / (1 + e) below, so
// e^-x never overflows. Below x = -86, where sigmoid is under 4.4e-38,
// sigmoid is 0 and SiLU x * 0 (-0, and NaN at -inf, as libm's form
// x / (1 + e^-x) gave). A NaN stays a NaN.
TRAINC_HD float SigmoidParts(float x, float* e) {
  const float abs_x = fabsf(x);
  *e = ExpNonPositive(-(86.0f < abs_x ? 86.0f : abs_x));
  return 1.0f + *e;
}
TRAINC_HD float SigmoidOfParts(float x, float e, float d) {
  const float s = (x >= 0.0f ? 1.0f : e) / d;
  return x < -86.0f ? 0.0f : s;
}
TRAINC_HD float SiluOfParts(float x, float e, float d) {
  const float y = (x >= 0.0f ? x : x * e) / d;
  return x < -86.0f ? x * 0.0f : y;
}
TRAINC_HD float Sigmoid(float x) {
  float e;
  const float d = SigmoidParts(x, &e);
  return SigmoidOfParts(x, e, d);
}
TRAINC_HD double Sigmoid(double x) { return 1 / (1 + exp(-x)); }
TRAINC_HD float Silu(float x) {
  float e;
  const float d = SigmoidParts(x, &e);
  return SiluOfParts(x, e, d);
}
TRAINC_HD double Silu(double x) { return x / (1 + exp(-x)); }
// Silu(x), and Sigmoid(x) in *sigmoid, from one exponential (the fused
// SwiGLU's gradient needs both): each the bits of its own function.
TRAINC_HD float SiluAndSigmoid(float x, float* sigmoid) {
  float e;
  const float d = SigmoidParts(x, &e);
  *sigmoid = SigmoidOfParts(x, e, d);
  return SiluOfParts(x, e, d);
}
TRAINC_HD double SiluAndSigmoid(double x, double* sigmoid) {
  *sigmoid = Sigmoid(x);
  return Silu(x);
}

}  // namespace math

// 1/sqrt(2), 1/sqrt(2 pi), sqrt(2/pi) and GPT-2's cubic coefficient, in T.
template <typename T>
struct Constants {
  static constexpr T kInvSqrt2 = T(0.70710678118654752440);
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588);
  static constexpr T kGeluCubic = T(0.044715);
};

struct Relu {
  template <typename T>
  TRAINC_HD static T F(T x) { return x > T(0) ? x : T(0); }
};
struct ReluGrad {  // (dy, y)
  template <typename T>
  TRAINC_HD static T F(T dy, T y) { return y > T(0) ? dy : T(0); }
};

// GELU, erf form: x Phi(x).
struct Gelu {
  template <typename T>
  TRAINC_HD static T F(T x) {
    return T(0.5) * x * (T(1) + math::Erf(x * Constants<T>::kInvSqrt2));
  }
};
struct GeluGrad {  // (dy, x)
  template <typename T>
  TRAINC_HD static T F(T dy, T x) {
    const T cdf = T(0.5) * (T(1) + math::Erf(x * Constants<T>::kInvSqrt2));
    const T pdf = Constants<T>::kInvSqrt2Pi * math::Exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};

// GPT-2's GELU: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <typename T>
  TRAINC_HD static T F(T x) {
    using C = Constants<T>;
    const T inner = C::kSqrt2OverPi * (x + C::kGeluCubic * x * x * x);
    return T(0.5) * x * math::OnePlusTanh(inner);
  }
};
// d/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) u', u' = sqrt(2/pi) (1 + 3 *
// 0.044715 x^2); PyTorch's own factoring, with 1 - tanh^2 = s (2 - s),
// s = 1 + tanh u.
struct GeluTanhGrad {  // (dy, x)
  template <typename T>
  TRAINC_HD static T F(T dy, T x) {
    using C = Constants<T>;
    const T x2 = x * x;
    const T s = math::OnePlusTanh(C::kSqrt2OverPi * (x + C::kGeluCubic * x2 * x));
    const T du = C::kSqrt2OverPi * (T(1) + T(3) * C::kGeluCubic * x2);
    return dy * (T(0.5) * s + T(0.5) * x * (s * (T(2) - s)) * du);
  }
};

// SiLU (swish): x sigmoid(x).
struct Silu {
  template <typename T>
  TRAINC_HD static T F(T x) { return math::Silu(x); }
};
struct SiluGrad {  // (dy, x)
  template <typename T>
  TRAINC_HD static T F(T dy, T x) { return OfSigmoid(dy, x, math::Sigmoid(x)); }
  // Given s = sigmoid(x) (math::SiluAndSigmoid's).
  template <typename T>
  TRAINC_HD static T OfSigmoid(T dy, T x, T s) { return dy * s * (T(1) + x * (T(1) - s)); }
};

struct Tanh {
  template <typename T>
  TRAINC_HD static T F(T x) { return math::Tanh(x); }
};
struct TanhGrad {  // (dy, y)
  template <typename T>
  TRAINC_HD static T F(T dy, T y) { return dy * (T(1) - y * y); }
};

struct Add {
  template <typename T>
  TRAINC_HD static T F(T a, T b) { return a + b; }
};
struct Mul {
  template <typename T>
  TRAINC_HD static T F(T a, T b) { return a * b; }
};
struct MulGrad {  // (dy, the other operand): d(a b)/da = b
  template <typename T>
  TRAINC_HD static T F(T dy, T other) { return dy * other; }
};
struct CopyGrad {  // the gradient of add and of any identity
  template <typename T>
  TRAINC_HD static T F(T dy) { return dy; }
};

}  // namespace trainc::pointwise

#endif  // TRAINC_COMPILER_OPS_POINTWISE_H_
