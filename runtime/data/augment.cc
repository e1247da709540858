#include "runtime/data/augment.h"

#include "compiler/ops/philox.h"

namespace trainc {
namespace {

// Tells augmentation's draws apart from dropout's (whose keys are FNV
// hashes of statement names).
constexpr uint32_t kAugmentKey = 0x41554731u;  // "AUG1"

}  // namespace

ImageTransform TransformFor(uint64_t seed, uint64_t example, int64_t crop, bool flip) {
  const Philox4 counter{{0u, static_cast<uint32_t>(example),
                         static_cast<uint32_t>(example >> 32), kAugmentKey}};
  const Philox4 bits = Philox4x32_10(counter, static_cast<uint32_t>(seed),
                                     static_cast<uint32_t>(seed >> 32));
  ImageTransform t;
  if (crop > 0) {
    const uint32_t choices = static_cast<uint32_t>(2 * crop + 1);
    t.dy = static_cast<int64_t>(bits.v[0] % choices) - crop;
    t.dx = static_cast<int64_t>(bits.v[1] % choices) - crop;
  }
  t.flip = flip && (bits.v[2] >> 31) != 0;
  return t;
}

void ApplyTransform(const ImageTransform& t, const float* in, int64_t channels,
                    int64_t height, int64_t width, float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    const float* src = in + c * height * width;
    float* dst = out + c * height * width;
    for (int64_t h = 0; h < height; ++h) {
      const int64_t sh = h + t.dy;
      for (int64_t w = 0; w < width; ++w) {
        const int64_t sw = (t.flip ? width - 1 - w : w) + t.dx;
        const bool inside = sh >= 0 && sh < height && sw >= 0 && sw < width;
        dst[h * width + w] = inside ? src[sh * width + sw] : 0.0f;
      }
    }
  }
}

}  // namespace trainc
