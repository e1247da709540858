#include "runtime/trace/tracer.h"

#include <chrono>
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
    const bool collective = instr->op == "all_reduce" ||
                            instr->op == "reduce_scatter" ||
                            instr->op == "all_gather";
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
                             const std::string& out_path) {
  std::vector<absl::string_view> bodies;
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::string_view body = absl::StripAsciiWhitespace(parts[i]);
    if (!absl::ConsumePrefix(&body, "[") || !absl::ConsumeSuffix(&body, "]")) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace part ", i, " is not a JSON array of events"));
    }
    body = absl::StripAsciiWhitespace(body);
    if (!body.empty()) bodies.push_back(body);
  }
  std::ofstream out(out_path, std::ios::trunc);
  if (!out) {
    return absl::UnavailableError("cannot write trace file " + out_path);
  }
  out << "{\"traceEvents\": [\n  " << absl::StrJoin(bodies, ",\n  ")
      << "\n ],\n \"metadata\": {\"plan_model\": " << JsonQuote(plan.model)
      << ", \"plan_instructions\": " << plan.instructions.size()
      << ", \"world_size\": " << plan.world_size
      << ", \"steps_traced\": " << steps_traced << "}}\n";
  out.close();
  if (!out) return absl::DataLossError("error writing trace file " + out_path);
  return absl::OkStatus();
}

}  // namespace trainc
