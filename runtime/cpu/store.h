// out (+)= v over n floats: the one store of the CPU kernels' results, and
// the SIMD clones of their loops (internal to runtime/cpu).
#ifndef TRAINC_RUNTIME_CPU_STORE_H_
#define TRAINC_RUNTIME_CPU_STORE_H_

#include <cstdint>
#include <cstring>

// The repository builds for x86-64-v2 (SSE4.2) so its binaries run anywhere;
// the elementwise loops of kernels.cc and attention.cc are the only
// hand-written hot code, so they get AVX2 and AVX-512 clones chosen by the
// loader (GNU ifunc). OpenBLAS and oneDNN do their own dispatch.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINC_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TRAINC_SIMD_CLONES
#endif

namespace trainc::cpu {

// Kept as two loops so each is a plain vector loop.
inline void Store(const float* __restrict v, int64_t n, bool accumulate,
                  float* __restrict out) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) out[i] += v[i];
  } else {
    std::memcpy(out, v, n * sizeof(float));
  }
}

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_STORE_H_
