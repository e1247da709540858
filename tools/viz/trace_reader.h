// Reading a runtime trace (runtime/trace/TRACE_FORMAT.md) and matching it to
// the plan it was recorded from.
//
// Only complete events ("ph": "X") carry timing; metadata events ("M") are
// skipped. A trace is rejected, with a message naming the event, when it
// cannot belong to the plan: another model or instruction count in the
// metadata, an instruction id out of range, an op or stream that differs
// from the plan's instruction, a rank outside the world (of an event or a
// stopped job's position).
#ifndef TRAINC_TOOLS_VIZ_TRACE_READER_H_
#define TRAINC_TOOLS_VIZ_TRACE_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/trace/plan_identity.h"

namespace trainc::viz {

struct TraceEvent {
  std::string name;
  std::string cat;  // the instruction's phase
  double ts_us = 0;
  double dur_us = 0;
  int rank = 0;     // pid
  int stream = 0;   // tid: 0 compute, 1 comm
  int instr = -1;
  int64_t step = 0;
  int micro = -1;
  std::string op;
  int bucket = -1;  // all_reduce only
  int64_t bytes = 0;
};

// Where a rank was when its job stopped: an instant event ("ph": "i") of
// cat "position", one per rank (TRACE_FORMAT.md, "Stopped jobs").
struct StopPosition {
  int rank = 0;       // pid
  int stream = 0;     // tid: 1 when it was in a collective
  double ts_us = 0;   // when it got there
  int64_t step = 0;
  int64_t instr = -1;  // -1: none, or the trainer's own collective
  int64_t instructions = 0;
  std::string label;   // "all-reduce of bucket 1"
  std::string state;   // "in all-reduce of bucket 1"
  double seconds = 0;  // how long it had been there
  bool behind = false;
  std::string where;   // the table's line
};

struct Trace {
  std::vector<TraceEvent> events;  // "X" events, in file order
  std::vector<StopPosition> positions;  // a stopped job's, in file order
  std::string stop_reason;         // metadata "stopped"; empty when it did not stop
  std::string plan_model;          // metadata; empty when absent
  int64_t plan_instructions = -1;  // metadata; -1 when absent
  int64_t world_size = -1;
  int64_t steps_traced = -1;
  // metadata "plan": the plan that ran; none in a trace written before
  // train recorded it.
  std::optional<PlanIdentity> plan;
};

// Parses trace JSON text. `source_name` prefixes error messages.
absl::StatusOr<Trace> ParseTrace(const std::string& json_text,
                                 const std::string& source_name);

// Reads and parses a trace file.
absl::StatusOr<Trace> ReadTraceFile(const std::string& path);

// Checks that `trace` was recorded from `plan` (see the file comment).
absl::Status CheckTraceMatchesPlan(const Trace& trace, const Plan& plan);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_TRACE_READER_H_
