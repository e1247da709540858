// What a run records of the plan it trained, in its trace (metadata "plan")
// and its metrics log (the run record's "plan"), so that tools/viz draws
// that plan, not the file's own: the input as typed, its --FIELD VALUE
// overrides, and the plan's identity (a hash of its text), with its
// headline settings to name what differs when a file was edited since.
//
//   PlanIdentity id = IdentifyPlan(plan, "model.train", {{"steps", "6"}});
//   id.device = "cpu";
//   std::string json = PlanIdentityJson(id);   // {"hash": "...", ...}
//   ...
//   ASSIGN_OR_RETURN(std::optional<PlanIdentity> back,
//                    PlanIdentityFromJson(*metadata.Find("plan")));
#ifndef TRAINC_RUNTIME_TRACE_PLAN_IDENTITY_H_
#define TRAINC_RUNTIME_TRACE_PLAN_IDENTITY_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/plan/plan.h"
#include "runtime/json/json.h"

namespace trainc {

using NamedValues = std::vector<std::pair<std::string, std::string>>;

struct PlanIdentity {
  std::string hash;         // HashHex(PlanHash) of the plan that ran (plan_io.h)
  std::string source;       // the input as typed: a .train file or a plan file
  std::string source_hash;  // TextHash of the .train's text; empty for a plan file
  NamedValues overrides;    // --FIELD VALUE, in command-line order
  std::string device;       // the backend it was planned for: "cpu" or "cuda"
  bool overlap = true;      // train --no-overlap: false (bucket_mb = auto prices it)
  NamedValues settings;     // PlanSettings of the plan that ran
};

// 16 hex digits of a 64-bit FNV-1a hash of `text` (compiler/util/fnv.h):
// the same on every machine and in every process.
std::string TextHash(absl::string_view text);

// The plan's headline settings by name: model, gpus, micro_batch,
// accumulate, global_batch, epochs, steps, seed, optimizer, lr, schedule,
// precision,
// zero, bucket_mb, parameters (elements), instructions, buckets.
NamedValues PlanSettings(const Plan& plan);

// The identity of `plan` compiled from `input` (a .train file, whose text is
// read and hashed, or a plan file) with `overrides`; device and overlap are
// left to the caller.
PlanIdentity IdentifyPlan(const Plan& plan, const std::string& input,
                          const NamedValues& overrides);

// "--micro_batch 4 --steps 6" (a value with a space or quote in JSON quotes).
std::string OverridesText(const NamedValues& overrides);

// The identity as a JSON object (TRACE_FORMAT.md, "The plan that ran").
std::string PlanIdentityJson(const PlanIdentity& identity);

// Reads PlanIdentityJson's object back; a member of the wrong type is an
// error naming it, an unknown member is ignored (a newer writer's).
absl::StatusOr<PlanIdentity> PlanIdentityFromJson(const JsonValue& value);

// One line per setting that differs between `a` and `b` (settings of
// both), e.g. "micro_batch: 4 in the run, 16 in model.train" for `a_name`
// "the run" and `b_name` "model.train".
std::vector<std::string> SettingDifferences(const NamedValues& a, const std::string& a_name,
                                            const NamedValues& b, const std::string& b_name);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRACE_PLAN_IDENTITY_H_
