#include "runtime/train/divergence.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainc {

std::string FirstNonFiniteGradient(const Plan& plan, Device& device) {
  for (int id : plan.parameter_buffers) {
    const std::string name = "grad/" + plan.buffers[id].name;
    for (const Buffer& g : plan.buffers) {
      if (g.kind != BufferKind::kGradient || g.name != name) continue;
      if (g.first_use >= 0) return "";  // ZeRO-2: the arena reused its bytes
      std::vector<float> values(g.bytes / 4);
      if (!device.Download(g.offset, values.data(), g.bytes).ok()) return "";
      for (float v : values) {
        if (!std::isfinite(v)) {
          return absl::StrCat("; first non-finite gradient: ", plan.buffers[id].name);
        }
      }
      break;  // slot 0: the reduced gradient
    }
  }
  return "";
}

absl::Status CheckLossesFinite(const Plan& plan, Device& device, int64_t step,
                               const std::vector<float>& losses,
                               const std::vector<bool>& skipped) {
  for (size_t i = 0; i < losses.size(); ++i) {
    if (std::isfinite(losses[i]) || skipped[i]) continue;
    const int64_t bad = step - static_cast<int64_t>(losses.size()) + 1 + static_cast<int64_t>(i);
    return absl::DataLossError(absl::StrFormat(
        "step %d: the loss is %s%s: training diverged; stopping without "
        "saving (lower the learning rate, set clip_grad_norm, or "
        "skip_nonfinite = true to leave such steps out)",
        bad, std::isnan(losses[i]) ? "nan" : losses[i] > 0 ? "inf" : "-inf",
        FirstNonFiniteGradient(plan, device)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> NonFiniteSteps::LeaveOut(const Plan& plan, Device& device, int64_t step,
                                              double norm, std::ostream& log,
                                              const char* line_start) {
  if (std::isfinite(norm)) {
    in_a_row_ = 0;
    return false;
  }
  if (!plan.skip_nonfinite) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: the gradient norm is %s%s: training diverged; stopping "
        "without saving (skip_nonfinite = true leaves such steps out)",
        step, std::isnan(norm) ? "nan" : "inf", FirstNonFiniteGradient(plan, device)));
  }
  const int64_t skipped = ++skipped_;  // this one included
  if (++in_a_row_ >= kMaxInARow) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: %d steps in a row had a non-finite gradient (skip_nonfinite "
        "left them out)%s: training diverged; stopping without saving",
        step, in_a_row_, FirstNonFiniteGradient(plan, device)));
  }
  if (skipped <= 10 || skipped % 100 == 0) {
    log << absl::StrFormat(
               "%sstep %d: gradient norm %s: step skipped, weights unchanged "
               "(skip_nonfinite; %d so far)%s\n",
               line_start, step, std::isnan(norm) ? "nan" : "inf", skipped,
               skipped == 10 ? "; reporting every 100th from now" : "")
        << std::flush;
  }
  return true;
}

}  // namespace trainc
