// DescribeSpec: the human summary printed by `trainc check`-style tools.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/const_eval.h"
#include "compiler/frontend/frontend.h"

namespace trainc {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string Type(const ValueSpec& value) {
  return absl::StrCat(value.type == ElementType::kI32 ? "i32" : "f32",
                      Shape(value.shape));
}

// 235146 -> "235,146".
std::string Grouped(int64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  const int size = static_cast<int>(digits.size());
  for (int i = 0; i < size; ++i) {
    if (i > 0 && (size - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string Dataset(const DatasetSpec& dataset) {
  std::string split;
  if (dataset.split_begin != 0.0 || dataset.split_end != 1.0) {
    split = absl::StrFormat(", split = \"%.6g%%:%.6g%%\"", 100 * dataset.split_begin,
                            100 * dataset.split_end);
  }
  // A glob can expand to many files: the first two and the last.
  if (dataset.paths.size() > 4) {
    return absl::StrCat(EnumName(dataset.format), "(", dataset.paths.size(), " files: \"",
                        dataset.paths[0], "\", \"", dataset.paths[1], "\", ..., \"",
                        dataset.paths.back(), "\"", split, ")");
  }
  return absl::StrCat(EnumName(dataset.format), "(\"",
                      absl::StrJoin(dataset.paths, "\", \""), "\"", split, ")");
}

// The model's inputs, labels and ops, one a line.
void DescribeModel(const ModelSpec& model, std::string& out) {
  absl::StrAppend(&out, "model ", model.name, "\n");
  size_t width = 0;
  for (const OpSpec& op : model.ops) width = std::max(width, op.name.size());
  for (const ValueSpec& v : model.inputs) width = std::max(width, v.name.size());
  for (const ValueSpec& v : model.labels) width = std::max(width, v.name.size());
  for (const ValueSpec& v : model.inputs) {
    absl::StrAppendFormat(&out, "  %-*s : %s  (input)\n", width, v.name, Type(v));
  }
  for (const ValueSpec& v : model.labels) {
    absl::StrAppendFormat(&out, "  %-*s : %s  (label)\n", width, v.name, Type(v));
  }
  for (const OpSpec& op : model.ops) {
    std::vector<std::string> args = op.inputs;
    for (const auto& [name, value] : op.args) {
      // A string as written in .train (approximate="tanh"), not as
      // messages describe it (the string "tanh").
      args.push_back(absl::StrCat(name, "=",
                                  value.kind == ops::ArgValue::Kind::kString
                                      ? absl::StrCat("\"", value.s, "\"")
                                      : frontend::DescribeConstant(value)));
    }
    for (const auto& [arg, parameter] : op.shared_parameters) {
      args.push_back(absl::StrCat(arg, "=", parameter));
    }
    absl::StrAppendFormat(&out, "  %-*s = %s(%s) -> %s\n", width, op.name,
                          ops::ModelOpName(op.op), absl::StrJoin(args, ", "),
                          Type(op.output));
  }
}

// The parameters: shape, size and initialisation.
void DescribeParameters(const ModelSpec& model, std::string& out) {
  absl::StrAppend(&out, "parameters: ", model.parameters.size(), " tensors, ",
                  Grouped(model.parameter_count), " values\n");
  size_t pwidth = 0;
  for (const ParameterSpec& p : model.parameters) {
    pwidth = std::max(pwidth, p.name.size());
  }
  for (const ParameterSpec& p : model.parameters) {
    int64_t count = 1;
    for (int64_t d : p.shape) count *= d;
    std::string init;
    switch (p.init) {
      case ops::Init::kUniformFanIn:
        init = absl::StrCat("uniform(fan_in=", p.init_scale, ")");
        break;
      case ops::Init::kNormal:
        init = absl::StrCat("normal(std=", p.init_scale, ")");
        break;
      case ops::Init::kOnes:
        init = "ones";
        break;
      case ops::Init::kZeros:
        init = "zeros";
        break;
    }
    absl::StrAppendFormat(&out, "  %-*s %-12s %10s  %s\n", pwidth, p.name,
                          Shape(p.shape), Grouped(count), init);
  }
}

// The batch, the run's length, the optimizer and its schedule.
void DescribeTraining(const TrainConfig& t, std::string& out) {
  using frontend::FormatFloat;
  absl::StrAppend(&out, "batch: global_batch ", t.global_batch, " = ", t.gpus,
                  " gpus × ", t.micro_batch, " micro_batch × ", t.accumulate,
                  " accumulate\n");
  if (t.epochs > 0) {
    absl::StrAppend(&out, "run: ", t.epochs, " epochs\n");
  } else {
    absl::StrAppend(&out, "run: ", t.steps, " steps\n");
  }
  const OptimizerSpec& o = t.optimizer;
  if (o.kind == OptimizerKind::kSgd) {
    absl::StrAppend(&out, "optimizer: sgd(lr = ", FormatFloat(o.lr),
                    ", momentum = ", FormatFloat(o.momentum), ", nesterov = ",
                    o.nesterov ? "true" : "false", ", weight_decay = ",
                    FormatFloat(o.weight_decay), ")\n");
  } else {
    absl::StrAppend(&out, "optimizer: adamw(lr = ", FormatFloat(o.lr),
                    ", betas = (", FormatFloat(o.beta1), ", ",
                    FormatFloat(o.beta2), "), eps = ", FormatFloat(o.eps),
                    ", weight_decay = ", FormatFloat(o.weight_decay), ")\n");
  }
  if (t.schedule.kind == ScheduleKind::kCosine) {
    absl::StrAppend(&out, "schedule: cosine(warmup = ", t.schedule.warmup_steps,
                    ")\n");
  } else {
    absl::StrAppend(&out, "schedule: constant\n");
  }
}

// Buckets, seed and numerics, checkpoints.
void DescribeRun(const TrainSpec& spec, std::string& out) {
  using frontend::FormatFloat;
  const TrainConfig& t = spec.train;
  if (t.bucket_mb_auto) {
    absl::StrAppend(&out, "buckets: auto (the least predicted step time on ",
                    t.machine.empty() ? "the device's profile" : t.machine, ")");
  } else {
    absl::StrAppend(&out, "buckets: ", FormatFloat(t.bucket_mb), " MB");
  }
  if (!t.bucket_mb_auto && t.first_bucket_mb > 0) {
    absl::StrAppend(&out, " (first ", FormatFloat(t.first_bucket_mb), " MB)");
  }
  absl::StrAppend(&out, "\nseed: ", t.seed, ", deterministic: ",
                  t.deterministic ? "true" : "false",
                  ", tf32: ", t.tf32 ? "true" : "false",
                  t.precision != Precision::kFp32
                      ? absl::StrCat(", precision: ", EnumName(t.precision))
                      : std::string(),
                  "\n");
  if (t.checkpoint_every > 0) {
    absl::StrAppend(&out, "checkpoints: every ", t.checkpoint_every, " steps into ",
                    t.checkpoint_dir.empty() ? "checkpoints/" + spec.model.name
                                             : t.checkpoint_dir,
                    ", newest ", t.checkpoint_keep, " kept\n");
  }
}

void DescribeData(const DataSpec& d, std::string& out) {
  using frontend::FormatFloat;
  absl::StrAppend(&out, "data: train = ", Dataset(d.train), "\n");
  if (d.eval.format != DataFormat::kNone) {
    absl::StrAppend(&out, "      eval = ", Dataset(d.eval), "\n");
  }
  absl::StrAppend(&out, "      scale = ", FormatFloat(d.scale), ", shuffle = ",
                  d.shuffle ? "true" : "false");
  if (d.random_crop > 0) absl::StrAppend(&out, ", random_crop = ", d.random_crop);
  if (d.random_flip) absl::StrAppend(&out, ", random_flip = true");
  absl::StrAppend(&out, "\n");
}

}  // namespace

std::string DescribeSpec(const TrainSpec& spec) {
  std::string out;
  DescribeModel(spec.model, out);
  DescribeParameters(spec.model, out);
  DescribeTraining(spec.train, out);
  DescribeRun(spec, out);
  DescribeData(spec.data, out);
  return out;
}

}  // namespace trainc
