#include "tools/viz/trace_reader.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/json/json.h"
#include "tools/viz/file_util.h"

namespace trainc::viz {
namespace {

absl::Status FieldError(const std::string& source, size_t index,
                        const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": traceEvents[", index, "]: ", what));
}

// Reads an integer-valued number member; `required` makes absence an error.
absl::Status GetInt(const JsonValue& obj, const char* key, bool required,
                    int64_t* out, const std::string& source, size_t index) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr) {
    if (required) return FieldError(source, index, absl::StrCat("missing \"", key, "\""));
    return absl::OkStatus();
  }
  if (!v->is_number() || v->number_value() != std::floor(v->number_value())) {
    return FieldError(source, index,
                      absl::StrCat("\"", key, "\" must be an integer"));
  }
  *out = v->is_integer() ? v->integer_value()
                         : static_cast<int64_t>(v->number_value());
  return absl::OkStatus();
}

absl::Status GetNumber(const JsonValue& obj, const char* key, double* out,
                       const std::string& source, size_t index) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr || !v->is_number()) {
    return FieldError(source, index,
                      absl::StrCat("\"", key, "\" must be a number"));
  }
  *out = v->number_value();
  return absl::OkStatus();
}

absl::Status GetString(const JsonValue& obj, const char* key, std::string* out) {
  const JsonValue* v = obj.Find(key);
  if (v != nullptr && v->is_string()) *out = v->string_value();
  return absl::OkStatus();
}

// An instant event of cat "position": where a rank was when the job
// stopped.
absl::StatusOr<StopPosition> ParsePosition(const JsonValue& e, const std::string& source,
                                           size_t i) {
  StopPosition p;
  int64_t pid = 0, tid = 0;
  RETURN_IF_ERROR(GetInt(e, "pid", true, &pid, source, i));
  RETURN_IF_ERROR(GetInt(e, "tid", true, &tid, source, i));
  RETURN_IF_ERROR(GetNumber(e, "ts", &p.ts_us, source, i));
  p.rank = static_cast<int>(pid);
  p.stream = tid == 1 ? 1 : 0;
  const JsonValue* args = e.Find("args");
  if (args == nullptr || !args->is_object()) {
    return FieldError(source, i, "a position without \"args\" (step, instr, where)");
  }
  RETURN_IF_ERROR(GetInt(*args, "step", true, &p.step, source, i));
  RETURN_IF_ERROR(GetInt(*args, "instr", true, &p.instr, source, i));
  RETURN_IF_ERROR(GetInt(*args, "instructions", false, &p.instructions, source, i));
  RETURN_IF_ERROR(GetString(*args, "label", &p.label));
  RETURN_IF_ERROR(GetString(*args, "state", &p.state));
  RETURN_IF_ERROR(GetString(*args, "where", &p.where));
  if (args->Find("seconds") != nullptr) {
    RETURN_IF_ERROR(GetNumber(*args, "seconds", &p.seconds, source, i));
  }
  const JsonValue* behind = args->Find("behind");
  p.behind = behind != nullptr && behind->is_bool() && behind->bool_value();
  return p;
}

// A complete ("X") event: an instruction's span on one rank's stream.
absl::StatusOr<TraceEvent> ParseSpan(const JsonValue& e, const std::string& source_name,
                                     size_t i) {
  TraceEvent ev;
  RETURN_IF_ERROR(GetString(e, "name", &ev.name));
  RETURN_IF_ERROR(GetString(e, "cat", &ev.cat));
  RETURN_IF_ERROR(GetNumber(e, "ts", &ev.ts_us, source_name, i));
  RETURN_IF_ERROR(GetNumber(e, "dur", &ev.dur_us, source_name, i));
  if (ev.dur_us < 0) return FieldError(source_name, i, "negative \"dur\"");
  int64_t pid = 0, tid = 0;
  RETURN_IF_ERROR(GetInt(e, "pid", true, &pid, source_name, i));
  RETURN_IF_ERROR(GetInt(e, "tid", true, &tid, source_name, i));
  if (tid != 0 && tid != 1) {
    return FieldError(source_name, i,
                      absl::StrCat("tid ", tid, " is neither 0 (compute) nor 1 (comm)"));
  }
  ev.rank = static_cast<int>(pid);
  ev.stream = static_cast<int>(tid);
  const JsonValue* args = e.Find("args");
  if (args == nullptr || !args->is_object()) {
    return FieldError(source_name, i, "missing \"args\" (instr, step, op)");
  }
  int64_t instr = -1, micro = -1, bucket = -1;
  RETURN_IF_ERROR(GetInt(*args, "instr", true, &instr, source_name, i));
  RETURN_IF_ERROR(GetInt(*args, "step", true, &ev.step, source_name, i));
  RETURN_IF_ERROR(GetInt(*args, "micro", false, &micro, source_name, i));
  RETURN_IF_ERROR(GetInt(*args, "bucket", false, &bucket, source_name, i));
  RETURN_IF_ERROR(GetInt(*args, "bytes", false, &ev.bytes, source_name, i));
  RETURN_IF_ERROR(GetString(*args, "op", &ev.op));
  ev.instr = static_cast<int>(instr);
  ev.micro = static_cast<int>(micro);
  ev.bucket = static_cast<int>(bucket);
  return ev;
}

// The trace's "metadata" object: the plan's model and size, the world
// size, the steps traced, why the job stopped and the plan's identity.
absl::Status ParseMetadata(const JsonValue& meta, const std::string& source_name,
                           Trace* trace) {
  RETURN_IF_ERROR(GetString(meta, "plan_model", &trace->plan_model));
  auto get = [&](const char* key, int64_t* out) -> absl::Status {
    const JsonValue* v = meta.Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_name, ": metadata \"", key, "\" must be a number"));
    }
    *out = static_cast<int64_t>(v->number_value());
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(get("plan_instructions", &trace->plan_instructions));
  RETURN_IF_ERROR(get("world_size", &trace->world_size));
  RETURN_IF_ERROR(get("steps_traced", &trace->steps_traced));
  if (const JsonValue* stopped = meta.Find("stopped");
      stopped != nullptr && stopped->is_object()) {
    RETURN_IF_ERROR(GetString(*stopped, "reason", &trace->stop_reason));
  }
  if (const JsonValue* plan = meta.Find("plan")) {
    absl::StatusOr<PlanIdentity> id = PlanIdentityFromJson(*plan);
    if (!id.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": metadata ", id.status().message()));
    }
    trace->plan = *std::move(id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(const std::string& json_text,
                                 const std::string& source_name) {
  absl::StatusOr<JsonValue> doc = ParseJson(json_text);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ":", doc.status().message()));
  }
  if (!doc->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": expected a JSON object with \"traceEvents\""));
  }
  const JsonValue* events = doc->Find("traceEvents");
  if (events == nullptr || !events->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": no \"traceEvents\" array"));
  }
  Trace trace;
  const auto& items = events->array_items();
  for (size_t i = 0; i < items.size(); ++i) {
    const JsonValue& e = items[i];
    if (!e.is_object()) return FieldError(source_name, i, "not an object");
    const JsonValue* ph = e.Find("ph");
    if (ph == nullptr || !ph->is_string()) {
      return FieldError(source_name, i, "missing \"ph\"");
    }
    const JsonValue* cat = e.Find("cat");
    if (ph->string_value() == "i" && cat != nullptr && cat->is_string() &&
        cat->string_value() == "position") {
      ASSIGN_OR_RETURN(StopPosition p, ParsePosition(e, source_name, i));
      trace.positions.push_back(std::move(p));
      continue;
    }
    if (ph->string_value() != "X") continue;  // metadata, other instants, ...
    ASSIGN_OR_RETURN(TraceEvent ev, ParseSpan(e, source_name, i));
    trace.events.push_back(std::move(ev));
  }
  if (const JsonValue* meta = doc->Find("metadata");
      meta != nullptr && meta->is_object()) {
    RETURN_IF_ERROR(ParseMetadata(*meta, source_name, &trace));
  }
  return trace;
}

absl::StatusOr<Trace> ReadTraceFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseTrace(text, path);
}

absl::Status CheckTraceMatchesPlan(const Trace& trace, const Plan& plan) {
  auto mismatch = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("trace does not match the plan: ", what));
  };
  if (!trace.plan_model.empty() && trace.plan_model != plan.model) {
    return mismatch(absl::StrCat("trace is of model \"", trace.plan_model,
                                 "\", plan is of \"", plan.model, "\""));
  }
  const int64_t n = static_cast<int64_t>(plan.instructions.size());
  if (trace.plan_instructions >= 0 && trace.plan_instructions != n) {
    return mismatch(absl::StrCat("trace metadata says ", trace.plan_instructions,
                                 " instructions, plan has ", n));
  }
  if (trace.world_size >= 0 && trace.world_size != plan.world_size) {
    return mismatch(absl::StrCat("trace world_size ", trace.world_size,
                                 ", plan world_size ", plan.world_size));
  }
  for (const StopPosition& p : trace.positions) {
    const std::string where = absl::StrCat("the position of rank ", p.rank);
    if (p.rank < 0 || p.rank >= plan.world_size) {
      return mismatch(absl::StrCat(where, ": outside world of ", plan.world_size));
    }
    if (p.instr >= n) {
      return mismatch(absl::StrCat(where, ": instr ", p.instr, " out of range [0, ", n, ")"));
    }
  }
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    std::string where = absl::StrCat("event ", i, " (\"", e.name, "\")");
    if (e.instr < 0 || e.instr >= n) {
      return mismatch(absl::StrCat(where, ": instr ", e.instr,
                                   " out of range [0, ", n, ")"));
    }
    if (e.rank < 0 || e.rank >= plan.world_size) {
      return mismatch(absl::StrCat(where, ": rank ", e.rank,
                                   " outside world of ", plan.world_size));
    }
    const Instruction& in = plan.instructions[e.instr];
    if (!e.op.empty() && e.op != in.op) {
      return mismatch(absl::StrCat(where, ": op \"", e.op, "\" but instr ",
                                   e.instr, " is \"", in.op, "\""));
    }
    int want_stream = in.stream == Stream::kComm ? 1 : 0;
    if (e.stream != want_stream) {
      return mismatch(absl::StrCat(where, ": on tid ", e.stream, " but instr ",
                                   e.instr, " runs on the ",
                                   StreamName(in.stream), " stream"));
    }
    if (e.bucket >= 0) {
      auto it = in.attrs.find("bucket");
      if (it == in.attrs.end() || static_cast<int>(it->second) != e.bucket) {
        return mismatch(absl::StrCat(where, ": bucket ", e.bucket,
                                     " is not instr ", e.instr, "'s bucket"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace trainc::viz
