#include "runtime/train/stragglers.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace trainc {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

RankStepTimes MedianStepTimes(std::vector<RankStepTimes> steps) {
  if (steps.empty()) return {};
  std::vector<double> busy, data, waiting;
  for (const RankStepTimes& t : steps) {
    busy.push_back(t.busy_ms);
    data.push_back(t.data_ms);
    waiting.push_back(t.waiting_ms);
  }
  return {Median(busy), Median(data), Median(waiting)};
}

std::string Describe(const Straggler& s) {
  return absl::StrFormat(
      "rank %d was busy %.1fx as long as the others over steps %d-%d: %.2f ms per step (data "
      "%.2f, compute %.2f), waiting %.2f; the others busy %.2f ms, waiting %.2f",
      s.rank, s.ratio, s.first_step, s.last_step, s.busy_ms, s.data_ms, s.compute_ms,
      s.waiting_ms, s.others_busy_ms, s.others_waiting_ms);
}

StragglerWatch::StragglerWatch(int world_size, int64_t window_steps, double ratio)
    : world_size_(world_size), window_steps_(window_steps), ratio_(ratio) {}

std::vector<Straggler> StragglerWatch::Add(int64_t last_step, int64_t steps,
                                           const std::vector<RankStepTimes>& per_rank) {
  std::vector<Straggler> newly;
  if (world_size_ < 2 || steps <= 0 || static_cast<int>(per_rank.size()) != world_size_) {
    return newly;
  }
  window_.push_back({last_step, steps, per_rank});
  int64_t in_window = 0;
  for (const Interval& i : window_) in_window += i.steps;
  while (in_window - window_.front().steps >= window_steps_) {
    in_window -= window_.front().steps;
    window_.pop_front();
  }
  if (in_window < window_steps_) return newly;
  // Per rank over the window, per step (each interval weighed by its steps).
  std::vector<RankStepTimes> sum(world_size_);
  for (const Interval& i : window_) {
    const double weight = static_cast<double>(i.steps) / in_window;
    for (int r = 0; r < world_size_; ++r) {
      sum[r].busy_ms += i.per_rank[r].busy_ms * weight;
      sum[r].data_ms += i.per_rank[r].data_ms * weight;
      sum[r].waiting_ms += i.per_rank[r].waiting_ms * weight;
    }
  }
  for (int r = 0; r < world_size_; ++r) {
    std::vector<double> others_busy, others_waiting;
    for (int o = 0; o < world_size_; ++o) {
      if (o == r) continue;
      others_busy.push_back(sum[o].busy_ms);
      others_waiting.push_back(sum[o].waiting_ms);
    }
    Straggler s;
    s.rank = r;
    s.first_step = last_step - in_window + 1;
    s.last_step = last_step;
    s.busy_ms = sum[r].busy_ms;
    s.data_ms = sum[r].data_ms;
    s.compute_ms = std::max(0.0, s.busy_ms - s.data_ms);
    s.waiting_ms = sum[r].waiting_ms;
    s.others_busy_ms = Median(others_busy);
    s.others_waiting_ms = Median(others_waiting);
    if (s.others_busy_ms <= 0 || s.busy_ms < ratio_ * s.others_busy_ms) continue;
    s.ratio = s.busy_ms / s.others_busy_ms;
    auto known = std::find_if(named_.begin(), named_.end(),
                              [r](const Straggler& n) { return n.rank == r; });
    if (known == named_.end()) {
      named_.push_back(s);
      newly.push_back(s);
    } else if (s.ratio > known->ratio) {
      *known = s;
    }
  }
  return newly;
}

}  // namespace trainc
