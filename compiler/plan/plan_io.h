// Reading and writing a Plan as text.
//
// The format is line oriented, one record per line, so that two plans can be
// compared with `diff`:
//
//   trainc-plan 1
//   model fashion_mlp
//   config world_size=2 micro_batch=64 accumulate=2 ...
//   buffer 3 name=h1.weight kind=parameter dtype=f32 shape=256x784 offset=... 
//   instr 12 op=linear stream=compute phase=forward micro=0 in=0,3,4 out=5 ...
//   bucket 0 bytes=... grad=.. params=h3.weight,h3.bias ...
//   end
//
// Parsing checks the version and every reference (buffer and event ids in
// range, shapes match bytes) and reports the line of the first problem.
#ifndef TRAINC_COMPILER_PLAN_PLAN_IO_H_
#define TRAINC_COMPILER_PLAN_PLAN_IO_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc {

std::string PlanToText(const Plan& plan);
absl::StatusOr<Plan> PlanFromText(const std::string& text,
                                  const std::string& source_name = "plan");

// The plan's identity: FNV-1a (compiler/util/fnv.h) of its text without
// its `source`, so the same plan compiled from a file named otherwise has
// the same hash; the same on every machine and in every process. The plan
// handshake compares it between ranks; traces and metrics logs record it
// (as HashHex, runtime/trace/plan_identity.h).
uint64_t PlanHash(const Plan& plan);

absl::Status WritePlanFile(const Plan& plan, const std::string& path);
absl::StatusOr<Plan> ReadPlanFile(const std::string& path);

// Structural checks: ids in range, bytes match shapes, buffers in the arena,
// every waited event recorded earlier on the other stream. Used after
// parsing and by the planner's tests.
absl::Status ValidatePlan(const Plan& plan);

// The buffers an instruction's op lets share bytes (ops::OpDef::in_place):
// {input buffer id, output buffer id}, or nullopt. Whether they do share
// them is the planner's decision, which ValidatePlan checks.
std::optional<std::pair<int, int>> InPlaceOperands(const Instruction& in);

// ZeRO-3: each gathered parameter span's views (the parameter buffers
// inside its bytes and live within it), by span id, found as ValidatePlan
// finds them (O(n log n) in the plan's buffers).
std::map<int, std::vector<int>> GatheredSpanViews(const Plan& plan);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLAN_PLAN_IO_H_
