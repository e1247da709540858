// Tracer: per-instruction timings of a rank, written as the Chrome trace of
// runtime/trace/TRACE_FORMAT.md.
//
//   Tracer tracer(rank, job_start_ns);       // job_start_ns: same on every rank
//   Executor executor(plan, &device, comm, &tracer);
//   ... steps ...
//   std::string part = tracer.EventsJson(plan);   // this rank's events
//   // rank 0, once it has every rank's part (how they travel is the
//   // launcher's business, e.g. one file per rank):
//   RETURN_IF_ERROR(MergeTraceParts(plan, parts, tracer.steps_traced(), path));
//
// Times are steady_clock (CLOCK_MONOTONIC) nanoseconds, which every process
// of one machine shares, so local ranks line up when they pass the same
// `job_start_ns`. Add() is thread-safe (the CPU comm stream reports from its
// worker thread).
#ifndef TRAINC_RUNTIME_TRACE_TRACER_H_
#define TRAINC_RUNTIME_TRACE_TRACER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "compiler/plan/plan.h"
#include "runtime/trace/plan_identity.h"

namespace trainc {

// One instruction's run on one stream.
struct TraceSpan {
  int instr = 0;       // Plan::instructions index
  int64_t step = 0;    // optimizer step (StepState::step)
  int micro = -1;      // Instruction::micro_step
  Stream stream = Stream::kCompute;
  int64_t begin_ns = 0;  // steady_clock
  int64_t end_ns = 0;
};

// steady_clock::now() in nanoseconds: the clock of TraceSpan and job starts.
int64_t TraceClockNs();

class Tracer {
 public:
  // `job_start_ns` is time zero of the trace; by default, now.
  explicit Tracer(int rank, int64_t job_start_ns = TraceClockNs());

  int rank() const { return rank_; }
  int64_t job_start_ns() const { return job_start_ns_; }

  void Add(const TraceSpan& span);
  std::vector<TraceSpan> spans() const;
  // Distinct steps with at least one span.
  int64_t steps_traced() const;
  void Clear();

  // This rank's events (plus the stream-name metadata events) as a JSON
  // array: one part for MergeTraceParts.
  std::string EventsJson(const Plan& plan) const;

 private:
  const int rank_;
  const int64_t job_start_ns_;
  mutable absl::Mutex mu_;
  std::vector<TraceSpan> spans_ ABSL_GUARDED_BY(mu_);
};

// Where a rank was when the job stopped: a line of runtime/position's
// table, recorded as an instant event (TRACE_FORMAT.md, "Stopped jobs").
struct TracePosition {
  int rank = 0;
  int64_t step = 0;
  int64_t instr = -1;         // -1: none, or the trainer's own collective
  int64_t instructions = 0;   // in the plan; 0: unknown
  std::string label;          // "all-reduce of bucket 1", "data \"load_batch micro 0\""
  std::string state;          // "in all-reduce of bucket 1", "running ..."
  bool in_collective = false;  // drawn on the comm stream
  double seconds = 0;         // how long it had been there
  bool behind = false;
  std::string where;          // the table's whole line for the rank
  double since_us = 0;        // when it got there, from the job start
};

// Why a job stopped and where each rank was.
struct TraceStop {
  std::string reason;   // the error that stopped it
  int written_by = 0;   // the rank that wrote the file
  std::vector<TracePosition> positions;
};

// The same as Tracer::EventsJson, for spans that travelled without a Tracer.
std::string TraceEventsJson(const Plan& plan, int rank, int64_t job_start_ns,
                            const std::vector<TraceSpan>& spans);

// Joins the parts (EventsJson of each rank, any order) into one trace file
// with the format's metadata; `steps_traced` goes into it as is. With
// `stop`, the file also says why the job stopped and holds one instant
// event per rank where it was. With `identity`, the metadata records the
// plan that ran ("plan": PlanIdentityJson). Written whole, then renamed
// over `out_path`, so ranks that write the same path leave one whole file.
absl::Status MergeTraceParts(const Plan& plan,
                             const std::vector<std::string>& parts,
                             int64_t steps_traced, const std::string& out_path,
                             const TraceStop* stop = nullptr,
                             const PlanIdentity* identity = nullptr);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRACE_TRACER_H_
