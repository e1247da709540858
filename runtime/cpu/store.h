// out (+)= v over n floats: the one store of the CPU kernels' results
// (internal to runtime/cpu).
#ifndef TRAINC_RUNTIME_CPU_STORE_H_
#define TRAINC_RUNTIME_CPU_STORE_H_

#include <cstdint>
#include <cstring>

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
