#include "runtime/trace/plan_identity.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/plan/plan_io.h"
#include "compiler/plan/settings.h"
#include "compiler/util/fnv.h"

namespace trainc {
namespace {

// "[["micro_batch", "4"], ...]" or "{"model": "m", ...}".
std::string PairsJson(const NamedValues& pairs, bool as_object) {
  std::vector<std::string> items;
  for (const auto& [name, value] : pairs) {
    items.push_back(as_object ? absl::StrCat(JsonQuote(name), ": ", JsonQuote(value))
                              : absl::StrCat("[", JsonQuote(name), ", ", JsonQuote(value), "]"));
  }
  return as_object ? absl::StrCat("{", absl::StrJoin(items, ", "), "}")
                   : absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

absl::Status WrongType(const std::string& member, const char* want) {
  return absl::InvalidArgumentError(
      absl::StrCat("\"plan\" member \"", member, "\" must be ", want));
}

absl::StatusOr<NamedValues> OverridesFromJson(const JsonValue& v) {
  if (!v.is_array()) return WrongType("overrides", "an array of [field, value] pairs");
  NamedValues out;
  for (const JsonValue& item : v.array_items()) {
    const std::vector<JsonValue>& pair = item.array_items();
    if (!item.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      return WrongType("overrides", "an array of [field, value] pairs");
    }
    out.emplace_back(pair[0].string_value(), pair[1].string_value());
  }
  return out;
}

absl::StatusOr<NamedValues> SettingsFromJson(const JsonValue& v) {
  if (!v.is_object()) return WrongType("settings", "an object of strings");
  NamedValues out;
  for (const auto& [name, value] : v.object_items()) {
    if (!value.is_string()) return WrongType("settings", "an object of strings");
    out.emplace_back(name, value.string_value());
  }
  return out;
}

}  // namespace

std::string TextHash(absl::string_view text) { return HashHex(Fnv1a().Bytes(text).value()); }

NamedValues PlanSettings(const Plan& plan) {
  int64_t parameters = 0;
  for (const int b : plan.parameter_buffers) {
    int64_t n = 1;
    for (const int64_t d : plan.buffers[b].shape) n *= d;
    parameters += n;
  }
  auto s = [](auto v) { return absl::StrCat(v); };
  return {{"model", plan.model},
          {"gpus", s(plan.world_size)},
          {"micro_batch", s(plan.micro_batch)},
          {"accumulate", s(plan.accumulate)},
          {"global_batch", s(plan.global_batch)},
          {"epochs", s(plan.epochs)},
          {"steps", s(plan.steps)},
          {"seed", s(plan.seed)},
          {"optimizer", EnumName(plan.optimizer.kind)},
          {"lr", s(plan.optimizer.lr)},
          {"schedule", absl::StrCat(EnumName(plan.schedule.kind), ", warmup ",
                                    plan.schedule.warmup_steps, ", ",
                                    plan.schedule.total_steps, " steps")},
          {"precision", EnumName(plan.precision)},
          {"zero", s(plan.zero)},
          {"bucket_mb", s(plan.bucket_mb)},
          {"parameters", s(parameters)},
          {"instructions", s(plan.instructions.size())},
          {"buckets", s(plan.buckets.size())}};
}

PlanIdentity IdentifyPlan(const Plan& plan, const std::string& input,
                          const NamedValues& overrides) {
  PlanIdentity id;
  id.hash = HashHex(PlanHash(plan));
  id.source = input.empty() ? plan.source : input;
  id.overrides = overrides;
  id.settings = PlanSettings(plan);
  if (absl::EndsWith(id.source, ".train")) {
    std::ifstream in(id.source, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (in) id.source_hash = TextHash(text.str());
  }
  return id;
}

std::string OverridesText(const NamedValues& overrides) {
  std::vector<std::string> words;
  for (const auto& [field, value] : overrides) {
    const bool plain = !value.empty() && value.find_first_of(" \t\"'\\") == std::string::npos;
    words.push_back(absl::StrCat("--", field, " ", plain ? value : JsonQuote(value)));
  }
  return absl::StrJoin(words, " ");
}

std::string PlanIdentityJson(const PlanIdentity& id) {
  return absl::StrCat("{\"hash\": ", JsonQuote(id.hash), ", \"source\": ", JsonQuote(id.source),
                      ", \"source_hash\": ", JsonQuote(id.source_hash),
                      ", \"overrides\": ", PairsJson(id.overrides, /*as_object=*/false),
                      ", \"device\": ", JsonQuote(id.device),
                      ", \"overlap\": ", id.overlap ? "true" : "false",
                      ", \"settings\": ", PairsJson(id.settings, /*as_object=*/true), "}");
}

absl::StatusOr<PlanIdentity> PlanIdentityFromJson(const JsonValue& v) {
  if (!v.is_object()) return absl::InvalidArgumentError("\"plan\" must be an object");
  PlanIdentity id;
  for (auto [name, into] : {std::pair<const char*, std::string*>{"hash", &id.hash},
                            {"source", &id.source},
                            {"source_hash", &id.source_hash},
                            {"device", &id.device}}) {
    const JsonValue* m = v.Find(name);
    if (m == nullptr) continue;
    if (!m->is_string()) return WrongType(name, "a string");
    *into = m->string_value();
  }
  if (id.hash.empty()) return WrongType("hash", "a non-empty string");
  if (const JsonValue* m = v.Find("overlap")) {
    if (!m->is_bool()) return WrongType("overlap", "true or false");
    id.overlap = m->bool_value();
  }
  if (const JsonValue* m = v.Find("overrides")) {
    absl::StatusOr<NamedValues> overrides = OverridesFromJson(*m);
    if (!overrides.ok()) return overrides.status();
    id.overrides = *std::move(overrides);
  }
  if (const JsonValue* m = v.Find("settings")) {
    absl::StatusOr<NamedValues> settings = SettingsFromJson(*m);
    if (!settings.ok()) return settings.status();
    id.settings = *std::move(settings);
  }
  return id;
}

std::vector<std::string> SettingDifferences(const NamedValues& a, const std::string& a_name,
                                            const NamedValues& b, const std::string& b_name) {
  std::vector<std::string> out;
  for (const auto& [name, in_a] : a) {
    for (const auto& [other, in_b] : b) {
      if (other == name && in_b != in_a) {
        out.push_back(absl::StrCat(name, ": ", in_a, " in ", a_name, ", ", in_b, " in ", b_name));
      }
    }
  }
  return out;
}

}  // namespace trainc
