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

// The same as Tracer::EventsJson, for spans that travelled without a Tracer.
std::string TraceEventsJson(const Plan& plan, int rank, int64_t job_start_ns,
                            const std::vector<TraceSpan>& spans);

// Joins the parts (EventsJson of each rank, any order) into one trace file
// with the format's metadata; `steps_traced` goes into it as is.
absl::Status MergeTraceParts(const Plan& plan,
                             const std::vector<std::string>& parts,
                             int64_t steps_traced, const std::string& out_path);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRACE_TRACER_H_
