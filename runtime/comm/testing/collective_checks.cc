#include "runtime/comm/testing/collective_checks.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc::testing {
namespace {

// "" when data[i] == want(i) for i in [begin, end), else the first miss.
template <typename Want>
std::string Mismatch(const std::vector<float>& data, int64_t begin, int64_t end,
                     Want want, const char* what, int rank) {
  for (int64_t i = begin; i < end; ++i) {
    if (data[i] != want(i)) {
      return absl::StrCat(what, ", rank ", rank, ", element ", i, ": ", data[i],
                          " != ", want(i));
    }
  }
  return "";
}

}  // namespace

std::string CheckReduceScatterThenAllGather(Communicator& comm, int64_t count,
                                            int rounds) {
  const int world = comm.world_size(), r = comm.rank();
  auto value = [](int rank, int64_t i) {
    return static_cast<float>(i % 4099 + 8192 * rank);
  };
  auto sum = [&](int64_t i) {
    float s = 0;
    for (int q = 0; q < world; ++q) s += value(q, i);
    return s;
  };
  std::vector<float> data(count * world);
  std::string first;
  auto note = [&](std::string miss) {
    if (first.empty()) first = std::move(miss);
  };
  for (int round = 0; round < rounds; ++round) {
    for (int64_t i = 0; i < count * world; ++i) data[i] = value(r, i);
    absl::Status s = comm.ReduceScatterSum(data.data(), count, nullptr);
    note(s.ok() ? Mismatch(data, r * count, (r + 1) * count, sum, "reduce-scatter", r)
                : absl::StrCat("reduce-scatter: ", s.ToString()));
    float* mine = data.data() + r * count;
    s = comm.AllGather(mine, data.data(), count, nullptr);
    note(s.ok() ? Mismatch(data, 0, count * world, sum, "all-gather", r)
                : absl::StrCat("all-gather: ", s.ToString()));
  }
  return first.empty() ? "" : absl::StrCat("count ", count, ": ", first);
}

std::string CheckBf16Collectives(Communicator& comm, int64_t count) {
  const int world = comm.world_size(), r = comm.rank();
  // Integers below 2^8 / world: each partial sum is a bf16 integer.
  auto value = [](int rank, int64_t i) {
    return static_cast<float>((i * 7 + rank * 3) % 23) + 1.0f / 1024;
  };
  auto want = [&](int64_t i) {
    float s = 0;
    for (int q = 0; q < world; ++q) s += static_cast<float>((i * 7 + q * 3) % 23);
    return world == 1 ? value(0, i) : s;
  };
  std::string first;
  auto note = [&](std::string miss) {
    if (first.empty()) first = std::move(miss);
  };
  std::vector<float> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = value(r, i);
  absl::Status s = comm.AllReduceSumBf16(data.data(), count, nullptr);
  note(s.ok() ? Mismatch(data, 0, count, want, "bf16 all-reduce", r)
              : absl::StrCat("bf16 all-reduce: ", s.ToString()));
  std::vector<float> scattered(count * world);
  for (int64_t i = 0; i < count * world; ++i) scattered[i] = value(r, i);
  s = comm.ReduceScatterSumBf16(scattered.data(), count, nullptr);
  note(s.ok() ? Mismatch(scattered, r * count, (r + 1) * count, want,
                         "bf16 reduce-scatter", r)
              : absl::StrCat("bf16 reduce-scatter: ", s.ToString()));
  // Round to nearest even, not truncation: 1 + 3.75 * 2^-7 is 1 + 4 * 2^-7
  // in bf16 (truncated: 1 + 3 * 2^-7), and every partial sum of up to four
  // of those is a bf16 value, so the sum is exact.
  const float x = 1.0f + 3.75f / 128, rounded = 1.0f + 4.0f / 128;
  std::vector<float> ties(count, x);
  s = comm.AllReduceSumBf16(ties.data(), count, nullptr);
  note(s.ok() ? Mismatch(ties, 0, count,
                         [&](int64_t) { return world == 1 ? x : world * rounded; },
                         "bf16 all-reduce rounding", r)
              : absl::StrCat("bf16 all-reduce: ", s.ToString()));
  return first.empty() ? "" : absl::StrCat("count ", count, ": ", first);
}

}  // namespace trainc::testing
