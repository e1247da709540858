// Augmentation of training images (DataConfig::random_crop, random_flip):
// a random shift with zeros shifted in (a crop of the image padded by
// random_crop pixels) and a left-right mirror, as torchvision's
// RandomCrop(size, padding) and RandomHorizontalFlip.
//
// Each image's transform is a pure function of the plan's seed and the
// example's place in the run, g = (step - 1) global_batch + its place in
// the global batch, never of the rank or micro-step that loads it: the
// split of the global batch into gpus x accumulate does not change what
// the model sees, and a resumed run sees what the uninterrupted one saw.
#ifndef TRAINC_RUNTIME_DATA_AUGMENT_H_
#define TRAINC_RUNTIME_DATA_AUGMENT_H_

#include <cstdint>

namespace trainc {

struct ImageTransform {
  int64_t dy = 0, dx = 0;  // out(h, w) = in(h + dy, w + dx), 0 outside
  bool flip = false;       // then out(h, w) = out(h, W - 1 - w)
};

// The transform of global example `example` (one Philox4x32-10 draw).
ImageTransform TransformFor(uint64_t seed, uint64_t example, int64_t crop, bool flip);

// Writes `out` [C, H, W] = `in` transformed (in and out do not overlap).
void ApplyTransform(const ImageTransform& t, const float* in, int64_t channels,
                    int64_t height, int64_t width, float* out);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_AUGMENT_H_
