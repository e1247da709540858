#include "compiler/cost/machine_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/did_you_mean.h"

namespace trainc::cost {
namespace {

constexpr ops::OpCategory kCategories[] = {
    ops::OpCategory::kData,          ops::OpCategory::kMatmul,
    ops::OpCategory::kElementwise,   ops::OpCategory::kNormalization,
    ops::OpCategory::kEmbedding,     ops::OpCategory::kAttention,
    ops::OpCategory::kConvolution,   ops::OpCategory::kPooling,
    ops::OpCategory::kLoss,          ops::OpCategory::kCollective,
    ops::OpCategory::kOptimizer,
};

bool IsCategory(const std::string& name) {
  for (ops::OpCategory c : kCategories) {
    if (name == ops::OpCategoryName(c)) return true;
  }
  return false;
}

// A scalar key: how to store its value, and whether a file must give it.
struct ScalarKey {
  const char* key;
  bool required;
  // Stores `value` (as typed) into the profile; an error says what is
  // accepted, without the location (the caller adds it).
  std::function<absl::Status(MachineProfile&, const std::string&)> set;
};

absl::StatusOr<double> ParseNumber(const std::string& value, bool positive) {
  double v;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number, got '", value, "'"));
  }
  if (positive ? v <= 0 : v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "must be ", positive ? "> 0" : ">= 0", ", got ", value));
  }
  return v;
}

// A double field that must be > 0 (`positive`) or >= 0.
ScalarKey Number(const char* key, bool required, double MachineProfile::*field,
                 bool positive) {
  return {key, required,
          [field, positive](MachineProfile& p, const std::string& v) -> absl::Status {
            absl::StatusOr<double> n = ParseNumber(v, positive);
            if (!n.ok()) return n.status();
            p.*field = *n;
            return absl::OkStatus();
          }};
}

ScalarKey LinkNumber(const char* key, LinkProfile MachineProfile::*link,
                     double LinkProfile::*field, bool positive) {
  return {key, true,
          [link, field, positive](MachineProfile& p, const std::string& v) -> absl::Status {
            absl::StatusOr<double> n = ParseNumber(v, positive);
            if (!n.ok()) return n.status();
            (p.*link).*field = *n;
            return absl::OkStatus();
          }};
}

const std::vector<ScalarKey>& ScalarKeys() {
  static const auto* keys = new std::vector<ScalarKey>{
      {"name", true,
       [](MachineProfile& p, const std::string& v) {
         p.name = v;
         return absl::OkStatus();
       }},
      Number("compute.peak_flops", true, &MachineProfile::peak_flops, true),
      Number("compute.peak_flops_tf32", false, &MachineProfile::peak_flops_tf32, true),
      Number("compute.peak_flops_bf16", false, &MachineProfile::peak_flops_bf16, true),
      Number("compute.memory_bandwidth", true, &MachineProfile::memory_bandwidth, true),
      Number("compute.kernel_overhead_us", true, &MachineProfile::kernel_overhead_us, false),
      {"compute.host_synchronous", true,
       [](MachineProfile& p, const std::string& v) {
         if (v != "true" && v != "false") {
           return absl::InvalidArgumentError(
               absl::StrCat("expected true or false, got '", v, "'"));
         }
         p.host_synchronous = v == "true";
         return absl::OkStatus();
       }},
      Number("compute.step_overhead_us", true, &MachineProfile::step_overhead_us, false),
      Number("compute.rank_imbalance", false, &MachineProfile::rank_imbalance, false),
      Number("compute.comm_contention", false, &MachineProfile::comm_contention, false),
      {"network.ranks_per_node", true,
       [](MachineProfile& p, const std::string& v) {
         int n;
         if (!absl::SimpleAtoi(v, &n) || n < 1) {
           return absl::InvalidArgumentError(
               absl::StrCat("expected an integer >= 1, got '", v, "'"));
         }
         p.ranks_per_node = n;
         return absl::OkStatus();
       }},
      LinkNumber("network.intra.alpha_us", &MachineProfile::intra, &LinkProfile::alpha_us, false),
      LinkNumber("network.intra.bandwidth_GBps", &MachineProfile::intra,
                 &LinkProfile::bandwidth_GBps, true),
      LinkNumber("network.inter.alpha_us", &MachineProfile::inter, &LinkProfile::alpha_us, false),
      LinkNumber("network.inter.bandwidth_GBps", &MachineProfile::inter,
                 &LinkProfile::bandwidth_GBps, true),
      {"network.all_reduce", true,
       [](MachineProfile& p, const std::string& v) {
         for (AllReduceAlgorithm a :
              {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree,
               AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kWholeBufferRing}) {
           if (v == AllReduceAlgorithmName(a)) {
             p.all_reduce = a;
             return absl::OkStatus();
           }
         }
         return absl::InvalidArgumentError(absl::StrCat(
             "expected ring, tree, auto or whole_buffer_ring, got '", v, "'"));
       }},
      Number("network.reduce_bandwidth", true, &MachineProfile::reduce_bandwidth, true),
  };
  return *keys;
}

// "efficiency.matmul" -> checks "matmul" names an op or a category.
absl::Status SetPerOp(MachineProfile& p, const std::string& key,
                      const std::string& value) {
  const bool efficiency = absl::StartsWith(key, "efficiency.");
  const std::string kind = key.substr(key.find('.') + 1);
  std::vector<std::string> names;
  for (const ops::OpDef& def : ops::AllOps()) names.push_back(def.name);
  if (efficiency) {
    for (ops::OpCategory c : kCategories) names.push_back(ops::OpCategoryName(c));
  }
  if (ops::FindOp(kind) == nullptr && !(efficiency && IsCategory(kind))) {
    const std::string close = ClosestMatch(kind, names);
    return absl::InvalidArgumentError(absl::StrCat(
        "'", kind, "' is not an op", efficiency ? " or an op category" : "",
        close.empty() ? "" : absl::StrCat(" (did you mean '", close, "'?)")));
  }
  absl::StatusOr<double> n = ParseNumber(value, /*positive=*/true);
  if (!n.ok()) return n.status();
  (efficiency ? p.efficiency : p.scale)[kind] = *n;
  return absl::OkStatus();
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

}  // namespace

const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kTree: return "tree";
    case AllReduceAlgorithm::kAuto: return "auto";
    case AllReduceAlgorithm::kWholeBufferRing: return "whole_buffer_ring";
  }
  return "?";
}

absl::StatusOr<MachineProfile> ParseMachineProfile(const std::string& text,
                                                   const std::string& source_name) {
  MachineProfile profile;
  std::set<std::string> seen;
  std::vector<std::string> known;
  for (const ScalarKey& k : ScalarKeys()) known.push_back(k.key);
  known.push_back("efficiency.<op or category>");
  known.push_back("scale.<op>");

  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    auto fail = [&](const std::string& message) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ":", line_number, ": ", message));
    };
    std::string line(raw.substr(0, raw.find('#')));
    absl::StripAsciiWhitespace(&line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return fail(absl::StrCat("expected 'key = value', got '", line, "'"));
    }
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    absl::StripAsciiWhitespace(&key);
    absl::StripAsciiWhitespace(&value);
    if (key.empty() || value.empty()) {
      return fail(absl::StrCat("expected 'key = value', got '", line, "'"));
    }
    if (!seen.insert(key).second) return fail(absl::StrCat(key, ": given twice"));
    absl::Status status;
    if (absl::StartsWith(key, "efficiency.") || absl::StartsWith(key, "scale.")) {
      status = SetPerOp(profile, key, value);
    } else {
      const ScalarKey* found = nullptr;
      for (const ScalarKey& k : ScalarKeys()) {
        if (key == k.key) found = &k;
      }
      if (found == nullptr) {
        const std::string close = ClosestMatch(key, known);
        return fail(absl::StrCat(
            "unknown key '", key, "'",
            close.empty() ? absl::StrCat(" (keys: ", absl::StrJoin(known, ", "), ")")
                          : absl::StrCat(" (did you mean '", close, "'?)")));
      }
      status = found->set(profile, value);
    }
    if (!status.ok()) return fail(absl::StrCat(key, ": ", status.message()));
  }
  std::vector<std::string> missing;
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.required && !seen.count(k.key)) missing.push_back(k.key);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": missing ", absl::StrJoin(missing, ", ")));
  }
  if (!seen.count("compute.peak_flops_tf32")) profile.peak_flops_tf32 = profile.peak_flops;
  if (!seen.count("compute.peak_flops_bf16")) profile.peak_flops_bf16 = profile.peak_flops;
  return profile;
}

absl::Status CheckProfileFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError("it is a directory");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("it is not a regular file (a pipe or a device?)");
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return absl::PermissionDeniedError(std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<MachineProfile> ReadMachineProfile(const std::string& path) {
  absl::Status readable = CheckProfileFile(path);
  std::ifstream in;
  if (readable.ok()) in.open(path);
  if (readable.ok() && !in) readable = absl::NotFoundError(std::strerror(errno));
  if (!readable.ok()) {
    return absl::Status(readable.code(), absl::StrCat("cannot read the machine profile '", path,
                                                      "': ", readable.message()));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseMachineProfile(text.str(), path);
}

std::string FormatMachineProfile(const MachineProfile& p, const std::string& header) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(header, '\n')) {
    absl::StrAppend(&out, line.empty() ? "#" : absl::StrCat("# ", line), "\n");
  }
  auto kv = [&out](const std::string& key, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-30s = %s\n", key, value));
  };
  kv("name", p.name);
  kv("compute.peak_flops", Num(p.peak_flops));
  kv("compute.peak_flops_tf32", Num(p.peak_flops_tf32));
  kv("compute.peak_flops_bf16", Num(p.peak_flops_bf16));
  kv("compute.memory_bandwidth", Num(p.memory_bandwidth));
  kv("compute.kernel_overhead_us", Num(p.kernel_overhead_us));
  kv("compute.host_synchronous", p.host_synchronous ? "true" : "false");
  kv("compute.step_overhead_us", Num(p.step_overhead_us));
  kv("compute.rank_imbalance", Num(p.rank_imbalance));
  kv("compute.comm_contention", Num(p.comm_contention));
  for (const auto& [kind, e] : p.efficiency) kv("efficiency." + kind, Num(e));
  for (const auto& [op, s] : p.scale) kv("scale." + op, Num(s));
  kv("network.ranks_per_node", absl::StrCat(p.ranks_per_node));
  kv("network.intra.alpha_us", Num(p.intra.alpha_us));
  kv("network.intra.bandwidth_GBps", Num(p.intra.bandwidth_GBps));
  kv("network.inter.alpha_us", Num(p.inter.alpha_us));
  kv("network.inter.bandwidth_GBps", Num(p.inter.bandwidth_GBps));
  kv("network.all_reduce", AllReduceAlgorithmName(p.all_reduce));
  kv("network.reduce_bandwidth", Num(p.reduce_bandwidth));
  return out;
}

}  // namespace trainc::cost
