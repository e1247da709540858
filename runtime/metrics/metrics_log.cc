#include "runtime/metrics/metrics_log.h"

#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/util/status_macros.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

// The shortest text that reads back as the same double, or with
// `digits` significant digits (10 keeps every float32 exact, and spares a
// reader "185.84063600000002" ms).
std::string JsonNumber(double v, int digits = 0) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const std::to_chars_result r =
      digits > 0 ? std::to_chars(buf, buf + sizeof buf, v,
                                 std::chars_format::general, digits)
                 : std::to_chars(buf, buf + sizeof buf, v);
  std::string out(buf, r.ptr);
  // A measured value always reads as a float ("2.0", not "2"), so that a
  // reader can tell it from the descriptive integers (epoch, examples).
  if (digits > 0 && out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

}  // namespace

double UnixSeconds() {
  return static_cast<double>(absl::ToUnixMicros(absl::Now())) / 1e6;
}

std::string MetricsRecordJson(const MetricsRecord& r) {
  std::string out = absl::StrCat("{\"kind\":", JsonQuote(r.kind),
                                 ",\"step\":", r.step,
                                 ",\"time\":", JsonNumber(r.time));
  for (const auto& [name, value] : r.info) {
    absl::StrAppend(&out, ",", JsonQuote(name), ":");
    if (const int64_t* i = std::get_if<int64_t>(&value)) {
      absl::StrAppend(&out, *i);
    } else if (const double* d = std::get_if<double>(&value)) {
      absl::StrAppend(&out, JsonNumber(*d));
    } else if (const JsonText* j = std::get_if<JsonText>(&value)) {
      absl::StrAppend(&out, j->text);
    } else {
      absl::StrAppend(&out, JsonQuote(std::get<std::string>(value)));
    }
  }
  for (const auto& [name, value] : r.scalars) {
    absl::StrAppend(&out, ",", JsonQuote(name), ":", JsonNumber(value, 10));
  }
  return out + "}";
}

absl::StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(
    const MetricsLogOptions& options) {
  std::unique_ptr<MetricsLog> log(new MetricsLog());
  if (!options.jsonl_path.empty()) {
    const std::filesystem::path parent =
        std::filesystem::path(options.jsonl_path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    log->jsonl_path_ = options.jsonl_path;
    log->jsonl_.open(options.jsonl_path,
                     options.append ? std::ios::app : std::ios::trunc);
    if (!log->jsonl_) {
      return absl::InternalError(
          absl::StrCat("--metrics: cannot write ", options.jsonl_path));
    }
  }
  if (!options.tensorboard_dir.empty()) {
    ASSIGN_OR_RETURN(log->tensorboard_, EventFileWriter::Create(
                                            options.tensorboard_dir, UnixSeconds()));
  }
  return log;
}

absl::Status MetricsLog::Write(const MetricsRecord& record) {
  absl::Status status;
  if (jsonl_.is_open()) {
    errno = 0;
    jsonl_ << MetricsRecordJson(record) << '\n';
    jsonl_.flush();
    if (!jsonl_) {
      const int error = errno;
      jsonl_.close();
      status = absl::ResourceExhaustedError(absl::StrCat(
          "cannot write the metrics log ", jsonl_path_, ": ",
          error != 0 ? std::strerror(error) : "write failed", "; it stops here"));
    }
  }
  if (tensorboard_ && !record.scalars.empty()) {
    ScalarValues values;
    for (const auto& [name, value] : record.scalars) {
      values.emplace_back(absl::StrCat(record.kind, "/", name),
                          static_cast<float>(value));
    }
    absl::Status written = tensorboard_->WriteScalars(record.time, record.step, values);
    if (!written.ok()) {
      tensorboard_.reset();
      if (status.ok()) {
        status = absl::ResourceExhaustedError(
            absl::StrCat(written.message(), "; the TensorBoard events stop here"));
      }
    }
  }
  return status;
}

std::string DefaultMetricsPath(const std::string& checkpoint_path) {
  if (checkpoint_path.empty()) return "";
  std::error_code ec;
  if (checkpoint_path.back() == '/' ||
      std::filesystem::is_directory(checkpoint_path, ec)) {
    std::string dir = checkpoint_path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/metrics.jsonl";
  }
  const std::filesystem::path p(checkpoint_path);
  std::filesystem::path out = p;
  out.replace_extension();  // model.safetensors -> model; model -> model
  return out.string() + ".metrics.jsonl";
}

}  // namespace trainc
