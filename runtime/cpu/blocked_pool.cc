#include "runtime/cpu/blocked_pool.h"

#include <immintrin.h>

#include <cfloat>

namespace trainc::cpu {
namespace {

// The window and image sizes of one plane of `block` channels.
struct Plane {
  int64_t h, w, oh, ow, k, block;  // k: window side = stride
  int64_t in() const { return h * w * block; }
  int64_t out() const { return oh * ow * block; }
  // Where window (i, j)'s element (ki, kj) is in the plane, and output
  // element (i, j) in its own.
  int64_t at(int64_t i, int64_t j, int64_t ki, int64_t kj) const {
    return ((i * k + ki) * w + j * k + kj) * block;
  }
  int64_t o(int64_t i, int64_t j) const { return (i * ow + j) * block; }
};

Plane PlaneOf(const WindowGeometry& g, int64_t block) {
  return {g.h, g.w, g.oh, g.ow, g.kh, block};
}

#define TRAINC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define TRAINC_AVX2 __attribute__((target("avx2")))

// Each output element's lanes run oneDNN's loop: acc < v replaces the
// running maximum (from the lowest float) and its index.
TRAINC_AVX512 void Forward16(const Plane& p, const float* x, float* y, uint8_t* argmax) {
  for (int64_t i = 0; i < p.oh; ++i) {
    for (int64_t j = 0; j < p.ow; ++j) {
      __m512 m = _mm512_set1_ps(-FLT_MAX);
      __m128i a = _mm_setzero_si128();
      for (int64_t ki = 0; ki < p.k; ++ki) {
        for (int64_t kj = 0; kj < p.k; ++kj) {
          const __m512 v = _mm512_loadu_ps(x + p.at(i, j, ki, kj));
          const __mmask16 less = _mm512_cmp_ps_mask(m, v, _CMP_LT_OS);
          m = _mm512_mask_blend_ps(less, m, v);
          a = _mm_mask_blend_epi8(less, a, _mm_set1_epi8(static_cast<char>(ki * p.k + kj)));
        }
      }
      _mm512_storeu_ps(y + p.o(i, j), m);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(argmax + p.o(i, j)), a);
    }
  }
}

TRAINC_AVX2 void Forward8(const Plane& p, const float* x, float* y, uint8_t* argmax) {
  for (int64_t i = 0; i < p.oh; ++i) {
    for (int64_t j = 0; j < p.ow; ++j) {
      __m256 m = _mm256_set1_ps(-FLT_MAX);
      __m256i a = _mm256_setzero_si256();
      for (int64_t ki = 0; ki < p.k; ++ki) {
        for (int64_t kj = 0; kj < p.k; ++kj) {
          const __m256 v = _mm256_loadu_ps(x + p.at(i, j, ki, kj));
          const __m256 less = _mm256_cmp_ps(m, v, _CMP_LT_OS);
          m = _mm256_blendv_ps(m, v, less);
          a = _mm256_blendv_epi8(a, _mm256_set1_epi32(static_cast<int>(ki * p.k + kj)),
                                 _mm256_castps_si256(less));
        }
      }
      _mm256_storeu_ps(y + p.o(i, j), m);
      // Eight indices < 256 as eight bytes.
      const __m128i words =
          _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(argmax + p.o(i, j)),
                       _mm_packus_epi16(words, words));
    }
  }
}

// Row r of the input gradient: each window's gradient where its maximum
// was, 0 elsewhere and past the last window.
TRAINC_AVX512 void Backward16(const Plane& p, const float* dy, const uint8_t* argmax,
                              float* dx) {
  for (int64_t r = 0; r < p.h; ++r) {
    float* row = dx + r * p.w * p.block;
    const int64_t i = r / p.k, ki = r % p.k;
    int64_t col = 0;
    for (int64_t j = 0; i < p.oh && j < p.ow; ++j) {
      const __m512 g = _mm512_loadu_ps(dy + p.o(i, j));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(argmax + p.o(i, j)));
      for (int64_t kj = 0; kj < p.k; ++kj, ++col) {
        const __mmask16 here =
            _mm_cmpeq_epi8_mask(a, _mm_set1_epi8(static_cast<char>(ki * p.k + kj)));
        _mm512_storeu_ps(row + col * p.block, _mm512_maskz_mov_ps(here, g));
      }
    }
    for (; col < p.w; ++col) _mm512_storeu_ps(row + col * p.block, _mm512_setzero_ps());
  }
}

TRAINC_AVX2 void Backward8(const Plane& p, const float* dy, const uint8_t* argmax, float* dx) {
  for (int64_t r = 0; r < p.h; ++r) {
    float* row = dx + r * p.w * p.block;
    const int64_t i = r / p.k, ki = r % p.k;
    int64_t col = 0;
    for (int64_t j = 0; i < p.oh && j < p.ow; ++j) {
      const __m256 g = _mm256_loadu_ps(dy + p.o(i, j));
      const __m256i a = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(argmax + p.o(i, j))));
      for (int64_t kj = 0; kj < p.k; ++kj, ++col) {
        const __m256i here =
            _mm256_cmpeq_epi32(a, _mm256_set1_epi32(static_cast<int>(ki * p.k + kj)));
        _mm256_storeu_ps(row + col * p.block, _mm256_and_ps(_mm256_castsi256_ps(here), g));
      }
    }
    for (; col < p.w; ++col) _mm256_storeu_ps(row + col * p.block, _mm256_setzero_ps());
  }
}

#undef TRAINC_AVX512
#undef TRAINC_AVX2

}  // namespace

bool BlockedMaxPoolRuns(const WindowGeometry& g, int64_t block) {
  const bool isa = block == 16 || (block == 8 && __builtin_cpu_supports("avx2"));
  return isa && g.c % block == 0 && g.c == g.o && g.kh == g.kw && g.stride == g.kh &&
         g.padding == 0 && g.kh >= 1 && g.kh * g.kw <= 255 &&
         g.oh == (g.h - g.kh) / g.stride + 1 && g.ow == (g.w - g.kw) / g.stride + 1;
}

void BlockedMaxPoolForward(const WindowGeometry& g, int64_t block, const float* x, float* y,
                           uint8_t* argmax) {
  const Plane p = PlaneOf(g, block);
  auto* run = block == 16 ? &Forward16 : &Forward8;
  for (int64_t b = 0; b < g.n * g.c / block; ++b) {
    run(p, x + b * p.in(), y + b * p.out(), argmax + b * p.out());
  }
}

void BlockedMaxPoolBackward(const WindowGeometry& g, int64_t block, const float* dy,
                            const uint8_t* argmax, float* dx) {
  const Plane p = PlaneOf(g, block);
  auto* run = block == 16 ? &Backward16 : &Backward8;
  for (int64_t b = 0; b < g.n * g.c / block; ++b) {
    run(p, dy + b * p.out(), argmax + b * p.out(), dx + b * p.in());
  }
}

}  // namespace trainc::cpu
