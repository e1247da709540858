#include "tools/viz/metrics_reader.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/util/status_macros.h"
#include "runtime/json/json.h"
#include "tools/viz/file_util.h"

namespace trainc::viz {
namespace {

// Sorts by step (stable) and keeps the last value of a repeated step.
void Normalize(Series* s) {
  std::vector<size_t> order(s->steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return s->steps[a] < s->steps[b];
  });
  Series out;
  for (size_t i : order) {
    if (!out.steps.empty() && out.steps.back() == s->steps[i]) {
      out.values.back() = s->values[i];
    } else {
      out.steps.push_back(s->steps[i]);
      out.values.push_back(s->values[i]);
    }
  }
  *s = std::move(out);
}

// Members of train and eval records that are not curves.
bool IsDescriptive(const std::string& name) {
  return name == "kind" || name == "step" || name == "time" ||
         name == "epoch" || name == "examples" || name == "tokens";
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string DefaultLabel(const std::string& path) {
  std::string name = BaseName(path);
  for (const char* suffix : {".metrics.jsonl", ".jsonl", ".json"}) {
    if (absl::EndsWith(name, suffix) && name.size() > strlen(suffix)) {
      name.resize(name.size() - strlen(suffix));
      break;
    }
  }
  if (name == "metrics") {  // the default name inside a checkpoint folder
    std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos
                                         ? 0
                                         : path.find_last_of('/'));
    if (!dir.empty()) return BaseName(dir);
  }
  return name;
}

}  // namespace

absl::StatusOr<RunMetrics> ParseMetricsLog(const std::string& text,
                                           const std::string& path) {
  RunMetrics run;
  run.path = path;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  const bool complete = text.empty() || text.back() == '\n';
  for (size_t i = 0; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    if (line.empty() || line == "\r") continue;
    absl::StatusOr<JsonValue> v = ParseJson(line);
    const bool last = i + 1 == lines.size();
    if (!v.ok() && last && !complete) {
      ++run.truncated_lines;  // the line being written when the run stopped
      continue;
    }
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", i + 1, ": ", v.status().message(),
          run.records == 0 ? " (not a metrics log of one JSON object per line, "
                             "as train --metrics writes?)"
                           : ""));
    }
    const JsonValue* kind = v->Find("kind");
    const JsonValue* step = v->Find("step");
    if (!v->is_object() || kind == nullptr || !kind->is_string() ||
        step == nullptr || !step->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", i + 1,
          ": not a metrics record (an object with \"kind\" and \"step\"; is "
          "this a file from train --metrics?)"));
    }
    ++run.records;
    const std::string& k = kind->string_value();
    const int64_t s = static_cast<int64_t>(step->number_value());
    if (k == "run") {
      auto str = [&](const char* name) {
        const JsonValue* m = v->Find(name);
        return m && m->is_string() ? m->string_value() : std::string();
      };
      auto num = [&](const char* name) -> int64_t {
        const JsonValue* m = v->Find(name);
        return m && m->is_number() ? static_cast<int64_t>(m->number_value()) : 0;
      };
      run.model = str("model");
      run.config = absl::StrCat("gpus=", num("gpus"), " micro_batch=",
                                num("micro_batch"), " accumulate=",
                                num("accumulate"));
      if (num("loss_terms") > 0) run.loss_terms = num("loss_terms");
      if (const JsonValue* plan = v->Find("plan")) {
        absl::StatusOr<PlanIdentity> id = PlanIdentityFromJson(*plan);
        if (!id.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ":", i + 1, ": ", id.status().message()));
        }
        run.plans.push_back(*std::move(id));
      }
    } else if (k == "train" || k == "eval") {
      std::map<std::string, Series>& into = k == "train" ? run.train : run.eval;
      for (const auto& [name, value] : v->object_items()) {
        if (!value.is_number() || IsDescriptive(name)) continue;
        into[name].steps.push_back(s);
        into[name].values.push_back(value.number_value());
      }
    } else if (k == "summary") {
      run.has_summary = true;
      if (const JsonValue* m = v->Find("seconds")) run.summary_seconds = m->number_value();
      if (const JsonValue* m = v->Find("samples_per_s")) {
        run.summary_samples_per_s = m->number_value();
      }
    }
    // Other kinds: a newer writer's; ignored.
  }
  for (auto* series : {&run.train, &run.eval}) {
    for (auto& [name, s] : *series) Normalize(&s);
  }
  return run;
}

absl::StatusOr<RunMetrics> ReadMetricsFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseMetricsLog(text, path);
}

void LabelRuns(std::vector<RunMetrics>* runs) {
  for (RunMetrics& r : *runs) {
    if (r.label.empty()) r.label = DefaultLabel(r.path);
  }
  auto duplicates = [&]() {
    std::map<std::string, int> count;
    for (const RunMetrics& r : *runs) ++count[r.label];
    std::set<std::string> out;
    for (const auto& [label, n] : count) {
      if (n > 1) out.insert(label);
    }
    return out;
  };
  std::set<std::string> dup = duplicates();
  for (RunMetrics& r : *runs) {
    if (dup.count(r.label) && !r.config.empty()) {
      r.label = absl::StrCat(r.label, " (", r.config, ")");
    }
  }
  dup = duplicates();
  std::map<std::string, int> seen;
  for (RunMetrics& r : *runs) {
    if (dup.count(r.label)) r.label = absl::StrCat(r.label, " #", ++seen[r.label]);
  }
}

}  // namespace trainc::viz
