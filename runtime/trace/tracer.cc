#include "runtime/trace/tracer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

std::string EventJson(const Plan& plan, int rank, int64_t job_start_ns,
                      const TraceSpan& span) {
  const bool known =
      span.instr >= 0 && span.instr < static_cast<int>(plan.instructions.size());
  const Instruction* instr = known ? &plan.instructions[span.instr] : nullptr;
  std::string name = "?";
  std::string op = "?";
  std::string cat = span.stream == Stream::kComm ? "comm" : "compute";
  std::string extra;
  if (instr != nullptr) {
    op = instr->op;
    cat = PhaseName(instr->phase);
    name = instr->label.empty() ? instr->op : instr->label;
    auto bucket_attr = instr->attrs.find("bucket");
    // Collectives, and only they, run on the comm stream (ValidatePlan).
    const bool collective = instr->stream == Stream::kComm;
    if (collective && bucket_attr != instr->attrs.end()) {
      const int b = static_cast<int>(bucket_attr->second);
      name = absl::StrCat(instr->op, " bucket ", b);
      absl::StrAppend(&extra, ", \"bucket\": ", b);
      if (b >= 0 && b < static_cast<int>(plan.buckets.size())) {
        absl::StrAppend(&extra, ", \"bytes\": ", plan.buckets[b].bytes);
      }
    }
  }
  return absl::StrFormat(
      "{\"name\": %s, \"cat\": %s, \"ph\": \"X\", \"ts\": %.3f, "
      "\"dur\": %.3f, \"pid\": %d, \"tid\": %d, \"args\": {\"instr\": %d, "
      "\"step\": %d, \"micro\": %d, \"op\": %s%s}}",
      JsonQuote(name), JsonQuote(cat),
      (span.begin_ns - job_start_ns) / 1e3, (span.end_ns - span.begin_ns) / 1e3,
      rank, span.stream == Stream::kComm ? 1 : 0, span.instr, span.step,
      span.micro, JsonQuote(op), extra);
}

// One rank's position as an instant event on the stream it was on.
std::string PositionJson(const TracePosition& p) {
  return absl::StrFormat(
      "{\"name\": %s, \"cat\": \"position\", \"ph\": \"i\", \"s\": \"t\", "
      "\"ts\": %.3f, \"pid\": %d, \"tid\": %d, \"args\": {\"step\": %d, "
      "\"instr\": %d, \"instructions\": %d, \"label\": %s, \"state\": %s, "
      "\"seconds\": %.3f, \"behind\": %s, \"where\": %s}}",
      JsonQuote(absl::StrCat("rank ", p.rank, ": stopped here", p.behind ? " (behind)" : "")),
      p.since_us, p.rank, p.in_collective ? 1 : 0, p.step, p.instr, p.instructions,
      JsonQuote(p.label), JsonQuote(p.state), p.seconds, p.behind ? "true" : "false",
      JsonQuote(p.where));
}

// The metadata's "stopped" member.
std::string StopJson(const TraceStop& stop) {
  int behind = -1;
  for (const TracePosition& p : stop.positions) {
    if (p.behind) behind = p.rank;
  }
  return absl::StrFormat(
      ",\n \"stopped\": {\"reason\": %s, \"written_by\": %d, \"behind\": %d, "
      "\"ranks\": %d}",
      JsonQuote(stop.reason), stop.written_by, behind, stop.positions.size());
}

// `text` into `path` whole: a temporary file beside it, then renamed.
absl::Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  std::ofstream out(temp, std::ios::trunc);
  if (!out) return absl::UnavailableError("cannot write trace file " + path);
  out << text;
  out.close();
  if (!out || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::DataLossError("error writing trace file " + path);
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TraceClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Tracer::Tracer(int rank, int64_t job_start_ns)
    : rank_(rank), job_start_ns_(job_start_ns) {}

void Tracer::Add(const TraceSpan& span) {
  absl::MutexLock lock(&mu_);
  spans_.push_back(span);
}

std::vector<TraceSpan> Tracer::spans() const {
  absl::MutexLock lock(&mu_);
  return spans_;
}

int64_t Tracer::steps_traced() const {
  absl::MutexLock lock(&mu_);
  std::set<int64_t> steps;
  for (const TraceSpan& s : spans_) steps.insert(s.step);
  return static_cast<int64_t>(steps.size());
}

void Tracer::Clear() {
  absl::MutexLock lock(&mu_);
  spans_.clear();
}

std::string Tracer::EventsJson(const Plan& plan) const {
  return TraceEventsJson(plan, rank_, job_start_ns_, spans());
}

std::string TraceEventsJson(const Plan& plan, int rank, int64_t job_start_ns,
                            const std::vector<TraceSpan>& spans) {
  std::vector<std::string> events;
  events.reserve(spans.size() + 3);
  events.push_back(absl::StrFormat(
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
      "\"args\": {\"name\": \"rank %d\"}}",
      rank, rank));
  for (int tid : {0, 1}) {
    events.push_back(absl::StrFormat(
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
        "\"args\": {\"name\": \"%s\"}}",
        rank, tid, tid == 0 ? "compute" : "comm"));
  }
  for (const TraceSpan& span : spans) {
    events.push_back(EventJson(plan, rank, job_start_ns, span));
  }
  return absl::StrCat("[\n  ", absl::StrJoin(events, ",\n  "), "\n]");
}

absl::Status MergeTraceParts(const Plan& plan,
                             const std::vector<std::string>& parts,
                             int64_t steps_traced,
                             const std::string& out_path,
                             const TraceStop* stop,
                             const PlanIdentity* identity) {
  std::vector<std::string> bodies;
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::string_view body = absl::StripAsciiWhitespace(parts[i]);
    if (!absl::ConsumePrefix(&body, "[") || !absl::ConsumeSuffix(&body, "]")) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace part ", i, " is not a JSON array of events"));
    }
    body = absl::StripAsciiWhitespace(body);
    if (!body.empty()) bodies.emplace_back(body);
  }
  if (stop != nullptr) {
    for (const TracePosition& p : stop->positions) bodies.push_back(PositionJson(p));
  }
  return WriteWhole(
      out_path,
      absl::StrCat("{\"traceEvents\": [\n  ", absl::StrJoin(bodies, ",\n  "),
                   "\n ],\n \"metadata\": {\"plan_model\": ", JsonQuote(plan.model),
                   ", \"plan_instructions\": ", plan.instructions.size(),
                   ", \"world_size\": ", plan.world_size, ", \"steps_traced\": ", steps_traced,
                   stop != nullptr ? StopJson(*stop) : "",
                   identity != nullptr ? absl::StrCat(",\n \"plan\": ", PlanIdentityJson(*identity))
                                       : "",
                   "}}\n"));
}

}  // namespace trainc
