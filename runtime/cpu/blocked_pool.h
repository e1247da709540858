// Max pooling over channel-blocked images (nChw16c with AVX-512, nChw8c
// with AVX2) for the windows where oneDNN 2.6's own kernels run 2 to 7
// times slower than this machine's memory allows (docs/numbers.md): the
// forward and its gradient, bit for bit oneDNN's (the same maxima, the
// first in window order winning ties, and the same u8 workspace: the
// window index of each output element's maximum, laid out as the output),
// so either side may run on oneDNN.
#ifndef TRAINC_RUNTIME_CPU_BLOCKED_POOL_H_
#define TRAINC_RUNTIME_CPU_BLOCKED_POOL_H_

#include <cstdint>

#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

// Whether the kernels below take `g` in channel blocks of `block`: 16
// (the caller has checked AVX-512) or 8 on a CPU with AVX2, channels a
// multiple of it, square windows as wide as their stride (no overlap), no
// padding, at most 255 elements per window.
bool BlockedMaxPoolRuns(const WindowGeometry& g, int64_t block);

// y[n, c, i, j] = the maximum of x over window (i, j), argmax its index
// ki * kw + kj; x is [n, c, h, w], y and argmax [n, c, oh, ow], all in
// blocks of `block` channels.
void BlockedMaxPoolForward(const WindowGeometry& g, int64_t block, const float* x, float* y,
                           uint8_t* argmax);

// dx = dy at each window's argmax, 0 elsewhere (rows and columns no window
// covers included).
void BlockedMaxPoolBackward(const WindowGeometry& g, int64_t block, const float* dy,
                            const uint8_t* argmax, float* dx);

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_BLOCKED_POOL_H_
