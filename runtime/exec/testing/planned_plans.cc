#include "runtime/exec/testing/planned_plans.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"

namespace trainc {
namespace testing {

absl::StatusOr<Plan> CompileExample(const std::string& example,
                                    const Overrides& overrides) {
  FrontendResult result = CompileFile("dsl_examples/" + example + ".train", overrides);
  if (!result.spec) {
    return absl::InvalidArgumentError(
        FormatDiagnostics(result.diagnostics, result.source));
  }
  return BuildPlan(*result.spec);
}

absl::Status InitParameters(const Plan& plan, Device& device) {
  std::mt19937 gen(1234);
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    std::vector<float> v(b.bytes / 4, 0.0f);
    if (b.init == ParamInit::kOnes) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (b.init == ParamInit::kUniform) {
      std::uniform_real_distribution<float> d(-b.init_bound, b.init_bound);
      for (float& x : v) x = d(gen);
    }
    if (absl::Status s = device.Upload(b.offset, v.data(), b.bytes); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DownloadParameters(const Plan& plan, Device& device) {
  std::vector<float> all;
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    std::vector<float> v(b.bytes / 4);
    if (absl::Status s = device.Download(b.offset, v.data(), b.bytes); !s.ok()) return s;
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

absl::Status SyntheticBatches::Fill(int micro_step, const Plan& plan, Device& device) {
  const int64_t global = rank_ * plan.accumulate + micro_step;
  for (size_t i = 0; i < plan.input_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.input_buffers[i]];
    std::mt19937 gen(static_cast<uint32_t>(step_ * 1000003 + global * 101 + i));
    std::vector<char> bytes(b.bytes);
    if (b.dtype == DType::kI32) {
      std::uniform_int_distribution<int32_t> d(0, kClasses - 1);
      for (int64_t k = 0; k < b.bytes / 4; ++k) {
        const int32_t v = d(gen);
        std::memcpy(&bytes[k * 4], &v, 4);
      }
    } else {
      std::uniform_real_distribution<float> d(0.0f, 1.0f);
      for (int64_t k = 0; k < b.bytes / 4; ++k) {
        const float v = d(gen);
        std::memcpy(&bytes[k * 4], &v, 4);
      }
    }
    if (absl::Status s = device.Upload(b.offset, bytes.data(), b.bytes); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace trainc
