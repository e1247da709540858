// Reading the metrics logs that `train` writes (--metrics, or beside
// --save; format: runtime/metrics/METRICS_FORMAT.md) for drawing curves.
//
//   ASSIGN_OR_RETURN(RunMetrics run, ReadMetricsFile("a.metrics.jsonl"));
//   const Series& loss = run.train.at("loss");   // steps[i], values[i]
//
// A log that a crash cut short ends in a line without its newline: that
// line is skipped (truncated_lines counts it). Any other bad line is an
// error naming the file and line.
#ifndef TRAINC_TOOLS_VIZ_METRICS_READER_H_
#define TRAINC_TOOLS_VIZ_METRICS_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/trace/plan_identity.h"

namespace trainc::viz {

// One scalar over steps, sorted by step; a step logged twice (a run resumed
// from an earlier checkpoint) keeps its last value. Null values (a loss that
// was not finite) are left out.
struct Series {
  std::vector<int64_t> steps;
  std::vector<double> values;
  bool empty() const { return steps.empty(); }
};

struct RunMetrics {
  std::string path;    // as given
  std::string label;   // legend name (see LabelRuns)
  std::string model;   // from the run record; empty without one
  // "gpus=2 micro_batch=64 accumulate=2" from the run record.
  std::string config;
  int64_t loss_terms = 1;
  // The plan each run record names (its "plan"), in file order: a resumed
  // run adds one. Empty for a log written before train recorded it.
  std::vector<PlanIdentity> plans;
  std::map<std::string, Series> train;  // "loss", "lr", "samples_per_s", ...
  std::map<std::string, Series> eval;   // "loss", "accuracy", "bits_per_byte"
  int64_t records = 0;
  int truncated_lines = 0;
  bool has_summary = false;
  double summary_seconds = 0;
  double summary_samples_per_s = 0;
};

// `text` is the whole file; `path` only names it in errors.
absl::StatusOr<RunMetrics> ParseMetricsLog(const std::string& text,
                                           const std::string& path);
absl::StatusOr<RunMetrics> ReadMetricsFile(const std::string& path);

// Gives each run a distinct legend label: its own `label` when set, else
// the file name less ".metrics.jsonl" / ".jsonl" (the folder's name for a
// plain "metrics.jsonl"); equal labels get their config, then "#N", added.
void LabelRuns(std::vector<RunMetrics>* runs);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_METRICS_READER_H_
