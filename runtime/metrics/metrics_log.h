// The metrics of a run as it goes: one JSON object per line (a .jsonl
// file), and optionally the same scalars as TensorBoard event files.
//
//   MetricsLogOptions o;
//   o.jsonl_path = "model.metrics.jsonl";  // or empty: no JSON lines
//   o.tensorboard_dir = "runs/a";           // or empty: no event file
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsLog> log, MetricsLog::Open(o));
//   MetricsRecord r{"train", /*step=*/12, UnixSeconds()};
//   r.scalars = {{"loss", 0.61}, {"lr", 1e-3}};
//   RETURN_IF_ERROR(log->Write(r));
//   // {"kind":"train","step":12,"time":1718000000.25,"loss":0.61,"lr":0.001}
//   // and TensorBoard scalars train/loss, train/lr at step 12
//
// Each line is flushed when written, so a crash loses at most the line
// being written (readers skip a last line without its newline). Record
// kinds the trainer writes (runtime/metrics/METRICS_FORMAT.md):
// "run" (the configuration), "train" (one per step), "eval", "summary".
#ifndef TRAINC_RUNTIME_METRICS_METRICS_LOG_H_
#define TRAINC_RUNTIME_METRICS_METRICS_LOG_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/metrics/tensorboard_writer.h"

namespace trainc {

// Seconds since the Unix epoch, with microseconds.
double UnixSeconds();

// A descriptive member written as is: already JSON (an object, an array).
struct JsonText {
  std::string text;
};

struct MetricsRecord {
  std::string kind;  // "run", "train", "eval", "summary"
  int64_t step = 0;  // global optimizer step
  double time = 0;   // UnixSeconds() when the values were known
  // Descriptive members, JSON only (a count, a model name, the run's plan
  // as a JSON object, ...).
  std::vector<std::pair<std::string, std::variant<int64_t, double, std::string, JsonText>>>
      info;
  // Measured values: in JSON, and in TensorBoard as "<kind>/<name>". A
  // non-finite value is JSON null (TensorBoard gets NaN or inf).
  std::vector<std::pair<std::string, double>> scalars;
};

// The JSON line of `record`, without its newline.
std::string MetricsRecordJson(const MetricsRecord& record);

struct MetricsLogOptions {
  std::string jsonl_path;       // empty: no JSON lines
  std::string tensorboard_dir;  // empty: no TensorBoard event file
  bool append = false;          // continue an existing .jsonl (a resumed run)
};

class MetricsLog {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsLog>> Open(
      const MetricsLogOptions& options);

  // Writes the record to each output. An output that fails (a full disk)
  // is closed for the rest of the run and the error says why ("m.jsonl:
  // No space left on device"), once: metrics are not worth the run, so the
  // caller warns and trains on; the other output keeps going.
  absl::Status Write(const MetricsRecord& record);

  const std::string& jsonl_path() const { return jsonl_path_; }
  // The event file's path; empty without --tensorboard.
  std::string tensorboard_path() const {
    return tensorboard_ ? tensorboard_->path() : std::string();
  }

 private:
  MetricsLog() = default;

  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<EventFileWriter> tensorboard_;
};

// Where the metrics of a run saved to `checkpoint_path` go by default:
// "dir/model.safetensors" -> "dir/model.metrics.jsonl"; a folder
// ("ckpt/" or an existing directory) -> "ckpt/metrics.jsonl".
std::string DefaultMetricsPath(const std::string& checkpoint_path);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_METRICS_METRICS_LOG_H_
