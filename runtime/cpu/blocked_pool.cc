#include "runtime/cpu/blocked_pool.h"

#include <immintrin.h>

#include <cfloat>

namespace trainc::cpu {
namespace {

constexpr int64_t kBlock = 16;

// The window and image sizes of one 16-channel plane.
struct Plane {
  int64_t h, w, oh, ow, k;  // k: window side = stride
  int64_t in() const { return h * w * kBlock; }
  int64_t out() const { return oh * ow * kBlock; }
};

Plane PlaneOf(const WindowGeometry& g) { return {g.h, g.w, g.oh, g.ow, g.kh}; }

#define TRAINC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// One output element's 16 lanes: oneDNN's loop, acc < v replacing the
// running maximum (from the lowest float) and its index.
TRAINC_AVX512 void ForwardPlane(const Plane& p, const float* x, float* y, uint8_t* argmax) {
  const __m512 lowest = _mm512_set1_ps(-FLT_MAX);
  for (int64_t i = 0; i < p.oh; ++i) {
    for (int64_t j = 0; j < p.ow; ++j) {
      __m512 m = lowest;
      __m128i a = _mm_setzero_si128();
      for (int64_t ki = 0; ki < p.k; ++ki) {
        const float* row = x + ((i * p.k + ki) * p.w + j * p.k) * kBlock;
        for (int64_t kj = 0; kj < p.k; ++kj) {
          const __m512 v = _mm512_loadu_ps(row + kj * kBlock);
          const __mmask16 less = _mm512_cmp_ps_mask(m, v, _CMP_LT_OS);
          m = _mm512_mask_blend_ps(less, m, v);
          a = _mm_mask_blend_epi8(less, a, _mm_set1_epi8(static_cast<char>(ki * p.k + kj)));
        }
      }
      const int64_t o = (i * p.ow + j) * kBlock;
      _mm512_storeu_ps(y + o, m);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(argmax + o), a);
    }
  }
}

TRAINC_AVX512 void BackwardPlane(const Plane& p, const float* dy, const uint8_t* argmax,
                                 float* dx) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < p.h; ++r) {
    float* row = dx + r * p.w * kBlock;
    const int64_t i = r / p.k, ki = r % p.k;
    int64_t col = 0;
    if (i < p.oh) {
      for (int64_t j = 0; j < p.ow; ++j) {
        const int64_t o = (i * p.ow + j) * kBlock;
        const __m512 g = _mm512_loadu_ps(dy + o);
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(argmax + o));
        for (int64_t kj = 0; kj < p.k; ++kj, ++col) {
          const __mmask16 here =
              _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(ki * p.k + kj)));
          _mm512_storeu_ps(row + col * kBlock, _mm512_maskz_mov_ps(here, g));
        }
      }
    }
    for (; col < p.w; ++col) _mm512_storeu_ps(row + col * kBlock, zero);
  }
}

#undef TRAINC_AVX512

}  // namespace

bool BlockedMaxPoolRuns(const WindowGeometry& g, int64_t block) {
  return block == kBlock && g.c % kBlock == 0 && g.c == g.o && g.kh == g.kw &&
         g.stride == g.kh && g.padding == 0 && g.kh >= 1 && g.kh * g.kw <= 255 &&
         g.oh == (g.h - g.kh) / g.stride + 1 && g.ow == (g.w - g.kw) / g.stride + 1;
}

void BlockedMaxPoolForward(const WindowGeometry& g, const float* x, float* y,
                           uint8_t* argmax) {
  const Plane p = PlaneOf(g);
  for (int64_t b = 0; b < g.n * g.c / kBlock; ++b) {
    ForwardPlane(p, x + b * p.in(), y + b * p.out(), argmax + b * p.out());
  }
}

void BlockedMaxPoolBackward(const WindowGeometry& g, const float* dy, const uint8_t* argmax,
                            float* dx) {
  const Plane p = PlaneOf(g);
  for (int64_t b = 0; b < g.n * g.c / kBlock; ++b) {
    BackwardPlane(p, dy + b * p.out(), argmax + b * p.out(), dx + b * p.in());
  }
}

}  // namespace trainc::cpu
