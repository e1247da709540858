#include "compiler/frontend/train_checker.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/cost/machine_profile.h"
#include "compiler/frontend/batch_arithmetic.h"
#include "compiler/frontend/setting.h"
#include "compiler/util/did_you_mean.h"

namespace trainc {

const std::vector<std::string>& OverridableFields() {
  static const auto* fields = new std::vector<std::string>{
      "gpus",  "micro_batch",   "accumulate", "global_batch",
      "epochs", "steps",        "lr",         "seed",
      "deterministic", "tf32",  "bucket_mb",  "first_bucket_mb",
      "clip_grad_norm", "skip_nonfinite", "checkpoint_every", "checkpoint_keep",
      "checkpoint_dir", "zero", "zero_gather", "zero_accumulate", "zero_prefetch",
      "grad_comm", "precision", "machine", "recompute", "memory", "fusion"};
  return *fields;
}

namespace frontend {
namespace {

// The highest ZeRO stage: 3 shards the parameters too.
constexpr int64_t kMaxZeroStage = 3;

// The true/false fields, each with the member it sets.
constexpr std::pair<const char*, bool TrainConfig::*> kSwitches[] = {
    {"deterministic", &TrainConfig::deterministic},
    {"tf32", &TrainConfig::tf32},
    {"recompute", &TrainConfig::recompute},
    {"fusion", &TrainConfig::fusion},
    {"skip_nonfinite", &TrainConfig::skip_nonfinite}};

}  // namespace
}  // namespace frontend

std::vector<std::string> FieldChoices(const std::string& field) {
  for (const auto& [name, member] : frontend::kSwitches) {
    if (field == name) return {"true", "false"};
  }
  if (field == "zero") {
    std::vector<std::string> stages;
    for (int64_t stage = 0; stage <= frontend::kMaxZeroStage; ++stage) {
      stages.push_back(absl::StrCat(stage));
    }
    return stages;
  }
  if (field == "precision") return EnumNames<Precision>();
  if (field == "grad_comm") return EnumNames<GradComm>();
  if (field == "zero_gather") return EnumNames<ZeroGather>();
  if (field == "zero_accumulate") return EnumNames<ZeroAccumulate>();
  return {};
}

namespace frontend {
namespace {

const std::vector<std::string>& TrainFields() {
  static const auto* fields = new std::vector<std::string>{
      "gpus",     "micro_batch", "accumulate", "global_batch",
      "epochs",   "steps",       "optimizer",  "schedule",
      "bucket_mb", "first_bucket_mb", "seed",  "deterministic",
      "tf32",     "clip_grad_norm", "skip_nonfinite", "checkpoint_every",
      "checkpoint_keep", "checkpoint_dir", "zero", "zero_gather", "zero_accumulate",
      "zero_prefetch", "grad_comm", "precision", "machine", "recompute", "memory", "fusion"};
  return *fields;
}

bool Contains(const std::vector<std::string>& list, const std::string& name) {
  for (const std::string& item : list) {
    if (item == name) return true;
  }
  return false;
}

// A call like `adamw(lr = 1e-3)`, or a bare name `constant`, split into its
// name and named arguments; positional and repeated arguments are reported.
struct NamedCall {
  std::string name;
  Span name_span;
  std::map<std::string, Setting> args;
};

std::optional<NamedCall> ReadNamedCall(const Setting& setting,
                                       const std::string& what,
                                       DiagnosticSink& sink) {
  const ast::Expr& expr = *setting.expr;
  NamedCall call;
  call.name = expr.text;
  call.name_span = expr.kind == ast::Expr::Kind::kCall ? expr.name_span
                                                       : expr.span;
  if (expr.kind != ast::Expr::Kind::kCall &&
      expr.kind != ast::Expr::Kind::kName) {
    ReportSetting(setting, sink,
                  absl::StrCat(setting.field, " must be ", what, ", got ",
                               DescribeExpr(expr)));
    return std::nullopt;
  }
  bool ok = true;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    const std::string& arg_name = expr.arg_names[i];
    if (arg_name.empty()) {
      const bool cosine = ParseEnum<ScheduleKind>(call.name) == ScheduleKind::kCosine;
      sink.Error(expr.args[i].span,
                 absl::StrCat(call.name, "() takes named arguments only"),
                 absl::StrCat("e.g. ", cosine ? "cosine(warmup = 100)" : "adamw(lr = 1e-3)"));
      ok = false;
      continue;
    }
    if (call.args.count(arg_name) > 0) {
      sink.Error(expr.arg_name_spans[i],
                 absl::StrCat("argument '", arg_name, "' is given twice"));
      ok = false;
      continue;
    }
    Setting arg;
    arg.field = arg_name;
    arg.expr = &expr.args[i];
    arg.name_span = expr.arg_name_spans[i];
    call.args.emplace(arg_name, arg);
  }
  if (!ok) return std::nullopt;
  return call;
}

// Reports arguments outside `accepted` (with a did-you-mean).
bool CheckArgNames(const NamedCall& call,
                   const std::vector<std::string>& accepted,
                   DiagnosticSink& sink) {
  bool ok = true;
  for (const auto& [name, arg] : call.args) {
    if (Contains(accepted, name)) continue;
    const std::string takes =
        accepted.empty()
            ? absl::StrCat(call.name, " takes no arguments")
            : absl::StrCat(call.name, " takes: ", absl::StrJoin(accepted, ", "));
    const std::string match = ClosestMatch(name, accepted);
    sink.Error(arg.name_span,
               absl::StrCat("unknown argument '", name, "' for ", call.name),
               match.empty() ? takes
                             : absl::StrCat("did you mean '", match, "'? ",
                                            takes));
    ok = false;
  }
  return ok;
}

// A number in [0, 1): momentum, betas.
std::optional<double> Fraction(const Setting& setting, DiagnosticSink& sink) {
  std::optional<double> value = NumberAtLeast(setting, 0, true, sink);
  if (value && *value >= 1.0) {
    ReportSetting(setting, sink,
                  absl::StrCat(setting.field, " must be in [0, 1), got ",
                               FormatFloat(*value)));
    return std::nullopt;
  }
  return value;
}

// decay = "matrices" (the default) or "all": which parameters weight
// decay applies to.
void CheckDecay(const Setting& s, OptimizerSpec* optimizer, DiagnosticSink& sink) {
  if (auto v = String(s, sink)) {
    if (*v == "matrices" || *v == "all") {
      optimizer->decay_all = *v == "all";
    } else {
      ReportSetting(s, sink,
                    absl::StrCat("decay must be \"matrices\" (parameters "
                                 "with 2 or more dimensions, the default) "
                                 "or \"all\", got \"",
                                 *v, "\""),
                    "e.g. adamw(lr = 1e-3, weight_decay = 0.1, decay = "
                    "\"all\")");
    }
  }
}

// betas = (beta1, beta2): AdamW's pair of fractions.
void CheckBetas(const Setting& s, OptimizerSpec* optimizer, DiagnosticSink& sink) {
  const ast::Expr& e = *s.expr;
  if (e.kind != ast::Expr::Kind::kTuple || e.args.size() != 2) {
    ReportSetting(s, sink,
                  absl::StrCat("betas must be a pair of numbers, got ",
                               e.kind == ast::Expr::Kind::kTuple
                                   ? absl::StrCat("a tuple of ",
                                                  e.args.size())
                                   : DescribeExpr(e)),
                  "e.g. betas = (0.9, 0.999)");
  } else {
    double betas[2] = {optimizer->beta1, optimizer->beta2};
    for (int i = 0; i < 2; ++i) {
      Setting element;
      element.field = absl::StrCat("betas[", i, "]");
      element.expr = &e.args[i];
      if (auto v = Fraction(element, sink)) betas[i] = *v;
    }
    optimizer->beta1 = betas[0];
    optimizer->beta2 = betas[1];
  }
}

void CheckOptimizer(const Setting& setting, OptimizerSpec* optimizer,
                    DiagnosticSink& sink) {
  std::optional<NamedCall> call =
      ReadNamedCall(setting, "sgd(...) or adamw(...)", sink);
  if (!call) return;
  const std::optional<OptimizerKind> kind = ParseEnum<OptimizerKind>(call->name);
  if (!kind) {
    sink.Error(call->name_span,
               absl::StrCat("unknown optimizer '", call->name, "'"),
               SuggestionHint(call->name, EnumNames<OptimizerKind>(), "optimizers"));
    return;
  }
  const bool sgd = *kind == OptimizerKind::kSgd;
  const std::vector<std::string> accepted =
      sgd ? std::vector<std::string>{"lr", "momentum", "nesterov",
                                     "weight_decay", "decay"}
          : std::vector<std::string>{"lr", "betas", "eps", "weight_decay",
                                     "decay"};
  if (!CheckArgNames(*call, accepted, sink)) return;
  optimizer->kind = *kind;
  const auto arg = [&](const char* name) -> const Setting* {
    auto it = call->args.find(name);
    return it == call->args.end() ? nullptr : &it->second;
  };
  if (const Setting* s = arg("lr")) {
    if (auto v = NumberAtLeast(*s, 0, false, sink)) optimizer->lr = *v;
  }
  if (const Setting* s = arg("weight_decay")) {
    if (auto v = NumberAtLeast(*s, 0, true, sink)) optimizer->weight_decay = *v;
  }
  if (const Setting* s = arg("decay")) CheckDecay(*s, optimizer, sink);
  if (const Setting* s = arg("momentum")) {
    if (auto v = Fraction(*s, sink)) optimizer->momentum = *v;
  }
  if (const Setting* s = arg("nesterov")) {
    if (auto v = Bool(*s, sink)) {
      optimizer->nesterov = *v;
      if (*v && optimizer->momentum == 0.0) {
        ReportSetting(*s, sink, "nesterov needs momentum > 0",
                      "e.g. sgd(lr = 0.1, momentum = 0.9, nesterov = true)");
      }
    }
  }
  if (const Setting* s = arg("eps")) {
    if (auto v = NumberAtLeast(*s, 0, false, sink)) optimizer->eps = *v;
  }
  if (const Setting* s = arg("betas")) CheckBetas(*s, optimizer, sink);
}

void CheckSchedule(const Setting& setting, ScheduleSpec* schedule,
                   DiagnosticSink& sink) {
  std::optional<NamedCall> call =
      ReadNamedCall(setting, "constant or cosine(warmup = N)", sink);
  if (!call) return;
  const std::optional<ScheduleKind> kind = ParseEnum<ScheduleKind>(call->name);
  if (!kind) {
    sink.Error(call->name_span,
               absl::StrCat("unknown schedule '", call->name, "'"),
               SuggestionHint(call->name, EnumNames<ScheduleKind>(), "schedules"));
    return;
  }
  schedule->kind = *kind;
  if (*kind == ScheduleKind::kConstant) {
    CheckArgNames(*call, {}, sink);
    return;
  }
  if (!CheckArgNames(*call, {"warmup"}, sink)) return;
  auto it = call->args.find("warmup");
  if (it != call->args.end()) {
    if (auto v = NonNegativeInt(it->second, sink)) schedule->warmup_steps = *v;
  }
}

// A choice among the names of an enumerated setting (grad_comm = fp32 |
// bf16, zero_gather = step_end | next_forward; compiler/plan/settings.h):
// a bare name in the file, the word as a flag. `what` names the choice in
// the error ("gradient format").
template <typename Enum>
void CheckChoice(const Setting& setting, const std::string& field,
                 const std::string& what, Enum* choice, DiagnosticSink& sink) {
  const std::vector<std::string> choices = EnumNames<Enum>();
  std::string name;
  if (setting.from_flag()) {
    name = setting.flag_text;
  } else if (setting.expr != nullptr &&
             setting.expr->kind == ast::Expr::Kind::kName) {
    name = setting.expr->text;
  } else {
    ReportSetting(setting, sink,
                  absl::StrCat(field, " must be ", absl::StrJoin(choices, " or "), ", got ",
                               setting.expr != nullptr
                                   ? DescribeExpr(*setting.expr)
                                   : std::string("nothing")));
    return;
  }
  const std::optional<Enum> value = ParseEnum<Enum>(name);
  if (!value) {
    ReportSetting(setting, sink,
                  absl::StrCat("unknown ", what, " '", name, "'"),
                  SuggestionHint(name, choices, "choices"));
    return;
  }
  *choice = *value;
}

// A note at the setting in the file, or about its flag.
void NoteSetting(const Setting& setting, const std::string& message, DiagnosticSink& sink) {
  if (setting.from_flag() || setting.expr == nullptr) {
    sink.CommandLineNote(absl::StrCat("--", setting.field, ": ", message));
  } else {
    sink.Note(setting.expr->span, message);
  }
}

// zero_prefetch = auto | 0..kMaxZeroPrefetch buckets.
void CheckZeroPrefetch(const Setting& setting, int64_t* prefetch, DiagnosticSink& sink) {
  constexpr int64_t kMaxZeroPrefetch = 8;
  const std::string hint = absl::StrCat(
      "zero_prefetch is how many buckets ahead ZeRO-3 all-gathers parameters: 0 to ",
      kMaxZeroPrefetch, ", or auto (the planner picks the least predicted step)");
  const bool word = setting.from_flag()
                        ? setting.flag_text == "auto"
                        : setting.expr != nullptr && setting.expr->kind == ast::Expr::Kind::kName &&
                              setting.expr->text == "auto";
  if (word) {
    *prefetch = -1;
    return;
  }
  if (setting.expr != nullptr && setting.expr->kind == ast::Expr::Kind::kName) {
    ReportSetting(setting, sink,
                  absl::StrCat("zero_prefetch must be a number or auto, got '",
                               setting.expr->text, "'"),
                  hint);
    return;
  }
  if (auto v = NonNegativeInt(setting, sink)) {
    if (*v > kMaxZeroPrefetch) {
      ReportSetting(setting, sink,
                    absl::StrCat("zero_prefetch must be at most ", kMaxZeroPrefetch, ", got ", *v),
                    hint);
      return;
    }
    *prefetch = *v;
  }
}

// bucket_mb = auto | MB >= 0: a bare name or a number in the file, the
// word or the number as a flag.
void CheckBucketMb(const Setting& setting, TrainConfig* config,
                   DiagnosticSink& sink) {
  const char kHint[] =
      "bucket_mb is a size in MB >= 0 (0: one bucket per parameter) or auto "
      "(the planner picks the size with the least predicted step time)";
  std::string word;
  double number = 0;
  if (setting.from_flag()) {
    if (!absl::SimpleAtod(setting.flag_text, &number)) word = setting.flag_text;
  } else if (setting.expr != nullptr &&
             setting.expr->kind == ast::Expr::Kind::kName) {
    word = setting.expr->text;
  }
  if (word == "auto") {
    config->bucket_mb_auto = true;
    return;
  }
  if (!word.empty()) {
    ReportSetting(setting, sink,
                  absl::StrCat("bucket_mb must be a number or auto, got '",
                               word, "'"),
                  ClosestMatch(word, {"auto"}).empty()
                      ? std::string(kHint)
                      : std::string("did you mean 'auto'?"));
    return;
  }
  if (auto v = NumberAtLeast(setting, 0, true, sink)) {
    config->bucket_mb = *v;
    config->bucket_mb_auto = false;
  }
}

// memory = "80GiB": a size with its unit (KiB, MiB, GiB, TiB; a bare number
// of bytes), > 0.
void CheckMemory(const Setting& setting, TrainConfig* config, DiagnosticSink& sink) {
  std::optional<std::string> text;
  if (setting.from_flag()) {
    text = setting.flag_text;
  } else if (setting.expr != nullptr && setting.expr->kind == ast::Expr::Kind::kString) {
    text = setting.expr->text;
  } else {
    text = "(not a string)";
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}};
  absl::string_view number = absl::StripAsciiWhitespace(*text);
  double scale = 1;
  for (const auto& [unit, bytes] : kUnits) {
    if (absl::ConsumeSuffix(&number, unit)) {
      scale = bytes;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(number), &value) || !(value > 0) ||
      value * scale > 9e18) {
    ReportSetting(setting, sink,
                  absl::StrCat("memory must be a size such as \"80GiB\", got \"", *text, "\""),
                  "a number > 0 with KiB, MiB, GiB or TiB (or bytes): the budget of "
                  "each device");
    return;
  }
  config->memory_bytes = static_cast<int64_t>(value * scale);
}

// machine = "NAME" | "path/to/file.profile": a bundled profile's name is
// checked here; a file must be a regular file (a folder or a pipe is
// refused here, not read as an empty profile) and is read by the planner.
void CheckMachine(const Setting& setting, const std::string& base_dir, std::string* machine,
                  DiagnosticSink& sink) {
  std::optional<std::string> value = String(setting, sink);
  if (!value) return;
  const std::vector<std::string> names = cost::BundledProfileNames();
  if (Contains(names, *value)) {
    *machine = *value;
    return;
  }
  if (!absl::StrContains(*value, '/') && !absl::EndsWith(*value, ".profile")) {
    ReportSetting(setting, sink,
                  absl::StrCat("unknown machine profile '", *value, "'"),
                  absl::StrCat(SuggestionHint(*value, names, "bundled profiles"),
                               " (or a path to a .profile file)"));
    return;
  }
  // A flag's path is the shell's: relative to the working directory.
  const std::string path =
      setting.from_flag() ? *value : ResolvePath(base_dir, *value);
  const absl::Status readable = cost::CheckProfileFile(path);
  if (!readable.ok()) {
    ReportSetting(setting, sink, absl::StrCat("cannot read the machine profile '", *value,
                                              "': ", readable.message()),
                  path != *value ? absl::StrCat("looked for ", path, " (next to the .train file)")
                                 : "");
    return;
  }
  *machine = path;
}

class TrainChecker {
 public:
  TrainChecker(const ast::Block* block, DiagnosticSink& sink, std::string base_dir)
      : block_(block), sink_(sink), base_dir_(std::move(base_dir)) {}

  std::optional<TrainConfig> Check(const Overrides& overrides) {
    const int errors_before = sink_.error_count();
    CollectFileSettings();
    CollectFlags(overrides);
    // Without a block (reported as missing) only the flags are checked.
    if (block_ != nullptr) {
      CheckDuration();
      CheckBatch();
    }
    CheckOptimizerAndRun();
    CheckDistribution();
    CheckCheckpointsAndMemory();
    if (sink_.error_count() > errors_before) return std::nullopt;
    return config_;
  }

 private:
  // The optimizer, its schedule, the buckets, the seed and the switches.
  void CheckOptimizerAndRun() {
    if (const Setting* s = File("optimizer")) {
      CheckOptimizer(*s, &config_.optimizer, sink_);
    }
    if (const Setting* s = Flag("lr")) {
      if (auto v = NumberAtLeast(*s, 0, false, sink_)) config_.optimizer.lr = *v;
    }
    if (const Setting* s = File("schedule")) {
      CheckSchedule(*s, &config_.schedule, sink_);
      CheckWarmupFitsRun(*s);
    }
    if (const Setting* s = Effective("bucket_mb")) {
      CheckBucketMb(*s, &config_, sink_);
    }
    if (const Setting* s = Effective("machine")) {
      CheckMachine(*s, base_dir_, &config_.machine, sink_);
    }
    if (const Setting* s = Effective("first_bucket_mb")) {
      if (auto v = NumberAtLeast(*s, 0, true, sink_)) {
        config_.first_bucket_mb = *v;
      }
    }
    if (const Setting* s = Effective("seed")) {
      if (auto v = NonNegativeInt(*s, sink_)) config_.seed = *v;
    }
    for (const auto& [field, member] : kSwitches) {
      if (const Setting* s = Effective(field)) {
        if (auto v = Bool(*s, sink_)) config_.*member = *v;
      }
    }
    if (const Setting* s = Effective("clip_grad_norm")) {
      if (auto v = NumberAtLeast(*s, 0, true, sink_)) config_.clip_grad_norm = *v;
    }
  }

  // ZeRO's stage and placements, the gradients' format, the precision.
  void CheckDistribution() {
    if (const Setting* s = Effective("zero")) CheckZeroStage(*s);
    if (const Setting* s = Effective("grad_comm")) {
      CheckChoice(*s, "grad_comm", "gradient format", &config_.grad_comm, sink_);
      if (config_.grad_comm == GradComm::kBf16 && config_.deterministic) {
        ReportSetting(*s, sink_,
                      "grad_comm = bf16 cannot be deterministic: the "
                      "deterministic all-reduce gathers every micro-batch's "
                      "fp32 gradient to add them in a fixed order",
                      "drop one of grad_comm = bf16 and deterministic = true");
      }
    }
    if (const Setting* s = Effective("precision")) {
      CheckChoice(*s, "precision", "precision", &config_.precision, sink_);
    }
    if (const Setting* s = Effective("zero_gather")) {
      CheckChoice(*s, "zero_gather", "all-gather placement", &config_.zero_gather, sink_);
      if (config_.zero == 3) {
        NoteSetting(*s, "zero_gather places ZeRO-1 and 2's all-gathers; zero = 3 gathers "
                        "before each pass instead (zero_prefetch says how early)",
                    sink_);
      }
    }
    if (const Setting* s = Effective("zero_accumulate")) {
      CheckChoice(*s, "zero_accumulate", "ZeRO-2 accumulation", &config_.zero_accumulate,
                  sink_);
      if (config_.zero_accumulate == ZeroAccumulate::kShard && config_.deterministic &&
          config_.accumulate > 1) {
        ReportSetting(*s, sink_,
                      "zero_accumulate = shard cannot be deterministic with "
                      "accumulate > 1: the deterministic sum adds every "
                      "micro-batch's gradient in global order, so it needs them "
                      "all at the step's end",
                      "use zero_accumulate = local (or auto), or drop "
                      "deterministic = true");
      }
    }
    if (const Setting* s = Effective("zero_prefetch")) {
      CheckZeroPrefetch(*s, &config_.zero_prefetch, sink_);
      if (config_.zero != 3) {
        NoteSetting(*s, absl::StrCat("zero_prefetch applies to zero = 3 only (this run has "
                                     "zero = ", config_.zero, ")"),
                    sink_);
      }
    }
  }

  // The checkpoints and the memory budget.
  void CheckCheckpointsAndMemory() {
    if (const Setting* s = Effective("checkpoint_every")) {
      if (auto v = NonNegativeInt(*s, sink_)) config_.checkpoint_every = *v;
    }
    if (const Setting* s = Effective("checkpoint_keep")) {
      if (auto v = PositiveInt(*s, sink_)) config_.checkpoint_keep = *v;
    }
    if (const Setting* s = Effective("checkpoint_dir")) {
      if (auto v = String(*s, sink_)) config_.checkpoint_dir = *v;
    }
    if (const Setting* s = Effective("memory")) CheckMemory(*s, &config_, sink_);
    if (config_.micro_batch_auto && config_.memory_bytes == 0) {
      ReportSetting(*Effective("micro_batch"), sink_,
                    "micro_batch = auto needs a memory budget",
                    "add memory = \"80GiB\" (each device's), or give micro_batch");
    }
  }

  // zero = 0 to kMaxZeroStage (a note on one rank).
  void CheckZeroStage(const Setting& s) {
    if (auto v = NonNegativeInt(s, sink_)) {
      if (*v > kMaxZeroStage) {
        const std::vector<std::string> stages = FieldChoices("zero");
        ReportSetting(s, sink_,
                      absl::StrCat("zero must be ",
                                   absl::StrJoin(stages.begin(), stages.end() - 1, ", "),
                                   " or ", stages.back(), ", got ", *v),
                      "ZeRO stage 1 shards the optimizer state, stage 2 "
                      "the gradients too, stage 3 the parameters too");
      } else {
        config_.zero = *v;
        if (*v > 0 && config_.gpus == 1) {
          NoteSetting(s, absl::StrCat("zero = ", *v, " on one rank: there is nothing to "
                                       "shard, the optimizer runs whole"),
                      sink_);
        }
      }
    }
  }

  const Setting* File(const std::string& field) const {
    auto it = file_.find(field);
    return it == file_.end() ? nullptr : &it->second;
  }
  const Setting* Flag(const std::string& field) const {
    auto it = flags_.find(field);
    return it == flags_.end() ? nullptr : &it->second;
  }
  // The flag when given, else the file's setting.
  const Setting* Effective(const std::string& field) const {
    const Setting* flag = Flag(field);
    return flag != nullptr ? flag : File(field);
  }

  // Where "missing" errors point: the block keyword, or the command line
  // when there is no block (already reported as missing).
  // Skipped after an unknown field: it is most likely the missing one
  // misspelt, already reported with a did-you-mean.
  void ReportMissing(const std::string& message, const std::string& hint) {
    if (block_ != nullptr && !had_unknown_field_) {
      sink_.Error(block_->kind_span, message, hint);
    }
  }

  void CollectFileSettings() {
    if (block_ == nullptr) return;
    file_ = FileSettings(*block_, "train", TrainFields(), sink_,
                         &had_unknown_field_);
  }

  void CollectFlags(const Overrides& overrides) {
    for (const auto& [raw_name, value] : overrides) {
      std::string name = raw_name;
      while (absl::StartsWith(name, "-")) name.erase(0, 1);
      if (name == "optimizer" || name == "schedule") {
        sink_.CommandLineError(
            absl::StrCat("--", name, ": set in the file's train { } (", name, " = ",
                         name == "optimizer" ? "adamw(lr = 1e-3)" : "cosine(warmup = 100)",
                         "), not on the command line"),
            name == "optimizer" ? "--lr overrides the optimizer's learning rate" : "");
        continue;
      }
      if (!Contains(OverridableFields(), name)) {
        std::string hint;
        const std::string match = ClosestMatch(name, OverridableFields());
        hint = match.empty()
                   ? absl::StrCat("flags that override train { }: --",
                                  absl::StrJoin(OverridableFields(), ", --"))
                   : absl::StrCat("did you mean '--", match, "'?");
        sink_.CommandLineError(absl::StrCat("--", name, ": unknown flag"),
                               hint);
        continue;
      }
      if (Flag(name) != nullptr) {
        sink_.CommandLineError(absl::StrCat("--", name, ": given twice"));
        continue;
      }
      flags_.emplace(name, FlagSetting(name, value));
    }
  }

  // cosine(warmup = N) with N >= the run's steps never decays: every step
  // is warm-up and the last runs at lr * steps / N, not 0. Allowed (a short
  // --steps smoke test of a long recipe), but said where the schedule is.
  // With epochs the step count is known once the data is read (the trainer
  // warns then).
  void CheckWarmupFitsRun(const Setting& schedule) {
    const int64_t warmup = config_.schedule.warmup_steps;
    if (config_.schedule.kind != ScheduleKind::kCosine ||
        config_.steps <= 0 || warmup < config_.steps || schedule.expr == nullptr) {
      return;
    }
    const Setting* steps = Effective("steps");
    std::string where;
    if (steps != nullptr && steps->from_flag()) {
      where = " from --steps";
    } else if (steps != nullptr) {
      where = absl::StrCat(" at line ", steps->name_span.line);
    }
    sink_.Warning(schedule.expr->span,
                  absl::StrCat("cosine(warmup = ", warmup, ") is as long as the whole run of ",
                               config_.steps, " steps", where,
                               ": every step is warm-up, the last at lr * ", config_.steps, "/",
                               warmup, ", and the cosine never starts"),
                  "for a schedule that ends at 0, make warmup less than the run's steps");
  }

  // Exactly one of epochs / steps; a flag for one drops the file's other.
  void CheckDuration() {
    const Setting* epochs_flag = Flag("epochs");
    const Setting* steps_flag = Flag("steps");
    if (epochs_flag != nullptr && steps_flag != nullptr) {
      sink_.CommandLineError("--epochs and --steps: give one, not both");
      return;
    }
    const Setting* epochs = epochs_flag;
    const Setting* steps = steps_flag;
    if (epochs == nullptr && steps == nullptr) {
      epochs = File("epochs");
      steps = File("steps");
    }
    if (epochs != nullptr && steps != nullptr) {
      sink_.Error(steps->name_span, "set epochs or steps, not both",
                  absl::StrCat("epochs is set at line ", epochs->name_span.line));
      return;
    }
    if (epochs == nullptr && steps == nullptr) {
      ReportMissing("train { } needs epochs or steps",
                    "e.g. epochs = 10 (passes over the data) or steps = 1000 "
                    "(optimizer updates)");
      return;
    }
    if (epochs != nullptr) {
      if (auto v = PositiveInt(*epochs, sink_)) config_.epochs = *v;
    } else {
      if (auto v = PositiveInt(*steps, sink_)) config_.steps = *v;
    }
  }

  // micro_batch = auto (a bare name in the file, the word as a flag).
  bool MicroBatchAuto() const {
    const Setting* s = Effective("micro_batch");
    if (s == nullptr) return false;
    if (s->from_flag()) return s->flag_text == "auto";
    return s->expr != nullptr && s->expr->kind == ast::Expr::Kind::kName &&
           s->expr->text == "auto";
  }

  void CheckBatch() {
    // micro_batch = auto: the planner searches micro_batch x accumulate
    // for the global batch; start from one micro-step.
    config_.micro_batch_auto = MicroBatchAuto();
    if (config_.micro_batch_auto) {
      const Setting* global = Effective("global_batch");
      if (global == nullptr) {
        ReportSetting(*Effective("micro_batch"), sink_,
                      "micro_batch = auto keeps the global batch, which is not given",
                      "set global_batch (and gpus)");
        return;
      }
    }
    std::vector<std::string> flag_names;
    const std::optional<BatchRequest> request = ReadBatchRequest(&flag_names);
    if (!request) return;
    const std::variant<BatchSizes, BatchError> result = ResolveBatch(*request);
    if (const auto* error = std::get_if<BatchError>(&result)) {
      ReportBatchError(*error, flag_names);
      return;
    }
    const BatchSizes& sizes = std::get<BatchSizes>(result);
    config_.gpus = sizes.gpus;
    config_.micro_batch = sizes.micro_batch;
    config_.accumulate = sizes.accumulate;
    config_.global_batch = sizes.global_batch;
    if (sizes.dropped) NoteDroppedBatchField(sizes, flag_names);
  }

  // The four batch fields as given (file or flag), each a positive integer;
  // with micro_batch = auto, one micro-step of an unknown size. The flags
  // that set them go to `flag_names`.
  std::optional<BatchRequest> ReadBatchRequest(std::vector<std::string>* flag_names) {
    BatchRequest request;
    bool ok = true;
    for (BatchField field :
         {BatchField::kGpus, BatchField::kMicroBatch, BatchField::kAccumulate,
          BatchField::kGlobalBatch}) {
      const Setting* s = Effective(BatchFieldName(field));
      if (s == nullptr) continue;
      if (config_.micro_batch_auto &&
          (field == BatchField::kMicroBatch || field == BatchField::kAccumulate)) {
        if (field == BatchField::kAccumulate) {
          request.at(field).value = 1;
          request.at(field).source = BatchValue::Source::kFlag;
        }
        continue;
      }
      std::optional<int64_t> v = PositiveInt(*s, sink_);
      if (!v) {
        ok = false;
        continue;
      }
      request.at(field).value = *v;
      request.at(field).source = s->from_flag() ? BatchValue::Source::kFlag
                                                : BatchValue::Source::kFile;
      if (s->from_flag()) flag_names->push_back(absl::StrCat("--", s->flag));
    }
    if (!ok) return std::nullopt;
    return request;
  }

  // The batch arithmetic's error, at the setting it blames, with the flags
  // given.
  void ReportBatchError(const BatchError& error, const std::vector<std::string>& flag_names) {
    std::string hint = error.hint;
    if (!flag_names.empty()) {
      absl::StrAppend(&hint, hint.empty() ? "" : "; ", "flags given: ",
                      absl::StrJoin(flag_names, ", "));
    }
    const Setting* blamed = Effective(BatchFieldName(error.blame));
    if (blamed != nullptr) {
      ReportSetting(*blamed, sink_, error.message, hint);
    } else if (block_ != nullptr) {
      ReportMissing(error.message, hint);
    } else {
      sink_.CommandLineError(error.message, hint);
    }
  }

  // A note that flags made the file's value of one batch field give way
  // to a re-inferred one.
  void NoteDroppedBatchField(const BatchSizes& sizes,
                             const std::vector<std::string>& flag_names) {
    const char* name = BatchFieldName(sizes.dropped_field);
    const int64_t now = sizes.dropped_field == BatchField::kGpus ? sizes.gpus
                        : sizes.dropped_field == BatchField::kMicroBatch
                            ? sizes.micro_batch
                        : sizes.dropped_field == BatchField::kAccumulate
                            ? sizes.accumulate
                            : sizes.global_batch;
    const std::string message = absl::StrCat(
        name, " = ", sizes.dropped_value, " from the file is re-inferred as ",
        now, " because of ", absl::StrJoin(flag_names, ", "));
    const std::string hint = absl::StrCat(
        "global_batch ", sizes.global_batch, " = ", sizes.gpus, " gpus × ",
        sizes.micro_batch, " micro_batch × ", sizes.accumulate,
        " accumulate");
    const Setting* dropped = File(name);
    if (dropped != nullptr && dropped->expr != nullptr) {
      sink_.Note(dropped->expr->span, message, hint);
    } else {
      sink_.CommandLineNote(message, hint);
    }
  }

  const ast::Block* block_;
  DiagnosticSink& sink_;
  const std::string base_dir_;
  std::map<std::string, Setting> file_;
  std::map<std::string, Setting> flags_;
  TrainConfig config_;
  bool had_unknown_field_ = false;
};

}  // namespace

std::optional<TrainConfig> CheckTrain(const ast::Block* block,
                                      const Overrides& overrides,
                                      DiagnosticSink& sink,
                                      const std::string& base_dir) {
  return TrainChecker(block, sink, base_dir).Check(overrides);
}

}  // namespace frontend
}  // namespace trainc
