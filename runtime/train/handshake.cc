#include "runtime/train/handshake.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/plan/plan_io.h"
#include "compiler/util/fnv.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

// Up to this many examples or windows, evenly spaced, stand for the data's
// contents (hashing a corpus of many GiB whole at every start would not be
// free); the labels are hashed whole.
constexpr int64_t kDataSamples = 256;

uint64_t HashData(const Dataset& data) {
  Fnv1a h;
  const int64_t n = data.size();
  h.Int(static_cast<uint64_t>(n));
  h.Int(data.is_token_windows() ? static_cast<uint64_t>(data.context())
                                : static_cast<uint64_t>(data.feature_dim()));
  const int64_t samples = std::min(n, kDataSamples);
  std::vector<float> row(data.is_token_windows() ? 0 : data.feature_dim());
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t i = samples == 1 ? 0 : s * (n - 1) / (samples - 1);
    if (data.is_token_windows()) {
      const absl::Span<const int32_t> w = data.window(i);
      h.Words(w.data(), w.size() * sizeof(int32_t));
    } else {
      data.CopyFeatures(i, row.data());
      h.Words(row.data(), row.size() * sizeof(float));
    }
  }
  if (!data.is_token_windows()) {
    for (int64_t i = 0; i < n; ++i) h.Int(static_cast<uint32_t>(data.label(i)));
  }
  return h.value();
}

// ZeRO-3 keeps another shard of the parameters on every rank: 0 then
// (nothing to compare; the plan's hash still covers how they are made).
absl::StatusOr<uint64_t> HashParameters(const Plan& plan, Device& device, int64_t* count) {
  Fnv1a h;
  std::vector<char> bytes;
  *count = 0;
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    if (plan.zero >= 3) {
      *count += b.bytes / DTypeBytes(b.dtype);
      continue;
    }
    bytes.resize(b.bytes);
    RETURN_IF_ERROR(device.Download(b.offset, bytes.data(), b.bytes));
    h.Words(bytes.data(), bytes.size());
    *count += b.bytes / DTypeBytes(b.dtype);
  }
  return h.value();
}

// Fields whose values are hashes: a difference is named, not printed.
const char* HashMeaning(const std::string& field) {
  if (field == "plan") return "another compiled plan";
  if (field == "data") return "other training data";
  if (field == "weights") return "other initial weights (--init-from, --resume or the seed)";
  return nullptr;
}

// 16 bits per float: every value survives the all-gather exactly.
std::vector<float> Encode(const RankFingerprint& f) {
  std::vector<float> out;
  for (const auto& [name, v] : f.fields) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<float>((v >> (16 * i)) & 0xffff));
  }
  return out;
}

RankFingerprint Decode(const RankFingerprint& shape, const float* in) {
  RankFingerprint f = shape;
  for (size_t j = 0; j < f.fields.size(); ++j) {
    uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(in[4 * j + i]) << (16 * i);
    f.fields[j].second = v;
  }
  return f;
}

}  // namespace

absl::StatusOr<RankFingerprint> FingerprintRank(const Plan& plan, const Dataset& data,
                                                Device& device, const TrainingState& state) {
  int64_t parameters = 0;
  ASSIGN_OR_RETURN(const uint64_t weights, HashParameters(plan, device, &parameters));
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  RankFingerprint f;
  f.fields = {{"world_size", u(plan.world_size)},
              {"global_batch", u(plan.global_batch)},
              {"micro_batch", u(plan.micro_batch)},
              {"accumulate", u(plan.accumulate)},
              {"steps", u(plan.steps)},
              {"epochs", u(plan.epochs)},
              {"seed", u(plan.seed)},
              {"deterministic", plan.deterministic ? 1u : 0u},
              {"zero", u(plan.zero)},
              {"parameters", u(parameters)},
              {"instructions", u(static_cast<int64_t>(plan.instructions.size()))},
              {"arena_bytes", u(plan.arena_bytes)},
              {"plan", PlanHash(plan)},  // as traces record it
              {"samples", u(data.size())},
              {"data", HashData(data)},
              {"weights", weights},
              {"step", u(state.step)}};
  return f;
}

absl::Status CompareFingerprints(const std::vector<RankFingerprint>& all) {
  std::vector<std::string> lines;
  for (size_t r = 1; r < all.size(); ++r) {
    std::vector<std::string> numbers, hashes;
    for (size_t j = 0; j < all[r].fields.size(); ++j) {
      const auto& [name, v] = all[r].fields[j];
      const uint64_t want = all[0].fields[j].second;
      if (v == want) continue;
      if (const char* meaning = HashMeaning(name)) {
        hashes.push_back(meaning);
      } else {
        numbers.push_back(absl::StrCat(name, " ", v, " (rank 0: ", want, ")"));
      }
    }
    if (numbers.empty() && hashes.empty()) continue;
    // Different numbers make a different plan: say the plan only when
    // nothing else explains it.
    if (!numbers.empty()) {
      hashes.erase(std::remove(hashes.begin(), hashes.end(), HashMeaning("plan")),
                   hashes.end());
    }
    numbers.insert(numbers.end(), hashes.begin(), hashes.end());
    lines.push_back(absl::StrCat("  rank ", r, ": ", absl::StrJoin(numbers, ", ")));
  }
  if (lines.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks disagree before the first step; every rank must run the same plan (the "
      "same .train file and overrides) on the same data from the same weights:\n",
      absl::StrJoin(lines, "\n")));
}

absl::Status AgreeBeforeFirstStep(Communicator& comm, const RankFingerprint& mine) {
  const std::vector<float> encoded = Encode(mine);
  const int64_t count = static_cast<int64_t>(encoded.size());
  std::vector<float> all(count * comm.world_size());
  RETURN_IF_ERROR(comm.AllGather(encoded.data(), all.data(), count, nullptr));
  std::vector<RankFingerprint> fingerprints;
  for (int r = 0; r < comm.world_size(); ++r) {
    fingerprints.push_back(Decode(mine, all.data() + r * count));
  }
  return CompareFingerprints(fingerprints);
}

}  // namespace trainc
