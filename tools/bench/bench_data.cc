#include "tools/bench/bench_data.h"

#include <cstring>
#include <random>
#include <utility>

#include "runtime/checkpoint/checkpoint.h"

namespace trainc::bench {

FixedBatch::FixedBatch(const Plan& plan, int64_t id_range, int seed) {
  std::mt19937 rng(seed);
  for (int id : plan.input_buffers) {
    const Buffer& b = plan.buffers[id];
    std::vector<char> data(b.bytes);
    for (int64_t i = 0; i < b.bytes / 4; ++i) {
      if (b.dtype == DType::kI32) {
        const int32_t v = static_cast<int32_t>(rng() % id_range);
        std::memcpy(data.data() + 4 * i, &v, 4);
      } else {
        const float v = std::uniform_real_distribution<float>(0, 1)(rng);
        std::memcpy(data.data() + 4 * i, &v, 4);
      }
    }
    data_.push_back(std::move(data));
  }
}

absl::Status FixedBatch::Fill(int /*micro_step*/, const Plan& plan, Device& device) {
  for (size_t i = 0; i < plan.input_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.input_buffers[i]];
    absl::Status s = device.Upload(b.offset, data_[i].data(), b.bytes);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status InitParameters(const Plan& plan, Device& device, int rank) {
  std::mt19937 rng(1);
  for (size_t i = 0; i < plan.parameter_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.parameter_buffers[i]];
    std::vector<float> init(b.bytes / 4);
    if (b.init == ParamInit::kNormal) {  // init_bound is the standard deviation
      std::normal_distribution<float> normal(0.0f, static_cast<float>(b.init_bound));
      for (float& v : init) v = normal(rng);
    } else {
      std::uniform_real_distribution<float> uni(-b.init_bound, b.init_bound);
      for (float& v : init) {
        v = b.init == ParamInit::kOnes ? 1.0f : b.init == ParamInit::kZeros ? 0.0f : uni(rng);
      }
    }
    absl::Status s = UploadParameter(plan, device, static_cast<int>(i), init, rank);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace trainc::bench
