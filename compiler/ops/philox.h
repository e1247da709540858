// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11), the counter-based generator of cuRAND and JAX, and the
// dropout mask built on it. Header-only and branch-free, compiled by the
// host compiler and by nvcc, so the CPU and CUDA backends drop exactly the
// same elements.
//
// A dropout mask is a pure function of (seed, op key, global example index,
// element index): no generator state, nothing stored between forward and
// backward, and the same units are dropped however the global batch is
// split into ranks and micro-steps.
#ifndef TRAINC_COMPILER_OPS_PHILOX_H_
#define TRAINC_COMPILER_OPS_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TRAINC_HOST_DEVICE __host__ __device__
#else
#define TRAINC_HOST_DEVICE
#endif

namespace trainc {

struct Philox4 {
  uint32_t v[4];
};

// Ten rounds of Philox4x32 on `counter` under `key`.
TRAINC_HOST_DEVICE inline Philox4 Philox4x32_10(Philox4 counter, uint32_t k0,
                                                uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * counter.v[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * counter.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    counter = Philox4{{hi1 ^ counter.v[1] ^ k0, lo1, hi0 ^ counter.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return counter;
}

// The factor dropout multiplies element `element` of global example
// `example` by: 0 with probability p, else 1 / (1 - p). One Philox call
// serves 4 consecutive elements; `key` tells the model's dropout ops apart.
TRAINC_HOST_DEVICE inline float DropoutFactor(uint64_t seed, uint32_t key,
                                              uint64_t example,
                                              uint64_t element, float p) {
  const Philox4 counter{{static_cast<uint32_t>(element >> 2),
                         static_cast<uint32_t>(example),
                         static_cast<uint32_t>(example >> 32), key}};
  const Philox4 bits = Philox4x32_10(counter, static_cast<uint32_t>(seed),
                                     static_cast<uint32_t>(seed >> 32));
  // 24 random bits -> [0, 1), exactly representable in float.
  const float u = static_cast<float>(bits.v[element & 3] >> 8) * (1.0f / 16777216.0f);
  return u < p ? 0.0f : 1.0f / (1.0f - p);
}

}  // namespace trainc

#endif  // TRAINC_COMPILER_OPS_PHILOX_H_
