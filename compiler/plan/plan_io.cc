#include "compiler/plan/plan_io.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ops/op_table.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/util/fnv.h"
#include "compiler/util/number_text.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

// ---------------------------------------------------------------------------
// Writing.

bool NeedsQuotes(absl::string_view s) {
  if (s.empty()) return true;
  for (char c : s) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == ',' ||
        static_cast<unsigned char>(c) >= 0x7f) {
      return true;
    }
  }
  return false;
}

std::string Quote(absl::string_view s) {
  if (!NeedsQuotes(s)) return std::string(s);
  return absl::StrCat("\"", absl::CEscape(s), "\"");
}

std::string JoinInts(const std::vector<int>& v) { return absl::StrJoin(v, ","); }

std::string ShapeText(const std::vector<int64_t>& shape) {
  return shape.empty() ? "scalar" : absl::StrJoin(shape, "x");
}

std::string AttrsText(const std::map<std::string, double>& attrs) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : attrs) parts.push_back(absl::StrCat(k, ":", ShortestDouble(v)));
  return absl::StrJoin(parts, ",");
}

// ---------------------------------------------------------------------------
// Parsing. A line is `keyword [positional...] key=value...`; a value may be
// a C-escaped string in double quotes.

struct Record {
  int line = 0;
  std::string keyword;
  std::vector<std::string> positional;
  std::map<std::string, std::string> fields;
};

class Parser {
 public:
  explicit Parser(std::string source_name) : source_(std::move(source_name)) {}

  absl::Status Error(int line, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", line, ": ", message));
  }

  absl::StatusOr<Record> Tokenize(absl::string_view text, int line) const {
    Record r;
    r.line = line;
    size_t i = 0;
    bool first = true;
    while (i < text.size()) {
      while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
      if (i >= text.size()) break;
      // Key (up to '=' or space) then an optional value.
      size_t start = i;
      while (i < text.size() && text[i] != ' ' && text[i] != '\t' &&
             text[i] != '=' && text[i] != '"') {
        ++i;
      }
      std::string key(text.substr(start, i - start));
      if (i < text.size() && text[i] == '"') {
        return Error(line, absl::StrCat("unexpected quote after '", key, "'"));
      }
      if (i >= text.size() || text[i] != '=') {
        if (first) {
          r.keyword = key;
        } else {
          r.positional.push_back(key);
        }
        first = false;
        continue;
      }
      ++i;  // '='
      std::string value;
      if (i < text.size() && text[i] == '"') {
        ++i;
        std::string raw;
        bool closed = false;
        while (i < text.size()) {
          if (text[i] == '\\' && i + 1 < text.size()) {
            raw += text[i];
            raw += text[i + 1];
            i += 2;
            continue;
          }
          if (text[i] == '"') {
            closed = true;
            ++i;
            break;
          }
          raw += text[i++];
        }
        if (!closed) return Error(line, "unterminated string");
        std::string error;
        if (!absl::CUnescape(raw, &value, &error)) {
          return Error(line, absl::StrCat("bad string escape: ", error));
        }
      } else {
        size_t vstart = i;
        while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
        value = std::string(text.substr(vstart, i - vstart));
      }
      if (first) return Error(line, "a record starts with a keyword");
      if (!r.fields.emplace(key, value).second) {
        return Error(line, absl::StrCat("duplicate field '", key, "'"));
      }
    }
    return r;
  }

  const std::string& source() const { return source_; }

  // A setting outside its name table, worded as ValidatePlan's refusals
  // ("plan: invalid plan: precision \"fp16\", expected fp32 or bf16").
  absl::Status Invalid(absl::string_view what) const {
    return absl::FailedPreconditionError(absl::StrCat(source_, ": invalid plan: ", what));
  }

 private:
  std::string source_;
};

// Typed access to one record's fields; every field must be consumed, so a
// misspelt key is an error rather than silently ignored.
class Fields {
 public:
  Fields(const Parser& parser, const Record& record)
      : parser_(parser), record_(record) {}

  absl::StatusOr<std::string> Str(const std::string& key) {
    auto it = record_.fields.find(key);
    if (it == record_.fields.end()) {
      return parser_.Error(record_.line,
                           absl::StrCat("'", record_.keyword, "' needs '", key, "='"));
    }
    used_.insert(key);
    return it->second;
  }
  absl::StatusOr<int64_t> Int(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    int64_t v;
    if (!absl::SimpleAtoi(s, &v)) return Bad(key, s, "an integer");
    return v;
  }
  absl::StatusOr<double> Double(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    double v;
    if (!absl::SimpleAtod(s, &v)) return Bad(key, s, "a number");
    return v;
  }
  absl::StatusOr<bool> Bool(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    if (s == "1" || s == "true") return true;
    if (s == "0" || s == "false") return false;
    return Bad(key, s, "0 or 1");
  }
  // "begin:end", fractions with 0 <= begin < end <= 1.
  absl::StatusOr<TokenSplit> Split(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    std::pair<std::string, std::string> parts = absl::StrSplit(s, ':');
    TokenSplit split;
    if (!absl::SimpleAtod(parts.first, &split.begin) ||
        !absl::SimpleAtod(parts.second, &split.end) ||
        !(0 <= split.begin && split.begin < split.end && split.end <= 1)) {
      return Bad(key, s, "begin:end with 0 <= begin < end <= 1");
    }
    return split;
  }
  absl::StatusOr<std::vector<int>> Ints(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    std::vector<int> out;
    if (s.empty()) return out;
    for (absl::string_view part : absl::StrSplit(s, ',')) {
      int v;
      if (!absl::SimpleAtoi(part, &v)) return Bad(key, s, "a list of integers");
      out.push_back(v);
    }
    return out;
  }
  absl::StatusOr<std::vector<int64_t>> Shape(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    std::vector<int64_t> out;
    if (s == "scalar") return out;
    for (absl::string_view part : absl::StrSplit(s, 'x')) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v) || v < 0) {
        return Bad(key, s, "a shape like 64x784 or 'scalar'");
      }
      out.push_back(v);
    }
    return out;
  }
  absl::StatusOr<std::vector<std::string>> Names(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    if (s.empty()) return std::vector<std::string>{};
    return std::vector<std::string>(absl::StrSplit(s, ','));
  }
  absl::StatusOr<std::map<std::string, double>> Attrs(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    std::map<std::string, double> out;
    if (s.empty()) return out;
    for (absl::string_view part : absl::StrSplit(s, ',')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(part, ':');
      double v;
      if (kv.first.empty() || !absl::SimpleAtod(kv.second, &v)) {
        return Bad(key, s, "name:value pairs separated by commas");
      }
      out[kv.first] = v;
    }
    return out;
  }
  template <typename Enum>
  absl::StatusOr<Enum> Enumerated(const std::string& key,
                                  const std::vector<Enum>& values,
                                  const char* (*name)(Enum)) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    std::vector<std::string> names;
    for (Enum e : values) {
      if (s == name(e)) return e;
      names.push_back(name(e));
    }
    return Bad(key, s, absl::StrCat("one of ", absl::StrJoin(names, ", ")));
  }
  // An enumerated setting, by its name table (compiler/plan/settings.h).
  template <typename Enum>
  absl::StatusOr<Enum> Setting(const std::string& key) {
    ASSIGN_OR_RETURN(std::string s, Str(key));
    if (std::optional<Enum> e = ParseEnum<Enum>(s)) return *e;
    return Bad(key, s, absl::StrCat("one of ", absl::StrJoin(EnumNames<Enum>(), ", ")));
  }

  // Every field read exactly once.
  absl::Status Done() const {
    for (const auto& [k, v] : record_.fields) {
      if (!used_.count(k)) {
        return parser_.Error(record_.line, absl::StrCat("unknown field '", k,
                                                        "' in '", record_.keyword, "'"));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Bad(const std::string& key, const std::string& value,
                   const std::string& expected) const {
    return parser_.Error(record_.line, absl::StrCat("'", key, "=", value,
                                                    "': expected ", expected));
  }

  const Parser& parser_;
  const Record& record_;
  std::set<std::string> used_;
};

const std::vector<BufferKind>& AllBufferKinds() {
  static const auto* kinds = new std::vector<BufferKind>{
      BufferKind::kInput,          BufferKind::kLabel,
      BufferKind::kParameter,      BufferKind::kGradient,
      BufferKind::kOptimizerState, BufferKind::kActivation,
      BufferKind::kActivationGrad, BufferKind::kLoss,
      BufferKind::kBucket,         BufferKind::kParameterSpan,
      BufferKind::kStateSpan,      BufferKind::kStepScalar,
      BufferKind::kWorkspace,      BufferKind::kParameterCopy,
      BufferKind::kGradShard,      BufferKind::kParamShard};
  return *kinds;
}

absl::Status ParseIndex(const Parser& parser, const Record& r, size_t expected) {
  int64_t id;
  if (r.positional.size() != 1 || !absl::SimpleAtoi(r.positional[0], &id)) {
    return parser.Error(r.line, absl::StrCat("'", r.keyword, "' needs one id"));
  }
  if (id != static_cast<int64_t>(expected)) {
    return parser.Error(r.line, absl::StrCat(r.keyword, " ", id, " out of order: expected ",
                                             expected));
  }
  return absl::OkStatus();
}

// One record kind's reader: the fields of `r` (through `f`) into `plan`.
using RecordReader = absl::Status (*)(const Parser& parser, const Record& r, Fields& f,
                                      Plan& plan);

absl::Status ReadModel(const Parser&, const Record& r, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.model, f.Str("name"));
  if (r.fields.count("signature")) {  // absent in older plans
    ASSIGN_OR_RETURN(plan.model_signature, f.Str("signature"));
  }
  return absl::OkStatus();
}

absl::Status ReadSource(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.source, f.Str("path"));
  return absl::OkStatus();
}

// An enumerated setting whose unknown value is refused in ValidatePlan's
// words ("invalid plan: precision \"fp16\", expected fp32 or bf16").
template <typename Enum>
absl::StatusOr<Enum> ReadValidSetting(const Parser& parser, Fields& f, const std::string& key) {
  ASSIGN_OR_RETURN(std::string s, f.Str(key));
  std::optional<Enum> e = ParseEnum<Enum>(s);
  if (!e) {
    return parser.Invalid(absl::StrCat(key, " \"", s, "\", expected ",
                                       absl::StrJoin(EnumNames<Enum>(), " or ")));
  }
  return *e;
}

// The ZeRO fields of `config` and the memory search's choice, all
// optional (absent: ZeRO off, step_end, local, no prefetch).
absl::Status ReadZeroConfig(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  if (r.fields.count("zero")) {  // absent: 0
    ASSIGN_OR_RETURN(plan.zero, f.Int("zero"));
  }
  if (r.fields.count("zero_gather")) {  // absent: step_end
    ASSIGN_OR_RETURN(plan.zero_gather, ReadValidSetting<ZeroGather>(parser, f, "zero_gather"));
  }
  if (r.fields.count("zero_accumulate")) {  // absent: local
    ASSIGN_OR_RETURN(plan.zero_accumulate, f.Setting<ZeroAccumulate>("zero_accumulate"));
  }
  if (r.fields.count("zero_accumulate_choice")) {
    ASSIGN_OR_RETURN(plan.zero_accumulate_choice, f.Str("zero_accumulate_choice"));
  }
  if (r.fields.count("zero_prefetch")) {  // absent: 0
    ASSIGN_OR_RETURN(plan.zero_prefetch, f.Int("zero_prefetch"));
  }
  if (r.fields.count("zero_prefetch_choice")) {
    ASSIGN_OR_RETURN(plan.zero_prefetch_choice, f.Str("zero_prefetch_choice"));
  }
  if (r.fields.count("memory_choice")) {
    ASSIGN_OR_RETURN(plan.memory_choice, f.Str("memory_choice"));
  }
  return absl::OkStatus();
}

absl::Status ReadConfig(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.world_size, f.Int("world_size"));
  ASSIGN_OR_RETURN(plan.micro_batch, f.Int("micro_batch"));
  ASSIGN_OR_RETURN(plan.accumulate, f.Int("accumulate"));
  ASSIGN_OR_RETURN(plan.global_batch, f.Int("global_batch"));
  ASSIGN_OR_RETURN(plan.epochs, f.Int("epochs"));
  ASSIGN_OR_RETURN(plan.steps, f.Int("steps"));
  ASSIGN_OR_RETURN(plan.seed, f.Int("seed"));
  ASSIGN_OR_RETURN(plan.deterministic, f.Bool("deterministic"));
  ASSIGN_OR_RETURN(plan.tf32, f.Bool("tf32"));
  ASSIGN_OR_RETURN(plan.bucket_mb, f.Double("bucket_mb"));
  if (r.fields.count("loss_terms")) {  // absent from older plans: 1
    ASSIGN_OR_RETURN(plan.loss_terms, f.Int("loss_terms"));
  }
  if (r.fields.count("clip_grad_norm")) {  // absent: no clipping
    ASSIGN_OR_RETURN(plan.clip_grad_norm, f.Double("clip_grad_norm"));
  }
  if (r.fields.count("skip_nonfinite")) {
    ASSIGN_OR_RETURN(plan.skip_nonfinite, f.Bool("skip_nonfinite"));
  }
  RETURN_IF_ERROR(ReadZeroConfig(parser, r, f, plan));
  if (r.fields.count("grad_comm")) {  // absent: fp32
    ASSIGN_OR_RETURN(plan.grad_comm, f.Setting<GradComm>("grad_comm"));
  }
  if (r.fields.count("precision")) {  // absent: fp32
    ASSIGN_OR_RETURN(plan.precision, ReadValidSetting<Precision>(parser, f, "precision"));
  }
  if (r.fields.count("bucket_choice")) {  // absent: bucket_mb was a number
    ASSIGN_OR_RETURN(plan.bucket_choice, f.Str("bucket_choice"));
  }
  return absl::OkStatus();
}

absl::Status ReadCheckpoints(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.checkpoints.every, f.Int("every"));
  ASSIGN_OR_RETURN(plan.checkpoints.keep, f.Int("keep"));
  ASSIGN_OR_RETURN(plan.checkpoints.dir, f.Str("dir"));
  return absl::OkStatus();
}

absl::Status ReadOptimizer(const Parser&, const Record&, Fields& f, Plan& plan) {
  OptimizerConfig& o = plan.optimizer;
  ASSIGN_OR_RETURN(o.kind, f.Setting<OptimizerKind>("kind"));
  ASSIGN_OR_RETURN(o.lr, f.Double("lr"));
  ASSIGN_OR_RETURN(o.momentum, f.Double("momentum"));
  ASSIGN_OR_RETURN(o.nesterov, f.Bool("nesterov"));
  ASSIGN_OR_RETURN(o.weight_decay, f.Double("weight_decay"));
  ASSIGN_OR_RETURN(o.beta1, f.Double("beta1"));
  ASSIGN_OR_RETURN(o.beta2, f.Double("beta2"));
  ASSIGN_OR_RETURN(o.eps, f.Double("eps"));
  return absl::OkStatus();
}

absl::Status ReadSchedule(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.schedule.kind, f.Setting<ScheduleKind>("kind"));
  ASSIGN_OR_RETURN(plan.schedule.warmup_steps, f.Int("warmup_steps"));
  ASSIGN_OR_RETURN(plan.schedule.total_steps, f.Int("total_steps"));
  return absl::OkStatus();
}

absl::Status ReadData(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.data.format, f.Setting<DataFormat>("format"));
  ASSIGN_OR_RETURN(plan.data.scale, f.Double("scale"));
  ASSIGN_OR_RETURN(plan.data.shuffle, f.Bool("shuffle"));
  // Optional (absent from plans without augmentation).
  if (r.fields.count("random_crop")) {
    ASSIGN_OR_RETURN(plan.data.random_crop, f.Int("random_crop"));
  }
  if (r.fields.count("random_flip")) {
    ASSIGN_OR_RETURN(plan.data.random_flip, f.Bool("random_flip"));
  }
  // Optional (absent from older plans and from idx plans).
  if (r.fields.count("train_split")) {
    ASSIGN_OR_RETURN(plan.data.train_split, f.Split("train_split"));
  }
  if (r.fields.count("eval_split")) {
    ASSIGN_OR_RETURN(plan.data.eval_split, f.Split("eval_split"));
  }
  if (r.fields.count("tokenizer")) {  // text with a SentencePiece model
    ASSIGN_OR_RETURN(plan.data.tokenizer, f.Str("tokenizer"));
  }
  if (r.fields.count("token_vocab")) {
    ASSIGN_OR_RETURN(plan.data.token_vocab, f.Int("token_vocab"));
    if (plan.data.token_vocab < 0) {
      return parser.Error(r.line, "'token_vocab' must be >= 0");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadDataPath(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  if (r.positional.size() != 1 || (r.positional[0] != "train" && r.positional[0] != "eval")) {
    return parser.Error(r.line, "'data_path' needs 'train' or 'eval'");
  }
  ASSIGN_OR_RETURN(std::string path, f.Str("path"));
  (r.positional[0] == "train" ? plan.data.train_paths : plan.data.eval_paths).push_back(path);
  return absl::OkStatus();
}

absl::Status ReadBuffer(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  RETURN_IF_ERROR(ParseIndex(parser, r, plan.buffers.size()));
  Buffer b;
  b.id = static_cast<int>(plan.buffers.size());
  ASSIGN_OR_RETURN(b.name, f.Str("name"));
  ASSIGN_OR_RETURN(b.kind, f.Enumerated("kind", AllBufferKinds(), &BufferKindName));
  ASSIGN_OR_RETURN(b.dtype,
                   f.Enumerated("dtype", std::vector<DType>{DType::kF32, DType::kI32, DType::kBF16},
                                &DTypeName));
  ASSIGN_OR_RETURN(b.shape, f.Shape("shape"));
  ASSIGN_OR_RETURN(b.offset, f.Int("offset"));
  ASSIGN_OR_RETURN(b.bytes, f.Int("bytes"));
  if (r.fields.count("live")) {
    ASSIGN_OR_RETURN(std::vector<int> live, f.Ints("live"));
    if (live.size() != 2) return parser.Error(r.line, "'live' needs first,last");
    b.first_use = live[0];
    b.last_use = live[1];
  }
  if (r.fields.count("init")) {
    ASSIGN_OR_RETURN(b.init, f.Setting<ParamInit>("init"));
    ASSIGN_OR_RETURN(b.init_bound, f.Double("init_bound"));
  }
  plan.buffers.push_back(std::move(b));
  return absl::OkStatus();
}

absl::Status ReadInstruction(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  RETURN_IF_ERROR(ParseIndex(parser, r, plan.instructions.size()));
  Instruction in;
  in.id = static_cast<int>(plan.instructions.size());
  ASSIGN_OR_RETURN(in.op, f.Str("op"));
  ASSIGN_OR_RETURN(in.stream, f.Enumerated("stream",
                                           std::vector<Stream>{Stream::kCompute, Stream::kComm},
                                           &StreamName));
  ASSIGN_OR_RETURN(in.phase,
                   f.Enumerated("phase",
                                std::vector<Phase>{Phase::kData, Phase::kForward,
                                                   Phase::kBackward, Phase::kComm,
                                                   Phase::kOptimizer},
                                &PhaseName));
  ASSIGN_OR_RETURN(int64_t micro, f.Int("micro"));
  in.micro_step = static_cast<int>(micro);
  ASSIGN_OR_RETURN(in.inputs, f.Ints("in"));
  ASSIGN_OR_RETURN(in.outputs, f.Ints("out"));
  ASSIGN_OR_RETURN(in.attrs, f.Attrs("attrs"));
  ASSIGN_OR_RETURN(in.wait_events, f.Ints("wait"));
  ASSIGN_OR_RETURN(in.record_events, f.Ints("record"));
  ASSIGN_OR_RETURN(in.label, f.Str("label"));
  plan.instructions.push_back(std::move(in));
  return absl::OkStatus();
}

// A bucket's ZeRO fields (absent without ZeRO): its shard and all-gather
// (stage 1 and up), its gradient shard (2 and up), its parameter shard (3).
absl::Status ReadBucketShards(const Record& r, Fields& f, Bucket& b) {
  if (r.fields.count("shard_elems")) {  // ZeRO only
    ASSIGN_OR_RETURN(b.shard_elems, f.Int("shard_elems"));
    ASSIGN_OR_RETURN(int64_t gather, f.Int("all_gather"));
    b.all_gather = static_cast<int>(gather);
  }
  if (r.fields.count("grad_shard")) {  // ZeRO-2 only
    ASSIGN_OR_RETURN(int64_t shard, f.Int("grad_shard"));
    b.grad_shard = static_cast<int>(shard);
  }
  if (r.fields.count("param_shard")) {  // ZeRO-3 only
    ASSIGN_OR_RETURN(int64_t shard, f.Int("param_shard"));
    b.param_shard = static_cast<int>(shard);
  }
  return absl::OkStatus();
}

absl::Status ReadBucket(const Parser& parser, const Record& r, Fields& f, Plan& plan) {
  RETURN_IF_ERROR(ParseIndex(parser, r, plan.buckets.size()));
  Bucket b;
  b.id = static_cast<int>(plan.buckets.size());
  ASSIGN_OR_RETURN(b.bytes, f.Int("bytes"));
  ASSIGN_OR_RETURN(int64_t grad, f.Int("grad"));
  ASSIGN_OR_RETURN(int64_t span, f.Int("param_span"));
  ASSIGN_OR_RETURN(b.state_spans, f.Ints("state_spans"));
  ASSIGN_OR_RETURN(int64_t ready, f.Int("ready_after"));
  ASSIGN_OR_RETURN(int64_t reduce, f.Int("all_reduce"));
  ASSIGN_OR_RETURN(b.parameters, f.Names("params"));
  b.grad_buffer = static_cast<int>(grad);
  b.param_span = static_cast<int>(span);
  b.ready_after = static_cast<int>(ready);
  b.all_reduce = static_cast<int>(reduce);
  if (r.fields.count("weight_decay")) {  // absent from older plans: decayed
    ASSIGN_OR_RETURN(b.weight_decay, f.Bool("weight_decay"));
  }
  RETURN_IF_ERROR(ReadBucketShards(r, f, b));
  plan.buckets.push_back(std::move(b));
  return absl::OkStatus();
}

absl::Status ReadEvents(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(int64_t n, f.Int("count"));
  plan.num_events = static_cast<int>(n);
  return absl::OkStatus();
}

absl::Status ReadArena(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.arena_bytes, f.Int("bytes"));
  return absl::OkStatus();
}

absl::Status ReadMemory(const Parser&, const Record& r, Fields& f, Plan& plan) {
  MemoryReport& m = plan.memory;
  ASSIGN_OR_RETURN(m.parameter_bytes, f.Int("parameters"));
  ASSIGN_OR_RETURN(m.gradient_bytes, f.Int("gradients"));
  ASSIGN_OR_RETURN(m.optimizer_state_bytes, f.Int("optimizer_state"));
  ASSIGN_OR_RETURN(m.peak_activation_bytes, f.Int("peak_activations"));
  ASSIGN_OR_RETURN(m.arena_bytes, f.Int("arena"));
  ASSIGN_OR_RETURN(m.unshared_bytes, f.Int("unshared"));
  if (r.fields.count("workspace")) {  // optional: plans without conv/pool
    ASSIGN_OR_RETURN(m.workspace_bytes, f.Int("workspace"));
  }
  if (r.fields.count("fp32_peak_activations")) {  // precision = bf16 only
    ASSIGN_OR_RETURN(m.parameter_copy_bytes, f.Int("parameter_copies"));
    ASSIGN_OR_RETURN(m.bf16_staging_bytes, f.Int("bf16_staging"));
    ASSIGN_OR_RETURN(m.fp32_peak_activation_bytes, f.Int("fp32_peak_activations"));
    ASSIGN_OR_RETURN(m.fp32_arena_bytes, f.Int("fp32_arena"));
  }
  return absl::OkStatus();
}

absl::Status ReadIo(const Parser&, const Record&, Fields& f, Plan& plan) {
  ASSIGN_OR_RETURN(plan.input_buffers, f.Ints("inputs"));
  ASSIGN_OR_RETURN(int64_t loss, f.Int("loss"));
  plan.loss_buffer = static_cast<int>(loss);
  ASSIGN_OR_RETURN(plan.parameter_buffers, f.Ints("parameters"));
  return absl::OkStatus();
}

// Every record kind of the format, by keyword (PlanToText writes them in
// this order).
const std::map<std::string, RecordReader>& RecordReaders() {
  static const auto* readers = new std::map<std::string, RecordReader>{
      {"model", &ReadModel},         {"source", &ReadSource},
      {"config", &ReadConfig},       {"checkpoints", &ReadCheckpoints},
      {"optimizer", &ReadOptimizer}, {"schedule", &ReadSchedule},
      {"data", &ReadData},           {"data_path", &ReadDataPath},
      {"buffer", &ReadBuffer},       {"instr", &ReadInstruction},
      {"bucket", &ReadBucket},       {"events", &ReadEvents},
      {"arena", &ReadArena},         {"memory", &ReadMemory},
      {"io", &ReadIo}};
  return *readers;
}

absl::Status ParseRecord(const Parser& parser, const Record& r, Plan& plan) {
  Fields f(parser, r);
  const std::string& kw = r.keyword;
  // Only the numbered records and data_path take a positional argument.
  if (kw != "buffer" && kw != "instr" && kw != "bucket" && kw != "data_path" &&
      !r.positional.empty()) {
    return parser.Error(r.line, absl::StrCat("unexpected '", r.positional[0], "'"));
  }
  auto reader = RecordReaders().find(kw);
  if (reader == RecordReaders().end()) {
    return parser.Error(r.line, absl::StrCat("unknown record '", kw, "'"));
  }
  RETURN_IF_ERROR(reader->second(parser, r, f, plan));
  return f.Done();
}

// ---------------------------------------------------------------------------
// Validation.

absl::Status Invalid(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("invalid plan: ", what));
}

// ---------------------------------------------------------------------------
// Writing, one function per record (PlanToText writes them in order).

// `config`'s ZeRO fields and the searches' choices, each written only when
// set, so that a plan without them reads as before they existed.
std::string ZeroConfigText(const Plan& plan) {
  return absl::StrCat(
      plan.zero > 0 ? absl::StrCat(" zero=", plan.zero) : std::string(),
      plan.zero_gather != ZeroGather::kStepEnd
          ? absl::StrCat(" zero_gather=", Quote(EnumName(plan.zero_gather)))
          : std::string(),
      plan.zero_accumulate != ZeroAccumulate::kLocal
          ? absl::StrCat(" zero_accumulate=", Quote(EnumName(plan.zero_accumulate)))
          : std::string(),
      plan.zero_accumulate_choice.empty()
          ? std::string()
          : absl::StrCat(" zero_accumulate_choice=", Quote(plan.zero_accumulate_choice)),
      plan.zero_prefetch > 0 ? absl::StrCat(" zero_prefetch=", plan.zero_prefetch)
                             : std::string(),
      plan.zero_prefetch_choice.empty()
          ? std::string()
          : absl::StrCat(" zero_prefetch_choice=", Quote(plan.zero_prefetch_choice)),
      plan.memory_choice.empty() ? std::string()
                                 : absl::StrCat(" memory_choice=", Quote(plan.memory_choice)));
}

std::string ConfigText(const Plan& plan) {
  return absl::StrCat(
      "config world_size=", plan.world_size, " micro_batch=", plan.micro_batch,
      " accumulate=", plan.accumulate, " global_batch=", plan.global_batch,
      " epochs=", plan.epochs, " steps=", plan.steps, " seed=", plan.seed,
      " deterministic=", plan.deterministic ? 1 : 0, " tf32=", plan.tf32 ? 1 : 0,
      " bucket_mb=", ShortestDouble(plan.bucket_mb), " loss_terms=", plan.loss_terms,
      plan.clip_grad_norm > 0
          ? absl::StrCat(" clip_grad_norm=", ShortestDouble(plan.clip_grad_norm))
          : std::string(),
      plan.skip_nonfinite ? " skip_nonfinite=1" : "", ZeroConfigText(plan),
      plan.grad_comm != GradComm::kFp32
          ? absl::StrCat(" grad_comm=", Quote(EnumName(plan.grad_comm)))
          : std::string(),
      plan.precision != Precision::kFp32
          ? absl::StrCat(" precision=", Quote(EnumName(plan.precision)))
          : std::string(),
      plan.bucket_choice.empty() ? std::string()
                                 : absl::StrCat(" bucket_choice=", Quote(plan.bucket_choice)),
      "\n");
}

std::string OptimizerText(const OptimizerConfig& o) {
  return absl::StrCat("optimizer kind=", Quote(EnumName(o.kind)), " lr=", ShortestDouble(o.lr),
                      " momentum=", ShortestDouble(o.momentum), " nesterov=", o.nesterov ? 1 : 0,
                      " weight_decay=", ShortestDouble(o.weight_decay),
                      " beta1=", ShortestDouble(o.beta1), " beta2=", ShortestDouble(o.beta2),
                      " eps=", ShortestDouble(o.eps), "\n");
}

// `data` and its `data_path` records.
std::string DataText(const DataConfig& data) {
  std::string out = absl::StrCat(
      "data format=", Quote(EnumName(data.format)), " scale=", ShortestDouble(data.scale),
      " shuffle=", data.shuffle ? 1 : 0,
      data.random_crop > 0 ? absl::StrCat(" random_crop=", data.random_crop) : std::string(),
      data.random_flip ? " random_flip=1" : "");
  // Written only when set, so that an idx plan's text is unchanged.
  const TokenSplit whole;
  for (const auto& [key, split] :
       {std::pair{"train_split", data.train_split}, std::pair{"eval_split", data.eval_split}}) {
    if (split.begin != whole.begin || split.end != whole.end) {
      absl::StrAppend(&out, " ", key, "=", ShortestDouble(split.begin), ":",
                      ShortestDouble(split.end));
    }
  }
  if (data.token_vocab != 0) absl::StrAppend(&out, " token_vocab=", data.token_vocab);
  if (!data.tokenizer.empty()) absl::StrAppend(&out, " tokenizer=", Quote(data.tokenizer));
  absl::StrAppend(&out, "\n");
  for (const std::string& p : data.train_paths) {
    absl::StrAppend(&out, "data_path train path=", Quote(p), "\n");
  }
  for (const std::string& p : data.eval_paths) {
    absl::StrAppend(&out, "data_path eval path=", Quote(p), "\n");
  }
  return out;
}

std::string BufferText(const Buffer& b) {
  std::string out = absl::StrCat("buffer ", b.id, " name=", Quote(b.name),
                                 " kind=", BufferKindName(b.kind), " dtype=", DTypeName(b.dtype),
                                 " shape=", ShapeText(b.shape), " offset=", b.offset,
                                 " bytes=", b.bytes);
  if (b.first_use >= 0 || b.last_use >= 0) {
    absl::StrAppend(&out, " live=", b.first_use, ",", b.last_use);
  }
  if (b.init != ParamInit::kNone) {
    absl::StrAppend(&out, " init=", Quote(EnumName(b.init)),
                    " init_bound=", ShortestDouble(b.init_bound));
  }
  absl::StrAppend(&out, "\n");
  return out;
}

std::string InstructionText(const Instruction& in) {
  return absl::StrCat("instr ", in.id, " op=", Quote(in.op), " stream=", StreamName(in.stream),
                      " phase=", PhaseName(in.phase), " micro=", in.micro_step,
                      " in=", JoinInts(in.inputs), " out=", JoinInts(in.outputs),
                      " attrs=", AttrsText(in.attrs), " wait=", JoinInts(in.wait_events),
                      " record=", JoinInts(in.record_events), " label=", Quote(in.label), "\n");
}

std::string BucketText(const Bucket& b) {
  return absl::StrCat(
      "bucket ", b.id, " bytes=", b.bytes, " grad=", b.grad_buffer,
      " param_span=", b.param_span, " state_spans=", JoinInts(b.state_spans),
      " ready_after=", b.ready_after, " all_reduce=", b.all_reduce,
      " weight_decay=", b.weight_decay ? 1 : 0,
      b.shard_elems > 0 ? absl::StrCat(" shard_elems=", b.shard_elems, " all_gather=", b.all_gather)
                        : std::string(),
      b.grad_shard >= 0 ? absl::StrCat(" grad_shard=", b.grad_shard) : std::string(),
      b.param_shard >= 0 ? absl::StrCat(" param_shard=", b.param_shard) : std::string(),
      " params=", absl::StrJoin(b.parameters, ","), "\n");
}

std::string MemoryText(const MemoryReport& m) {
  return absl::StrCat(
      "memory parameters=", m.parameter_bytes, " gradients=", m.gradient_bytes,
      " optimizer_state=", m.optimizer_state_bytes,
      " peak_activations=", m.peak_activation_bytes, " arena=", m.arena_bytes,
      " unshared=", m.unshared_bytes,
      m.workspace_bytes > 0 ? absl::StrCat(" workspace=", m.workspace_bytes) : std::string(),
      m.fp32_arena_bytes > 0
          ? absl::StrCat(" parameter_copies=", m.parameter_copy_bytes,
                         " bf16_staging=", m.bf16_staging_bytes,
                         " fp32_peak_activations=", m.fp32_peak_activation_bytes,
                         " fp32_arena=", m.fp32_arena_bytes)
          : std::string(),
      "\n");
}

}  // namespace

std::string PlanToText(const Plan& plan) {
  std::string out;
  absl::StrAppend(&out, "trainc-plan ", plan.version, "\n");
  absl::StrAppend(&out, "model name=", Quote(plan.model),
                  plan.model_signature.empty()
                      ? std::string()
                      : absl::StrCat(" signature=", Quote(plan.model_signature)),
                  "\n");
  absl::StrAppend(&out, "source path=", Quote(plan.source), "\n");
  absl::StrAppend(&out, ConfigText(plan));
  if (plan.checkpoints.every > 0) {  // absent: no checkpoints during the run
    absl::StrAppend(&out, "checkpoints every=", plan.checkpoints.every,
                    " keep=", plan.checkpoints.keep, " dir=", Quote(plan.checkpoints.dir),
                    "\n");
  }
  absl::StrAppend(&out, OptimizerText(plan.optimizer));
  absl::StrAppend(&out, "schedule kind=", Quote(EnumName(plan.schedule.kind)),
                  " warmup_steps=", plan.schedule.warmup_steps,
                  " total_steps=", plan.schedule.total_steps, "\n");
  absl::StrAppend(&out, DataText(plan.data));
  for (const Buffer& b : plan.buffers) absl::StrAppend(&out, BufferText(b));
  for (const Instruction& in : plan.instructions) absl::StrAppend(&out, InstructionText(in));
  for (const Bucket& b : plan.buckets) absl::StrAppend(&out, BucketText(b));
  absl::StrAppend(&out, "events count=", plan.num_events, "\n");
  absl::StrAppend(&out, "arena bytes=", plan.arena_bytes, "\n");
  absl::StrAppend(&out, MemoryText(plan.memory));
  absl::StrAppend(&out, "io inputs=", JoinInts(plan.input_buffers),
                  " loss=", plan.loss_buffer,
                  " parameters=", JoinInts(plan.parameter_buffers), "\n");
  absl::StrAppend(&out, "end\n");
  return out;
}

absl::StatusOr<Plan> PlanFromText(const std::string& text,
                                  const std::string& source_name) {
  Parser parser(source_name);
  Plan plan;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  bool saw_header = false;
  bool saw_end = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    absl::string_view line = absl::StripAsciiWhitespace(lines[i]);
    if (line.empty() || line[0] == '#') continue;
    if (saw_end) return parser.Error(line_no, "text after 'end'");
    ASSIGN_OR_RETURN(Record r, parser.Tokenize(line, line_no));
    if (!saw_header) {
      int version = 0;
      if (r.keyword != "trainc-plan" || r.positional.size() != 1 || !r.fields.empty() ||
          !absl::SimpleAtoi(r.positional[0], &version)) {
        return parser.Error(line_no, "not a trainc plan: expected 'trainc-plan <version>'");
      }
      if (version != kPlanFormatVersion) {
        return parser.Error(line_no, absl::StrCat("plan format version ", version,
                                                  " is not supported: this build reads "
                                                  "version ",
                                                  kPlanFormatVersion,
                                                  "; recompile the .train file"));
      }
      plan.version = version;
      saw_header = true;
      continue;
    }
    if (r.keyword == "end") {
      saw_end = true;
      continue;
    }
    RETURN_IF_ERROR(ParseRecord(parser, r, plan));
  }
  if (!saw_header) return parser.Error(1, "empty plan");
  if (!saw_end) {
    return parser.Error(static_cast<int>(lines.size()), "truncated plan: no 'end'");
  }
  absl::Status valid = ValidatePlan(plan);
  if (!valid.ok()) {
    return absl::Status(valid.code(), absl::StrCat(source_name, ": ", valid.message()));
  }
  return plan;
}

uint64_t PlanHash(const Plan& plan) {
  Plan copy = plan;
  copy.source.clear();
  return Fnv1a().Bytes(PlanToText(copy)).value();
}

absl::Status WritePlanFile(const Plan& plan, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot open ", path, " for writing"));
  out << PlanToText(plan);
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<Plan> ReadPlanFile(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": is a directory (expected a .train file, or a plan file from "
              "--compile-only -o)"));
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (a pipe or a device?)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open plan ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return PlanFromText(ss.str(), path);
}

namespace {

// A span and what it is made of: the only buffers live for the whole run
// that may share arena bytes, the member inside its container.
bool ContainerOf(BufferKind container, BufferKind member) {
  return (container == BufferKind::kParameterSpan && member == BufferKind::kParameter) ||
         (container == BufferKind::kParameterSpan && member == BufferKind::kParameterCopy) ||
         (container == BufferKind::kBucket && member == BufferKind::kGradient) ||
         (container == BufferKind::kStateSpan && member == BufferKind::kOptimizerState);
}

absl::Status CheckPair(const Buffer& a, const Buffer& b) {
  const bool a_whole = a.first_use < 0, b_whole = b.first_use < 0;
  auto name = [](const Buffer& x) {
    return absl::StrCat("buffer ", x.id, " (", x.name, ", ", BufferKindName(x.kind), ")");
  };
  auto live = [](const Buffer& x) {
    return x.first_use < 0 ? std::string("the whole run")
                           : absl::StrCat("instructions ", x.first_use, "..", x.last_use);
  };
  const int64_t begin = std::max(a.offset, b.offset);
  const int64_t end = std::min(a.offset + a.bytes, b.offset + b.bytes);
  if (a_whole && b_whole) {
    auto inside = [](const Buffer& member, const Buffer& container) {
      return member.offset >= container.offset &&
             member.offset + member.bytes <= container.offset + container.bytes;
    };
    if ((ContainerOf(a.kind, b.kind) && inside(b, a)) ||
        (ContainerOf(b.kind, a.kind) && inside(a, b))) {
      return absl::OkStatus();
    }
  } else if (!a_whole && !b_whole && (a.last_use < b.first_use || b.last_use < a.first_use)) {
    return absl::OkStatus();  // the same bytes at different times: reuse
  }
  return Invalid(absl::StrCat(name(a), " and ", name(b), " share arena bytes [", begin, ", ",
                              end, ") while both live (", live(a), "; ", live(b), ")"));
}

// Buffers that share arena bytes must never be live at the same time
// (a plan file that puts an activation over the weights would train on
// corrupted weights). O(n log n): whole-run buffers by a sweep over
// offsets (only spans overlap their members), each temporary against
// them by binary search, and temporaries against each other by a sweep
// over time keeping the live ones ordered by offset.
// A live gradient (ZeRO-2) or parameter (ZeRO-3) must lie inside a live
// bucket or parameter span, live no longer than it; it is then checked
// through that container.
// Live buffers that may hold others (spans, buckets), looked up by bytes:
// a member's container starts at most the largest container's size before
// the member ends, so only those are tried (a ZeRO-3 plan with accumulate
// 64 has thousands of spans and of parameters gathered into them).
class LiveContainers {
 public:
  explicit LiveContainers(std::vector<const Buffer*> containers)
      : by_offset_(std::move(containers)) {
    std::sort(by_offset_.begin(), by_offset_.end(), [](const Buffer* x, const Buffer* y) {
      return x->offset != y->offset ? x->offset < y->offset : x->id < y->id;
    });
    for (const Buffer* c : by_offset_) largest_ = std::max(largest_, c->bytes);
  }

  // A container that `fits`, holds b's bytes and is live whenever b is;
  // null if none.
  template <typename Fits>
  const Buffer* Holder(const Buffer& b, const Fits& fits) const {
    const int64_t end = b.offset + b.bytes;
    auto it = std::upper_bound(by_offset_.begin(), by_offset_.end(), b.offset,
                               [](int64_t offset, const Buffer* c) { return offset < c->offset; });
    while (it != by_offset_.begin()) {
      const Buffer* c = *--it;
      if (c->offset + largest_ < end) break;  // none further down reaches b's end
      if (end <= c->offset + c->bytes && c->first_use <= b.first_use &&
          b.last_use <= c->last_use && fits(*c)) {
        return c;
      }
    }
    return nullptr;
  }

 private:
  std::vector<const Buffer*> by_offset_;
  int64_t largest_ = 0;
};

absl::Status CheckLiveMembers(const std::vector<const Buffer*>& members,
                              const std::vector<const Buffer*>& live) {
  std::vector<const Buffer*> candidates;
  for (const Buffer* c : live) {
    if (c->kind == BufferKind::kParameterSpan || c->kind == BufferKind::kBucket ||
        c->kind == BufferKind::kStateSpan) {
      candidates.push_back(c);
    }
  }
  const LiveContainers containers(std::move(candidates));
  for (const Buffer* m : members) {
    const bool held = containers.Holder(*m, [m](const Buffer& c) {
      return ContainerOf(c.kind, m->kind);
    }) != nullptr;
    if (!held) {
      return Invalid(absl::StrCat("buffer ", m->id, " (", m->name, ", ", BufferKindName(m->kind),
                                  ") is live but inside no live bucket or span that outlives it"));
    }
  }
  return absl::OkStatus();
}

// Outputs written over their input (ops::OpDef::in_place): the pair at
// the same bytes, the instruction the input's last use and the output's
// first. Each becomes one buffer live over both (`merged`), in place of
// the two; returns the ids it stands for.
std::set<int> MergeInPlacePairs(const Plan& plan, std::deque<Buffer>* merged) {
  std::set<int> replaced;
  for (const Instruction& in : plan.instructions) {
    const std::optional<std::pair<int, int>> pair = InPlaceOperands(in);
    if (!pair) continue;
    const auto [from_id, to_id] = *pair;
    if (from_id < 0 || to_id < 0 || from_id >= static_cast<int>(plan.buffers.size()) ||
        to_id >= static_cast<int>(plan.buffers.size()) || replaced.count(from_id)) {
      continue;
    }
    const Buffer& from = plan.buffers[from_id];
    const Buffer& to = plan.buffers[to_id];
    if (from.offset != to.offset || from.bytes != to.bytes || from.first_use < 0 ||
        from.last_use != in.id || to.first_use != in.id) {
      continue;
    }
    Buffer both = to;
    both.first_use = from.first_use;
    merged->push_back(both);
    replaced.insert(from_id);
    replaced.insert(to_id);
  }
  return replaced;
}

// ZeRO-3: a bucket's parameter span and the parameters' buffers that no
// instruction touches are its layout (offsets from the span's start), not
// arena bytes.
bool IsLayout(const Plan& plan, const Buffer& b) {
  return plan.zero >= 3 && b.first_use < 0 &&
         (b.kind == BufferKind::kParameterSpan || b.kind == BufferKind::kParameter);
}

absl::Status CheckArenaSharing(const Plan& plan) {
  std::vector<const Buffer*> whole, live, members, gathered;
  std::deque<Buffer> merged;
  const std::set<int> replaced = MergeInPlacePairs(plan, &merged);
  for (const Buffer& b : merged) live.push_back(&b);
  for (const Buffer& b : plan.buffers) {
    if (b.kind == BufferKind::kParameterSpan && b.first_use >= 0) gathered.push_back(&b);
  }
  // ZeRO-3 under bf16: a parameter's bf16 copy gathered inside a span, not
  // cast into a buffer of its own.
  const LiveContainers spans(std::move(gathered));
  auto any = [](const Buffer&) { return true; };
  for (const Buffer& b : plan.buffers) {
    if (b.bytes <= 0 || replaced.count(b.id) || IsLayout(plan, b)) continue;
    if (b.first_use < 0) {
      whole.push_back(&b);
    } else {
      const bool member = b.kind == BufferKind::kGradient || b.kind == BufferKind::kParameter ||
                          (b.kind == BufferKind::kParameterCopy && spans.Holder(b, any) != nullptr);
      (member ? members : live).push_back(&b);
    }
  }
  RETURN_IF_ERROR(CheckLiveMembers(members, live));
  auto end_of = [](const Buffer* b) { return b->offset + b->bytes; };
  std::sort(whole.begin(), whole.end(), [](const Buffer* x, const Buffer* y) {
    return x->offset != y->offset ? x->offset < y->offset : x->id < y->id;
  });
  std::vector<const Buffer*> open;
  // The union of the whole-run buffers' bytes, as disjoint [begin, end).
  std::vector<std::pair<int64_t, int64_t>> taken;
  for (const Buffer* b : whole) {
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](const Buffer* o) { return end_of(o) <= b->offset; }),
               open.end());
    for (const Buffer* o : open) RETURN_IF_ERROR(CheckPair(*o, *b));
    open.push_back(b);
    if (!taken.empty() && b->offset < taken.back().second) {
      taken.back().second = std::max(taken.back().second, end_of(b));
    } else {
      taken.emplace_back(b->offset, end_of(b));
    }
  }
  for (const Buffer* b : live) {
    auto it = std::upper_bound(taken.begin(), taken.end(), std::make_pair(end_of(b), int64_t{0}));
    if (it == taken.begin() || std::prev(it)->second <= b->offset) continue;
    for (const Buffer* w : whole) {  // an error: name the buffer
      if (w->offset < end_of(b) && b->offset < end_of(w)) return CheckPair(*w, *b);
    }
  }
  std::sort(live.begin(), live.end(), [](const Buffer* x, const Buffer* y) {
    return x->first_use != y->first_use ? x->first_use < y->first_use : x->id < y->id;
  });
  std::map<int64_t, const Buffer*> active;  // by offset; disjoint while valid
  using Ending = std::pair<int, const Buffer*>;
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> endings;
  for (const Buffer* b : live) {
    while (!endings.empty() && endings.top().first < b->first_use) {
      active.erase(endings.top().second->offset);
      endings.pop();
    }
    auto next = active.lower_bound(b->offset);
    if (next != active.end() && next->first < end_of(b)) return CheckPair(*next->second, *b);
    if (next != active.begin() && end_of(std::prev(next)->second) > b->offset) {
      return CheckPair(*std::prev(next)->second, *b);
    }
    active.emplace(b->offset, b);
    endings.emplace(b->last_use, b);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// ValidatePlan's checks, one part of the plan each.

bool BufferOk(const Plan& plan, int id) {
  return id >= 0 && id < static_cast<int>(plan.buffers.size());
}

// The settings: format version, batch arithmetic, sizes, ZeRO's ranges.
absl::Status ValidateSettings(const Plan& plan) {
  if (plan.version != kPlanFormatVersion) {
    return Invalid(absl::StrCat("version ", plan.version, ", expected ", kPlanFormatVersion));
  }
  if (plan.world_size < 1 || plan.micro_batch < 1 || plan.accumulate < 1 ||
      plan.loss_terms < 1) {
    return Invalid("world_size, micro_batch and accumulate must be >= 1");
  }
  if (plan.global_batch != plan.world_size * plan.micro_batch * plan.accumulate) {
    return Invalid(absl::StrCat("global_batch ", plan.global_batch,
                                " != world_size * micro_batch * accumulate"));
  }
  if (plan.arena_bytes < 0 || plan.num_events < 0) return Invalid("negative arena or events");
  if (plan.zero < 0 || plan.zero > 3) return Invalid(absl::StrCat("zero ", plan.zero));
  if (plan.zero_prefetch < 0) return Invalid(absl::StrCat("zero_prefetch ", plan.zero_prefetch));
  return absl::OkStatus();
}

// One buffer: its id, its bytes against its shape, its dtype against the
// plan's precision, its place in the arena and its live range.
absl::Status ValidateBuffer(const Plan& plan, int i) {
  const Buffer& b = plan.buffers[i];
  const std::string where = absl::StrCat("buffer ", i, " (", b.name, ")");
  if (b.id != i) return Invalid(absl::StrCat(where, ": id ", b.id));
  int64_t elems = 1;
  for (int64_t d : b.shape) {
    if (d < 0) return Invalid(absl::StrCat(where, ": negative dimension"));
    elems *= d;
  }
  if (b.bytes != elems * DTypeBytes(b.dtype)) {
    return Invalid(absl::StrCat(where, ": bytes ", b.bytes, " but shape holds ",
                                elems * DTypeBytes(b.dtype)));
  }
  // Mixed precision keeps the weights, gradients, optimizer state and
  // loss in f32; only forward values, their gradients and the weights'
  // bf16 copies may be bf16.
  // (ZeRO-3 gathers a bf16 span of the copies.)
  const bool gathered_copies = b.kind == BufferKind::kParameterSpan && plan.zero >= 3;
  if (b.dtype == DType::kBF16 &&
      (plan.precision != Precision::kBf16 ||
       (b.kind != BufferKind::kActivation && b.kind != BufferKind::kActivationGrad &&
        b.kind != BufferKind::kParameterCopy && !gathered_copies))) {
    return Invalid(absl::StrCat(where, ": a bf16 ", BufferKindName(b.kind),
                                plan.precision != Precision::kBf16
                                    ? " in a plan of precision fp32"
                                    : " (only activations and parameter copies may be bf16)"));
  }
  if (b.offset < 0 || b.offset % 64 != 0) {
    return Invalid(absl::StrCat(where, ": offset ", b.offset, " not 64-byte aligned"));
  }
  if (b.offset + b.bytes > plan.arena_bytes && !IsLayout(plan, b)) {
    return Invalid(absl::StrCat(where, ": ends at ", b.offset + b.bytes,
                                " past the arena of ", plan.arena_bytes));
  }
  if ((b.first_use < 0) != (b.last_use < 0) || b.first_use > b.last_use ||
      b.last_use >= static_cast<int>(plan.instructions.size())) {
    return Invalid(absl::StrCat(where, ": bad live range ", b.first_use, "..", b.last_use));
  }
  return absl::OkStatus();
}

// One instruction's events: each wait for an event recorded earlier on the
// other stream, each event recorded once. `recorded_by` (event ->
// instruction) is kept in program order.
absl::Status ValidateEvents(const Plan& plan, int i, const std::string& where,
                            std::vector<int>& recorded_by) {
  const Instruction& in = plan.instructions[i];
  for (int e : in.wait_events) {
    if (e < 0 || e >= plan.num_events) return Invalid(absl::StrCat(where, ": event ", e));
    const int rec = recorded_by[e];
    if (rec < 0) {
      return Invalid(absl::StrCat(where, ": waits for event ", e, " not recorded before"));
    }
    if (plan.instructions[rec].stream == in.stream) {
      return Invalid(absl::StrCat(where, ": waits for event ", e,
                                  " recorded on its own stream"));
    }
  }
  for (int e : in.record_events) {
    if (e < 0 || e >= plan.num_events) return Invalid(absl::StrCat(where, ": event ", e));
    if (recorded_by[e] >= 0) {
      return Invalid(absl::StrCat(where, ": event ", e, " already recorded by instruction ",
                                  recorded_by[e]));
    }
    recorded_by[e] = i;
  }
  return absl::OkStatus();
}

// One instruction: a known op with the op table's operand counts and
// stream, buffers that exist, its micro-step, then its events.
absl::Status ValidateInstruction(const Plan& plan, int i, std::vector<int>& recorded_by) {
  const Instruction& in = plan.instructions[i];
  const std::string where = absl::StrCat("instruction ", i, " (", in.op, ")");
  if (in.id != i) return Invalid(absl::StrCat(where, ": id ", in.id));
  const ops::OpDef* op = ops::FindOp(in.op);
  if (op == nullptr) return Invalid(absl::StrCat(where, ": unknown op"));
  const int n_in = static_cast<int>(in.inputs.size());
  const int n_out = static_cast<int>(in.outputs.size());
  if (n_in < op->min_inputs || (op->max_inputs >= 0 && n_in > op->max_inputs) ||
      n_out < op->min_outputs || (op->max_outputs >= 0 && n_out > op->max_outputs)) {
    return Invalid(absl::StrCat(where, ": ", n_in, " inputs and ", n_out, " outputs"));
  }
  if ((op->comm_stream ? Stream::kComm : Stream::kCompute) != in.stream) {
    return Invalid(absl::StrCat(where, ": on the ", StreamName(in.stream), " stream"));
  }
  for (int id : in.inputs) {
    if (!BufferOk(plan, id)) return Invalid(absl::StrCat(where, ": input buffer ", id));
  }
  for (int id : in.outputs) {
    if (!BufferOk(plan, id)) return Invalid(absl::StrCat(where, ": output buffer ", id));
  }
  if (in.micro_step < -1 || in.micro_step >= plan.accumulate) {
    return Invalid(absl::StrCat(where, ": micro-step ", in.micro_step));
  }
  return ValidateEvents(plan, i, where, recorded_by);
}

// A buffer id that exists and is of the given kind.
bool BufferOfKind(const Plan& plan, int id, BufferKind kind) {
  return BufferOk(plan, id) && plan.buffers[id].kind == kind;
}

// A bucket's ZeRO parts: its shard against its bytes, its all-gather, and
// the gradient (ZeRO-2) and parameter (ZeRO-3) shards the stage asks for.
absl::Status ValidateBucketShards(const Plan& plan, const Bucket& b, const std::string& where) {
  const int num_instr = static_cast<int>(plan.instructions.size());
  if (b.shard_elems < 0 ||
      (b.shard_elems > 0 && b.shard_elems * plan.world_size * 4 != b.bytes)) {
    return Invalid(absl::StrCat(where, ": shard of ", b.shard_elems, " floats in ",
                                plan.world_size, " ranks is not its ", b.bytes, " bytes"));
  }
  // (Under ZeRO-3 a bucket nobody reads is never gathered.)
  if (b.shard_elems > 0 && !(plan.zero >= 3 && b.all_gather == -1) &&
      (b.all_gather < 0 || b.all_gather >= num_instr ||
       StepOpOfInstruction(plan.instructions[b.all_gather].op) != StepOp::kAllGather)) {
    return Invalid(absl::StrCat(where, ": all_gather ", b.all_gather));
  }
  if ((plan.zero >= 2) != (b.grad_shard >= 0) ||
      (b.grad_shard >= 0 && (!BufferOfKind(plan, b.grad_shard, BufferKind::kGradShard) ||
                             plan.buffers[b.grad_shard].bytes != b.shard_elems * 4))) {
    return Invalid(absl::StrCat(where, ": grad shard ", b.grad_shard, " in a plan of zero ",
                                plan.zero));
  }
  if ((plan.zero >= 3) != (b.param_shard >= 0) ||
      (b.param_shard >= 0 && (!BufferOfKind(plan, b.param_shard, BufferKind::kParamShard) ||
                              plan.buffers[b.param_shard].bytes != b.shard_elems * 4))) {
    return Invalid(absl::StrCat(where, ": parameter shard ", b.param_shard,
                                " in a plan of zero ", plan.zero));
  }
  return absl::OkStatus();
}

// One bucket: its buffers of the right kinds and sizes, the instruction
// after which it is ready and its reduction, then its ZeRO parts.
absl::Status ValidateBucket(const Plan& plan, size_t i) {
  const Bucket& b = plan.buckets[i];
  const int num_instr = static_cast<int>(plan.instructions.size());
  const std::string where = absl::StrCat("bucket ", i);
  if (b.id != static_cast<int>(i)) return Invalid(absl::StrCat(where, ": id ", b.id));
  if (!BufferOfKind(plan, b.grad_buffer, BufferKind::kBucket)) {
    return Invalid(absl::StrCat(where, ": grad buffer ", b.grad_buffer));
  }
  if (!BufferOfKind(plan, b.param_span, BufferKind::kParameterSpan)) {
    return Invalid(absl::StrCat(where, ": parameter span ", b.param_span));
  }
  for (int s : b.state_spans) {
    if (!BufferOfKind(plan, s, BufferKind::kStateSpan)) {
      return Invalid(absl::StrCat(where, ": state span ", s));
    }
  }
  if (b.bytes <= 0 || plan.buffers[b.param_span].bytes != b.bytes ||
      plan.buffers[b.grad_buffer].bytes % b.bytes != 0) {
    return Invalid(absl::StrCat(where, ": ", b.bytes, " bytes per slot"));
  }
  if (b.ready_after < 0 || b.ready_after >= num_instr) {
    return Invalid(absl::StrCat(where, ": ready_after ", b.ready_after));
  }
  const char* reduce = b.shard_elems > 0 ? "reduce_scatter" : "all_reduce";
  if (b.all_reduce < 0 || b.all_reduce >= num_instr ||
      plan.instructions[b.all_reduce].op != reduce) {
    return Invalid(absl::StrCat(where, ": ", reduce, " ", b.all_reduce));
  }
  return ValidateBucketShards(plan, b, where);
}

// The `io` record: inputs, parameters and loss that exist.
absl::Status ValidateIo(const Plan& plan) {
  for (int id : plan.input_buffers) {
    if (!BufferOk(plan, id)) return Invalid(absl::StrCat("input buffer ", id));
  }
  for (int id : plan.parameter_buffers) {
    if (!BufferOfKind(plan, id, BufferKind::kParameter)) {
      return Invalid(absl::StrCat("parameter buffer ", id));
    }
  }
  if (plan.loss_buffer != -1 && !BufferOk(plan, plan.loss_buffer)) {
    return Invalid(absl::StrCat("loss buffer ", plan.loss_buffer));
  }
  return absl::OkStatus();
}

}  // namespace

std::map<int, std::vector<int>> GatheredSpanViews(const Plan& plan) {
  std::vector<const Buffer*> gathered;
  for (const Buffer& b : plan.buffers) {
    if (b.kind == BufferKind::kParameterSpan && b.first_use >= 0) gathered.push_back(&b);
  }
  const LiveContainers spans(std::move(gathered));
  std::map<int, std::vector<int>> views;
  for (const Buffer& v : plan.buffers) {
    if (v.kind != BufferKind::kParameter || v.first_use < 0) continue;
    if (const Buffer* span = spans.Holder(v, [](const Buffer&) { return true; })) {
      views[span->id].push_back(v.id);
    }
  }
  return views;
}

std::optional<std::pair<int, int>> InPlaceOperands(const Instruction& in) {
  const ops::OpDef* def = ops::FindOp(in.op);
  if (def == nullptr || def->in_place.first < 0) return std::nullopt;
  const auto [o, i] = def->in_place;
  if (o >= static_cast<int>(in.outputs.size()) || i >= static_cast<int>(in.inputs.size())) {
    return std::nullopt;
  }
  return std::make_pair(in.inputs[i], in.outputs[o]);
}

absl::Status ValidatePlan(const Plan& plan) {
  RETURN_IF_ERROR(ValidateSettings(plan));
  for (int i = 0; i < static_cast<int>(plan.buffers.size()); ++i) {
    RETURN_IF_ERROR(ValidateBuffer(plan, i));
  }
  RETURN_IF_ERROR(CheckArenaSharing(plan));
  std::vector<int> recorded_by(plan.num_events, -1);  // event -> instruction
  for (int i = 0; i < static_cast<int>(plan.instructions.size()); ++i) {
    RETURN_IF_ERROR(ValidateInstruction(plan, i, recorded_by));
  }
  for (size_t i = 0; i < plan.buckets.size(); ++i) RETURN_IF_ERROR(ValidateBucket(plan, i));
  return ValidateIo(plan);
}

}  // namespace trainc
