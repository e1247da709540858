// The enumerated settings of a training run, as enums, each with its one
// name table: the names the .train language, the command line and the plan
// file use for its values.
//
// A setting is parsed from its name once, where it enters (the front end's
// train and data checkers, plan file reading, a command-line flag), and
// printed from the same table (plan files, summaries, metrics); everything
// in between compares enums.
//
//   std::optional<Precision> p = ParseEnum<Precision>("bf16");  // kBf16
//   EnumName(Precision::kBf16);                                 // "bf16"
//   EnumNames<Precision>();                                     // {"fp32", "bf16"}
//
// The settings here are those both the spec (compiler/spec/train_spec.h)
// and the plan (compiler/plan/plan.h) carry. Another package's enum gets a
// table by specializing EnumTable (runtime/train/trainer.h does, for
// --device and --comm).
#ifndef TRAINC_COMPILER_PLAN_SETTINGS_H_
#define TRAINC_COMPILER_PLAN_SETTINGS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainc {

// One row of a name table.
template <typename Enum>
struct EnumNameEntry {
  Enum value;
  const char* name;
};

// Specialized for each enumerated setting with
//   static constexpr EnumNameEntry<Enum> kEntries[] = {...};
// listing every value once, in the order choices are offered to users
// ("fp32 or bf16"). A value named "" (kNone: not set) is never offered.
template <typename Enum>
struct EnumTable;

// The value's name; "" for a value the table does not list.
template <typename Enum>
const char* EnumName(Enum value) {
  for (const EnumNameEntry<Enum>& e : EnumTable<Enum>::kEntries) {
    if (e.value == value) return e.name;
  }
  return "";
}

// The value named `name` exactly, or nullopt.
template <typename Enum>
std::optional<Enum> ParseEnum(std::string_view name) {
  for (const EnumNameEntry<Enum>& e : EnumTable<Enum>::kEntries) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// The names a user may give, in table order (an empty name left out).
template <typename Enum>
std::vector<std::string> EnumNames() {
  std::vector<std::string> names;
  for (const EnumNameEntry<Enum>& e : EnumTable<Enum>::kEntries) {
    if (*e.name != '\0') names.push_back(e.name);
  }
  return names;
}

// precision: fp32, or bf16 mixed precision (compiler/graph/precision.h).
enum class Precision { kFp32, kBf16 };
template <>
struct EnumTable<Precision> {
  static constexpr EnumNameEntry<Precision> kEntries[] = {
      {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}};
};

// grad_comm: the gradient collectives' wire format.
enum class GradComm { kFp32, kBf16 };
template <>
struct EnumTable<GradComm> {
  static constexpr EnumNameEntry<GradComm> kEntries[] = {
      {GradComm::kFp32, "fp32"}, {GradComm::kBf16, "bf16"}};
};

// zero_gather: where ZeRO-1's parameter all-gathers run.
enum class ZeroGather { kStepEnd, kNextForward };
template <>
struct EnumTable<ZeroGather> {
  static constexpr EnumNameEntry<ZeroGather> kEntries[] = {
      {ZeroGather::kStepEnd, "step_end"}, {ZeroGather::kNextForward, "next_forward"}};
};

// zero_accumulate: how ZeRO-2 keeps gradients across micro-steps. local:
// every micro-step adds into the whole bucket, reduce-scattered once at the
// step's end (one reduction; the bucket lives through the step). shard:
// every micro-step's bucket is reduce-scattered into the rank's gradient
// shard and freed (gradient memory 1/N; accumulate reductions). auto: the
// planner picks (compiler/planner/planner.h).
enum class ZeroAccumulate { kAuto, kLocal, kShard };
template <>
struct EnumTable<ZeroAccumulate> {
  static constexpr EnumNameEntry<ZeroAccumulate> kEntries[] = {
      {ZeroAccumulate::kAuto, "auto"},
      {ZeroAccumulate::kLocal, "local"},
      {ZeroAccumulate::kShard, "shard"}};
};

// optimizer = sgd(...) | adamw(...).
enum class OptimizerKind { kSgd, kAdamW };
template <>
struct EnumTable<OptimizerKind> {
  static constexpr EnumNameEntry<OptimizerKind> kEntries[] = {
      {OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}};
};

// schedule = constant | cosine(...).
enum class ScheduleKind { kConstant, kCosine };
template <>
struct EnumTable<ScheduleKind> {
  static constexpr EnumNameEntry<ScheduleKind> kEntries[] = {
      {ScheduleKind::kConstant, "constant"}, {ScheduleKind::kCosine, "cosine"}};
};

// A data set's source: idx(...) images and labels, text(...) bytes or
// tokens(...) llm.c shards. kNone: no such set (an absent eval set).
enum class DataFormat { kNone, kIdx, kText, kTokens };
template <>
struct EnumTable<DataFormat> {
  static constexpr EnumNameEntry<DataFormat> kEntries[] = {{DataFormat::kNone, ""},
                                                           {DataFormat::kIdx, "idx"},
                                                           {DataFormat::kText, "text"},
                                                           {DataFormat::kTokens, "tokens"}};
};

// A parameter buffer's initialisation, as PyTorch's modules (Buffer::init
// in compiler/plan/plan.h). kNone: not a parameter.
enum class ParamInit { kNone, kZeros, kOnes, kUniform, kNormal };
template <>
struct EnumTable<ParamInit> {
  static constexpr EnumNameEntry<ParamInit> kEntries[] = {{ParamInit::kNone, ""},
                                                          {ParamInit::kZeros, "zeros"},
                                                          {ParamInit::kOnes, "ones"},
                                                          {ParamInit::kUniform, "uniform"},
                                                          {ParamInit::kNormal, "normal"}};
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLAN_SETTINGS_H_
