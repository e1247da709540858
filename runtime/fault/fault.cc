#include "runtime/fault/fault.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainc {
namespace {

absl::Status Malformed(const std::string& spec, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "fault '", spec, "': ", why,
      " (expected loader_sleep:rank=R:step=S:seconds=N or loader_slow:rank=R:ms=M)"));
}

// key=value pairs, each key once.
absl::StatusOr<std::map<std::string, std::string>> Pairs(const std::string& spec,
                                                         const std::vector<std::string>& parts) {
  std::map<std::string, std::string> pairs;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::vector<std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Malformed(spec, absl::StrCat("'", parts[i], "' is not key=value"));
    }
    if (!pairs.emplace(kv[0], kv[1]).second) {
      return Malformed(spec, absl::StrCat("'", kv[0], "' is given twice"));
    }
  }
  return pairs;
}

// pairs[key] as a whole number in [low, high], taken out of `pairs`.
absl::StatusOr<int64_t> Take(const std::string& spec, std::map<std::string, std::string>& pairs,
                             const std::string& key, int64_t low, int64_t high) {
  auto it = pairs.find(key);
  if (it == pairs.end()) return Malformed(spec, absl::StrCat("no ", key, "="));
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < low || value > high) {
    return Malformed(spec, absl::StrCat(key, "=", it->second, " is not a whole number in [", low,
                                        ", ", high, "]"));
  }
  pairs.erase(it);
  return value;
}

}  // namespace

absl::StatusOr<Fault> ParseFault(const std::string& spec) {
  Fault fault;
  if (spec.empty()) return fault;
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts[0] != "loader_sleep" && parts[0] != "loader_slow") {
    return Malformed(spec, absl::StrCat("unknown fault '", parts[0], "'"));
  }
  auto pairs = Pairs(spec, parts);
  if (!pairs.ok()) return pairs.status();
  absl::StatusOr<int64_t> rank = Take(spec, *pairs, "rank", 0, 1 << 20);
  if (!rank.ok()) return rank.status();
  fault.rank = static_cast<int>(*rank);
  if (parts[0] == "loader_slow") {
    fault.kind = Fault::Kind::kLoaderSlow;
    absl::StatusOr<int64_t> ms = Take(spec, *pairs, "ms", 0, 3600 * 1000);
    if (!ms.ok()) return ms.status();
    fault.ms = *ms;
  } else {
    fault.kind = Fault::Kind::kLoaderSleep;
    absl::StatusOr<int64_t> step = Take(spec, *pairs, "step", 1, int64_t{1} << 40);
    if (!step.ok()) return step.status();
    absl::StatusOr<int64_t> seconds = Take(spec, *pairs, "seconds", 0, 7 * 24 * 3600);
    if (!seconds.ok()) return seconds.status();
    fault.step = *step;
    fault.seconds = *seconds;
  }
  if (!pairs->empty()) return Malformed(spec, absl::StrCat("unknown key '", pairs->begin()->first, "'"));
  return fault;
}

absl::StatusOr<Fault> FaultFromEnvironment() {
  const char* spec = std::getenv(kFaultEnv);
  absl::StatusOr<Fault> fault = ParseFault(spec != nullptr ? spec : "");
  if (!fault.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kFaultEnv, ": ", fault.status().message()));
  }
  return fault;
}

absl::Status SleepingBatchSource::Fill(int micro_step, const Plan& plan, Device& device) {
  if (fault_.kind == Fault::Kind::kLoaderSlow) {
    if (!slept_) {
      slept_ = true;
      log_ << "train: fault injection (" << kFaultEnv << "): rank " << fault_.rank << " sleeps "
           << fault_.ms << " ms in every load_batch" << std::endl;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(fault_.ms));
  } else if (!slept_ && step_ == fault_.step) {
    slept_ = true;
    log_ << "train: fault injection (" << kFaultEnv << "): rank " << fault_.rank << " sleeps "
         << fault_.seconds << " s in load_batch at step " << step_ << std::endl;
    std::this_thread::sleep_for(std::chrono::seconds(fault_.seconds));
  }
  return inner_->Fill(micro_step, plan, device);
}

}  // namespace trainc
