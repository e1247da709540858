// One test over every op of the op table (compiler/ops/op_table.cc):
//
//  - every compute op has a kernel on every backend (the KernelOp list,
//    runtime/device/kernel_ops.h, against each backend's table);
//  - every forward op runs on the CPU backend as the float64 reference
//    interpreter computes it (compiler/autodiff/reference_eval.h), and so
//    does each backward op its gradient rules emit, fed from the forward;
//  - each gradient rule, read from the op's own entry, matches central
//    finite differences of the reference forward;
//  - under precision = bf16, the op reads and writes bf16 as its policy
//    (ops::PrecisionOf) says, within bf16's rounding;
//  - with a GPU, the CUDA backend computes what the CPU backend computes.
//
//  - the ops that read the plan beyond their operands (dropout, cast,
//    sum_squares, the optimizers with their ZeRO shards) match their
//    definitions, written here in float64, on the reference and on every
//    backend, in the steps, ranks, dtypes and shards that change them.
//
// An op added to the table without a kernel, a reference or an example
// fails here, by name. Pointwise ops get their example from their arity;
// other forward ops have one in Examples(); backward ops are reached from
// their forward op's rules; the ops that read the plan have PlanCases().
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/autodiff/reference_eval.h"
#include "compiler/ops/op_table.h"
#include "compiler/ops/philox.h"
#include "compiler/plan/plan.h"
#include "compiler/util/status_macros.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device/bf16.h"
#include "runtime/device/kernel_args.h"

namespace trainc {
namespace {

using ops::Shape;

// ---------------------------------------------------------------------------
// Examples: a small instance of each forward op.

struct Operand {
  Shape shape;
  int64_t ids = 0;         // > 0: i32 values in [0, ids)
  bool workspace = false;  // the backend's workspace (sized by it)
  bool scratch = false;    // a temporary the op may leave anything in
  double scale = 1;        // float values uniform in +-1.5 * scale
};

struct Example {
  std::vector<Operand> inputs;
  std::vector<Operand> outputs;
  std::map<std::string, double> attrs;
};

Operand W() { return {{}, 0, true}; }

const std::map<std::string, Example>& Examples() {
  static const auto* examples = new std::map<std::string, Example>{
      {"linear", {{{{4, 3}}, {{5, 3}}, {{5}}}, {{{4, 5}}}, {}}},
      // 8 outputs: on CUDA the cublasLt GELU_AUX_BIAS epilogue (its aux
      // leading dimension must be a multiple of 8).
      {"linear_gelu", {{{{4, 3}}, {{8, 3}}, {{8}}}, {{{4, 8}}, {{4, 8}}}, {}}},
      // linear_relu without pre (on CUDA the RELU_BIAS epilogue, 8 outputs);
      // linear_tanh and linear_gelu_erf with pre, 5 outputs.
      {"linear_relu", {{{{4, 3}}, {{8, 3}}, {{8}}}, {{{4, 8}}}, {}}},
      {"linear_tanh", {{{{4, 3}}, {{5, 3}}, {{5}}}, {{{4, 5}}, {{4, 5}}}, {}}},
      {"linear_gelu_erf", {{{{4, 3}}, {{5, 3}}, {{5}}}, {{{4, 5}}, {{4, 5}}}, {}}},
      // 16 inputs: on CUDA the cublasLt DGELU epilogue (its aux leading
      // dimension, in, must be a multiple of 8).
      {"linear_grad_input_gelu", {{{{4, 8}}, {{8, 16}}, {{4, 16}}}, {{{4, 16}}, W()}, {}}},
      {"layernorm", {{{{4, 6}}, {{6}}, {{6}}}, {{{4, 6}}, {{4}}, {{4}}}, {{"eps", 1e-5}}}},
      // 37 features: more than a warp's 32 lanes, not a multiple of them.
      {"add_layernorm",
       {{{{3, 37}}, {{3, 37}}, {{37}}, {{37}}},
        {{{3, 37}}, {{3, 37}}, {{3}}, {{3}}},
        {{"eps", 1e-5}}}},
      {"rmsnorm", {{{{4, 6}}, {{6}}}, {{{4, 6}}, {{4}}}, {{"eps", 1e-6}}}},
      // Two samples of 6 channels in 3 groups over a 3 x 2 image.
      {"group_norm",
       {{{{2, 6, 3, 2}}, {{6}}, {{6}}},
        {{{2, 6, 3, 2}}, {{2, 3}}, {{2, 3}}},
        {{"groups", 3}, {"eps", 1e-5}}}},
      {"softmax", {{{{4, 6}}}, {{{4, 6}}}, {}}},
      {"embedding", {{{{2, 3}, 5}, {{5, 4}}}, {{{2, 3, 4}}}, {}}},
      {"position_embedding", {{{{3, 4}}}, {{{2, 3, 4}}}, {}}},
      // Two query heads sharing one key/value head, rotary positions.
      {"attention",
       {{{{2, 3, 16}}},
        {{{2, 3, 8}}, {{2, 2, 3}}},
        {{"heads", 2}, {"kv_heads", 1}, {"rope", 1}, {"rope_theta", 10000}}}},
      {"cross_entropy", {{{{4, 5}}, {{4}, 5}}, {{{1}}, {{4, 5}}}, {}}},
      {"cross_entropy_fused", {{{{4, 5}}, {{4}, 5}}, {{{1}}, {{4, 5}}}, {{"scale", 0.25}}}},
      {"mse", {{{{4, 3}}, {{4, 3}}}, {{{1}}}, {}}},
      {"conv2d",
       {{{{2, 3, 5, 5}}, {{4, 3, 3, 3}}, {{4}}},
        {{{2, 4, 5, 5}}, W()},
        {{"stride", 1}, {"padding", 1}}}},
      {"conv2d_relu",
       {{{{2, 3, 5, 5}}, {{4, 3, 3, 3}}, {{4}}},
        {{{2, 4, 5, 5}}, W()},
        {{"stride", 1}, {"padding", 1}}}},
      {"max_pool2d",
       {{{{2, 3, 4, 4}}},
        {{{2, 3, 2, 2}}, {{2, 3, 2, 2}, 1}, W()},
        {{"kernel_h", 2}, {"kernel_w", 2}, {"stride", 2}, {"padding", 0}}}},
      {"avg_pool2d",
       {{{{2, 3, 5, 5}}},
        {{{2, 3, 3, 3}}, W()},
        {{"kernel_h", 3}, {"kernel_w", 3}, {"stride", 2}, {"padding", 1}}}},
      {"reshape", {{{{2, 6}}}, {{{3, 4}}}, {}}},
      // Fused from silu, mul and their gradients (no gradient rules of
      // their own): swiglu_grad against finite differences of swiglu below.
      {"swiglu", {{{{3, 7}}, {{3, 7}}}, {{{3, 7}}}, {}}},
      {"swiglu_grad", {{{{3, 7}}, {{3, 7}}, {{3, 7}}}, {{{3, 7}}, {{3, 7}}}, {}}},
      // Step 1 of rank 0, as a plan of one example per step runs it (the
      // mask's dependence on the step, the rank and the micro-step:
      // DropoutCases below).
      {"dropout", {{{{4, 5}}}, {{{4, 5}}}, {{"p", 0.25}, {"key", 3}}}},
  };
  return *examples;
}

// The example of a forward op; pointwise ops get [3, 7] operands.
bool ExampleOf(const ops::OpDef& def, Example* out) {
  auto it = Examples().find(def.name);
  if (it != Examples().end()) {
    *out = it->second;
    return true;
  }
  const int arity = PointwiseArity(KernelOpOfInstruction(def.name));
  if (arity == 0) return false;
  *out = Example{std::vector<Operand>(arity, Operand{{3, 7}}), {Operand{{3, 7}}}, {}};
  return true;
}

// ---------------------------------------------------------------------------
// Running one instruction: on the reference, or on a Device.

struct Tensor {
  Operand spec;
  std::vector<double> data;
};

int64_t Count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Values exactly representable in f32 (and in bf16 when `bf16`), so every
// backend starts from the same numbers.
double Representable(double v, bool bf16) {
  const float f = static_cast<float>(v);
  return bf16 ? Bf16ToFloat(FloatToBf16(f)) : f;
}

Tensor RandomTensor(const Operand& spec, std::mt19937& rng, bool bf16 = false) {
  Tensor t{spec, std::vector<double>(Count(spec.shape))};
  std::uniform_real_distribution<double> u(-1.5 * spec.scale, 1.5 * spec.scale);
  std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(spec.ids - 1, 0));
  for (double& v : t.data) v = spec.ids > 0 ? double(id(rng)) : Representable(u(rng), bf16);
  return t;
}

struct Call {
  std::string op;
  std::map<std::string, double> attrs;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // shapes; values are the prior when accumulating
};

// Runs `c` on the float64 reference: without a plan, or as the one
// instruction of `plan` (for the ops that read it) in `step`.
absl::Status RunReference(Call& c, const Plan* plan = nullptr, const StepState& step = {}) {
  std::vector<TensorRef> in, out;
  for (Tensor& t : c.inputs) in.push_back({t.data.data(), t.spec.shape});
  // A workspace stays in the list (the reference counts outputs) but is
  // never written.
  for (Tensor& t : c.outputs) out.push_back({t.data.data(), t.spec.shape});
  if (plan == nullptr) return EvalOp(c.op, c.attrs, in, out);
  return EvalOp(c.op, c.attrs, UnitFactsOf(*plan, plan->instructions[0]),
                ops::unit::Step{step.training, step.step, step.rank, step.lr}, in, out);
}

// What an instruction reads of its plan beyond its operands (dropout, the
// optimizer, sum_squares): `edit` sets the plan's fields (the batch's
// layout and seed, buckets, the optimizer) from the one instruction's
// operands; output j updates input in_place[j] (-1: its own buffer); the
// step its kernel runs in.
struct Setting {
  std::function<void(Plan&, Instruction&)> edit;
  std::vector<int> in_place;
  StepState step;
};

// A buffer of `plan` that is no operand (a bucket's full span beside the
// shard an instruction reads), at the end of the arena.
int AddBuffer(Plan& plan, const std::string& name, const Shape& shape, BufferKind kind) {
  Buffer b;
  b.id = static_cast<int>(plan.buffers.size());
  b.name = name;
  b.kind = kind;
  b.dtype = DType::kF32;
  b.shape = shape;
  b.bytes = Count(shape) * 4;
  b.offset = plan.arena_bytes;
  plan.arena_bytes += (b.bytes + 255) / 256 * 256;
  plan.buffers.push_back(b);
  return b.id;
}

// The one-instruction plan of `c`: float operands f32, or bf16 where
// `is_bf16(output?, index)`; a workspace of `workspace_bytes`; as `setting`
// says.
Plan PlanOf(const Call& c, const std::function<bool(bool output, int j)>& is_bf16,
            int64_t workspace_bytes, const Setting& setting = {}) {
  Plan plan;
  plan.global_batch = plan.micro_batch = 1;
  plan.accumulate = 1;
  int64_t offset = 0;
  auto add = [&](const Tensor& t, bool output, int j) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = absl::StrCat(output ? "out" : "in", j);
    b.kind = t.spec.workspace ? BufferKind::kWorkspace : BufferKind::kActivation;
    b.dtype = t.spec.ids > 0         ? DType::kI32
              : t.spec.workspace     ? DType::kF32
              : is_bf16(output, j)   ? DType::kBF16
                                     : DType::kF32;
    b.shape = t.spec.shape;
    b.bytes = t.spec.workspace ? workspace_bytes : Count(t.spec.shape) * DTypeBytes(b.dtype);
    b.offset = offset;
    offset += (b.bytes + 255) / 256 * 256;
    plan.buffers.push_back(b);
    return b.id;
  };
  Instruction instr;
  instr.op = c.op;
  instr.attrs = c.attrs;
  instr.label = c.op;
  for (size_t j = 0; j < c.inputs.size(); ++j) {
    instr.inputs.push_back(add(c.inputs[j], false, static_cast<int>(j)));
  }
  for (size_t j = 0; j < c.outputs.size(); ++j) {
    const int same = j < setting.in_place.size() ? setting.in_place[j] : -1;
    instr.outputs.push_back(same >= 0 ? instr.inputs[same]
                                      : add(c.outputs[j], true, static_cast<int>(j)));
  }
  plan.arena_bytes = offset;
  if (setting.edit) setting.edit(plan, instr);
  plan.instructions = {instr};
  return plan;
}

absl::Status Upload(Device& device, const Buffer& b, const std::vector<double>& v) {
  if (b.dtype == DType::kI32) {
    std::vector<int32_t> ids(v.begin(), v.end());
    return device.Upload(b.offset, ids.data(), b.bytes);
  }
  std::vector<float> f(v.begin(), v.end());
  if (b.dtype == DType::kF32) return device.Upload(b.offset, f.data(), b.bytes);
  std::vector<uint16_t> h(f.size());
  NarrowToBf16(f.data(), static_cast<int64_t>(f.size()), h.data());
  return device.Upload(b.offset, h.data(), b.bytes);
}

absl::Status Download(Device& device, const Buffer& b, std::vector<double>& v) {
  if (b.dtype == DType::kI32) {
    std::vector<int32_t> ids(v.size());
    RETURN_IF_ERROR(device.Download(b.offset, ids.data(), b.bytes));
    v.assign(ids.begin(), ids.end());
    return absl::OkStatus();
  }
  std::vector<float> f(v.size());  // f32, or bf16 widened
  RETURN_IF_ERROR(DownloadFloats(device, b, 0, static_cast<int64_t>(f.size()), f.data()));
  v.assign(f.begin(), f.end());
  return absl::OkStatus();
}


// A backend under test.
struct Backend {
  std::string name;
  std::function<std::unique_ptr<Device>()> make;
  std::function<absl::StatusOr<int64_t>(const Plan&, const Instruction&)> workspace;
};

Backend Cpu() {
  return {"cpu", [] { return std::make_unique<CpuDevice>(); }, cpu::WorkspaceBytes};
}

// Runs `c` on `backend`: its outputs replace c.outputs' values (workspaces
// are left alone).
absl::Status RunOn(const Backend& backend, Call& c,
                   const std::function<bool(bool, int)>& is_bf16, const Setting& setting = {}) {
  Plan plan = PlanOf(c, is_bf16, 0, setting);
  if (!c.outputs.empty() && c.outputs.back().spec.workspace) {
    ASSIGN_OR_RETURN(const int64_t bytes, backend.workspace(plan, plan.instructions[0]));
    plan = PlanOf(c, is_bf16, bytes, setting);
  }
  bool any_bf16 = false;
  for (const Buffer& b : plan.buffers) any_bf16 |= b.dtype == DType::kBF16;
  if (any_bf16) plan.precision = Precision::kBf16;
  std::unique_ptr<Device> device = backend.make();
  RETURN_IF_ERROR(device->AllocateArena(plan.arena_bytes));
  const Instruction& instr = plan.instructions[0];
  for (size_t j = 0; j < c.inputs.size(); ++j) {
    RETURN_IF_ERROR(Upload(*device, plan.buffers[instr.inputs[j]], c.inputs[j].data));
  }
  for (size_t j = 0; j < c.outputs.size(); ++j) {
    const bool in_place = j < setting.in_place.size() && setting.in_place[j] >= 0;
    if (c.outputs[j].spec.workspace || in_place) continue;
    RETURN_IF_ERROR(Upload(*device, plan.buffers[instr.outputs[j]], c.outputs[j].data));
  }
  RETURN_IF_ERROR(device->Prepare(plan));
  RETURN_IF_ERROR(device->RunKernel(plan, instr, setting.step));
  RETURN_IF_ERROR(device->Synchronize());
  for (size_t j = 0; j < c.outputs.size(); ++j) {
    if (c.outputs[j].spec.workspace) continue;
    RETURN_IF_ERROR(Download(*device, plan.buffers[instr.outputs[j]], c.outputs[j].data));
  }
  return absl::OkStatus();
}

bool AllF32(bool, int) { return false; }

// max |a - b| / max(1, max |b|) over the float outputs that are not
// scratch: i32 outputs (argmax) are each backend's own encoding.
void ExpectClose(const Call& got, const Call& want, double tolerance, const std::string& what) {
  for (size_t j = 0; j < got.outputs.size(); ++j) {
    const Tensor& g = got.outputs[j];
    if (g.spec.workspace || g.spec.scratch || g.spec.ids > 0) continue;
    double diff = 0, scale = 1;
    for (size_t i = 0; i < g.data.size(); ++i) {
      const double a = g.data[i], b = want.outputs[j].data[i];
      // A NaN on one side only is as far as it gets (std::max drops NaNs).
      if (std::isnan(a) != std::isnan(b)) diff = std::numeric_limits<double>::infinity();
      if (!std::isnan(a) && !std::isnan(b)) diff = std::max(diff, std::abs(a - b));
      if (!std::isnan(b)) scale = std::max(scale, std::abs(b));
    }
    EXPECT_LE(diff / scale, tolerance) << what << ": " << got.op << " output " << j;

  }
}

// ---------------------------------------------------------------------------
// One forward op, its backward ops, and their checks.

// The backward instruction `rule` emits for forward `fwd` (inputs and
// outputs already computed by one backend), dy = `dy`; accumulating into
// `prior` when given.
Call BackwardCall(const ops::GradRule& rule, const Call& fwd, const Tensor& dy, double scale,
                  const std::vector<Tensor>* prior) {
  Call b;
  b.op = rule.op;
  b.attrs = fwd.attrs;
  if (rule.scaled) b.attrs["scale"] = scale;
  b.attrs["accumulate"] = prior != nullptr ? 1 : 0;
  for (const ops::Operand& o : rule.operands) {
    switch (o.kind) {
      case ops::Operand::Kind::kGrad: b.inputs.push_back(dy); break;
      case ops::Operand::Kind::kInput: b.inputs.push_back(fwd.inputs[o.index]); break;
      case ops::Operand::Kind::kOutput: b.inputs.push_back(fwd.outputs[o.index]); break;
    }
  }
  for (int t : rule.targets) {
    if (t >= static_cast<int>(fwd.inputs.size())) continue;  // an absent bias
    b.outputs.push_back(Tensor{Operand{fwd.inputs[t].spec.shape}, {}});
  }
  if (rule.workspace_like >= 0) {
    Operand scratch{fwd.outputs[rule.workspace_like].spec.shape};
    scratch.scratch = true;
    b.outputs.push_back(Tensor{scratch, {}});
  }
  const ops::OpDef* def = ops::FindOp(rule.op);
  if (def != nullptr && def->workspace) b.outputs.push_back(Tensor{W(), {}});
  for (size_t j = 0; j < b.outputs.size(); ++j) {
    Tensor& t = b.outputs[j];
    t.data.assign(Count(t.spec.shape), 0.0);
    if (prior != nullptr && j < prior->size()) t.data = (*prior)[j].data;
  }
  return b;
}

// L = sum(dy * y0) of the reference forward, for finite differences.
double Objective(Call fwd, const Tensor& dy) {
  for (Tensor& t : fwd.outputs) t.data.assign(t.data.size(), 0.0);
  EXPECT_TRUE(RunReference(fwd).ok());
  double l = 0;
  for (size_t i = 0; i < dy.data.size(); ++i) l += dy.data[i] * fwd.outputs[0].data[i];
  return l;
}

// The reference backward of `rule` against central differences of L.
void CheckGradientRule(const ops::OpDef& def, const ops::GradRule& rule, const Call& fwd,
                       const Tensor& dy, double scale) {
  Call b = BackwardCall(rule, fwd, dy, scale, nullptr);
  ASSERT_TRUE(RunReference(b).ok()) << rule.op;
  int out = 0;
  for (int t : rule.targets) {
    if (t >= static_cast<int>(fwd.inputs.size())) continue;
    Call probe = fwd;
    std::vector<double>& x = probe.inputs[t].data;
    double diff = 0, size = 1e-3;
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i], h = 1e-5;
      x[i] = saved + h;
      const double plus = Objective(probe, dy);
      x[i] = saved - h;
      const double minus = Objective(probe, dy);
      x[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      diff = std::max(diff, std::abs(numeric - b.outputs[out].data[i]));
      size = std::max(size, std::abs(numeric));
    }
    EXPECT_LE(diff / size, 1e-6) << def.name << " -> " << rule.op << ": d/d input " << t
                                 << " against finite differences";
    ++out;
  }
}

// Float operands bf16 as the op's precision policy says (parameters and
// losses aside, which the plan keeps f32): inputs always, outputs unless
// the op computes in f32.
std::function<bool(bool, int)> Bf16Policy(const ops::OpDef& def) {
  const bool outputs = ops::PrecisionOf(def) != ops::Precision::kFp32;
  const std::vector<int> f32 = def.f32_outputs;
  return [outputs, f32](bool output, int j) {
    return !output || (outputs && std::find(f32.begin(), f32.end(), j) == f32.end());
  };
}

void CheckOp(const ops::OpDef& def, const Example& ex, const std::vector<Backend>& backends,
             bool finite_differences = true) {
  SCOPED_TRACE(def.name);
  std::mt19937 rng(1234);
  Call ref{def.name, ex.attrs, {}, {}};
  for (const Operand& o : ex.inputs) ref.inputs.push_back(RandomTensor(o, rng));
  for (const Operand& o : ex.outputs) ref.outputs.push_back({o, std::vector<double>(Count(o.shape))});
  ASSERT_TRUE(RunReference(ref).ok()) << def.name << " has no float64 reference (EvalOp)";
  const Tensor dy = RandomTensor(Operand{ex.outputs[0].shape}, rng);
  const double scale = 0.375;
  const Tensor& dl = def.is_loss ? Tensor{Operand{{1}}, {scale}} : dy;

  for (const ops::GradRule& rule : def.grads) {
    SCOPED_TRACE(rule.op);
    if (finite_differences) CheckGradientRule(def, rule, ref, dl, scale);
  }
  for (const Backend& backend : backends) {
    SCOPED_TRACE(backend.name);
    Call got = ref;
    absl::Status run = RunOn(backend, got, AllF32);
    ASSERT_TRUE(run.ok()) << run;
    ExpectClose(got, ref, 2e-5, backend.name);
    for (const ops::GradRule& rule : def.grads) {
      for (bool accumulate : {false, true}) {
        std::vector<Tensor> prior;
        Call want = BackwardCall(rule, ref, dl, scale, nullptr);
        for (Tensor& t : want.outputs) prior.push_back(RandomTensor(Operand{t.spec.shape}, rng));
        want = BackwardCall(rule, ref, dl, scale, accumulate ? &prior : nullptr);
        ASSERT_TRUE(RunReference(want).ok()) << rule.op;
        Call mine = BackwardCall(rule, got, dl, scale, accumulate ? &prior : nullptr);
        run = RunOn(backend, mine, AllF32);
        ASSERT_TRUE(run.ok()) << rule.op << ": " << run;
        ExpectClose(mine, want, 2e-5, backend.name + (accumulate ? " accumulate" : ""));
      }
    }
  }
}

// bf16: the forward op on bf16 operands as its policy says, against the
// reference on the same (bf16-representable) inputs.
void CheckBf16(const ops::OpDef& def, const Example& ex, const Backend& backend) {
  SCOPED_TRACE(def.name);
  std::mt19937 rng(99);
  Call ref{def.name, ex.attrs, {}, {}};
  for (const Operand& o : ex.inputs) ref.inputs.push_back(RandomTensor(o, rng, /*bf16=*/true));
  for (const Operand& o : ex.outputs) ref.outputs.push_back({o, std::vector<double>(Count(o.shape))});
  ASSERT_TRUE(RunReference(ref).ok());
  Call got = ref;
  const absl::Status run = RunOn(backend, got, Bf16Policy(def));
  ASSERT_TRUE(run.ok()) << run;
  // f32 arithmetic, one bf16 rounding of the result (2^-8 relative).
  ExpectClose(got, ref, 1.0 / 128, backend.name + " bf16");
}

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// The ops that read the plan beyond their operands' shapes: dropout (the
// batch's layout, its seed, the step and the rank), cast (its operands'
// dtypes), sum_squares and the optimizer (the bucket, its ZeRO shards, the
// optimizer and the step). Their float64 reference is their family's own
// loops (Run<double>), as the CPU kernel is (Run<float>): a mistake there is
// in both, so each case is also checked against the op's definition,
// written here in float64, and then each backend against the reference.

struct PlanCase {
  std::string name;
  Call call;  // operands; the outputs' priors (in place: the inputs' values)
  std::function<bool(bool, int)> bf16;  // the operands' dtypes
  Setting setting;
  double tolerance = 0;  // each backend against the reference
  // `call`'s outputs by the op's definition, in float64.
  std::function<void(Call&)> definition;
};

void CheckPlanCase(const PlanCase& k, const std::vector<Backend>& backends) {
  SCOPED_TRACE(absl::StrCat(k.call.op, ": ", k.name));
  const Plan plan = PlanOf(k.call, k.bf16, 0, k.setting);
  Call ref = k.call;
  const absl::Status status = RunReference(ref, &plan, k.setting.step);
  ASSERT_TRUE(status.ok()) << k.call.op << " on the float64 reference: " << status;
  Call def = k.call;
  k.definition(def);
  // The same float64 arithmetic, perhaps in another order.
  ExpectClose(ref, def, 1e-12, "the float64 reference against the definition");
  for (const Backend& backend : backends) {
    Call got = k.call;
    const absl::Status run = RunOn(backend, got, k.bf16, k.setting);
    ASSERT_TRUE(run.ok()) << backend.name << ": " << run;
    ExpectClose(got, ref, k.tolerance, backend.name);
  }
}

// Dropout's batch: `world` ranks of `accumulate` micro-batches of
// `micro_batch` examples; the instruction's micro-step.
struct BatchLayout {
  int64_t world = 2, accumulate = 2, micro_batch = 4;
  int micro_step = 1;
  uint64_t seed = 1234;
};

// dropout (or dropout_grad) of x[micro_batch, 3, 5] at p = 0.25. Its
// definition: y[b, j] (+)= x[b, j] DropoutFactor(seed, key, e, j, p), e the
// global example of row b, (step - 1) global_batch + (rank accumulate +
// micro_step) micro_batch + b; in evaluation y (+)= x. The kernel rounds
// x times the factor to f32 (2^-24 relative), and the sum once more when
// accumulating: 2^-22; a wrong mask is off by about 1.
PlanCase DropoutCase(const std::string& name, const std::string& op, const BatchLayout& l,
                     const StepState& step, bool accumulate, std::mt19937& rng) {
  const float p = 0.25f;
  const uint32_t key = 7;
  const Operand x{{l.micro_batch, 3, 5}};
  PlanCase k{name,
             {op, {{"p", p}, {"key", key}, {"accumulate", accumulate ? 1 : 0}},
              {RandomTensor(x, rng)}, {RandomTensor(x, rng)}},
             AllF32,
             {},
             std::ldexp(1.0, -22)};
  const int64_t global = l.world * l.accumulate * l.micro_batch;
  k.setting.step = step;
  k.setting.edit = [l, global](Plan& plan, Instruction& instr) {
    plan.seed = static_cast<int64_t>(l.seed);
    plan.world_size = l.world;
    plan.accumulate = l.accumulate;
    plan.micro_batch = l.micro_batch;
    plan.global_batch = global;
    instr.micro_step = l.micro_step;
  };
  k.definition = [l, global, step, p, key, accumulate](Call& c) {
    const std::vector<double>& x = c.inputs[0].data;
    std::vector<double>& y = c.outputs[0].data;
    const int64_t per_example = static_cast<int64_t>(x.size()) / l.micro_batch;
    for (int64_t b = 0; b < l.micro_batch; ++b) {
      const uint64_t e = (step.step - 1) * global +
                         (step.rank * l.accumulate + l.micro_step) * l.micro_batch + b;
      for (int64_t j = 0; j < per_example; ++j) {
        const int64_t i = b * per_example + j;
        const double f = step.training ? DropoutFactor(l.seed, key, e, j, p) : 1.0;
        y[i] = (accumulate ? y[i] : 0.0) + x[i] * f;
      }
    }
  };
  return k;
}

std::vector<PlanCase> DropoutCases(std::mt19937& rng) {
  const BatchLayout l;
  const StepState rank1{3, 0.0, 1, true};  // step 3 of rank 1
  StepState evaluation = rank1;
  evaluation.training = false;
  return {
      DropoutCase("rank 1 of 2, step 3, micro-step 1 of 2", "dropout", l, rank1, false, rng),
      DropoutCase("accumulating", "dropout", l, rank1, true, rng),
      DropoutCase("evaluation: the identity", "dropout", l, evaluation, false, rng),
      DropoutCase("the forward's mask", "dropout_grad", l, rank1, true, rng),
  };
}

// f32 -> bf16 by its definition, bit by bit (not through bf16.h): the
// nearest bf16, ties to the even one.
double RoundToBf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t low = u & 0xffffu;
  u &= 0xffff0000u;
  if (low > 0x8000u || (low == 0x8000u && (u & 0x10000u))) u += 0x10000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// cast, both ways, exactly (tolerance 0): rounding to nearest even is
// specified to the bit. The f32 -> bf16 case starts with ties: 1 + 2^-8
// (to 1, even), 1 + 3 2^-8 (to 1 + 2^-6: 1 + 2^-7 is odd), its negative,
// and 3 + 2^-7 (to 3).
std::vector<PlanCase> CastCases(std::mt19937& rng) {
  const Operand x{{3, 37}};
  PlanCase to_bf16{"f32 to bf16, ties to even",
                   {"cast", {}, {RandomTensor(x, rng)}, {RandomTensor(x, rng)}},
                   [](bool output, int) { return output; }};
  const double tie = std::ldexp(1.0, -8);
  std::vector<double>& v = to_bf16.call.inputs[0].data;
  v[0] = 1 + tie, v[1] = 1 + 3 * tie, v[2] = -v[1], v[3] = 3 + 2 * tie;
  to_bf16.definition = [](Call& c) {
    for (size_t i = 0; i < c.inputs[0].data.size(); ++i) {
      c.outputs[0].data[i] = RoundToBf16(c.inputs[0].data[i]);
    }
  };
  PlanCase to_f32{"bf16 to f32",
                  {"cast", {}, {RandomTensor(x, rng, /*bf16=*/true)}, {RandomTensor(x, rng)}},
                  [](bool output, int) { return !output; }};
  to_f32.definition = [](Call& c) { c.outputs[0].data = c.inputs[0].data; };
  return {to_bf16, to_f32};
}

// A bucket of `floats` over `world` ranks, under ZeRO `zero` (0: none; 1:
// each rank reads its shard of the span and the gradients; 2: the gradients
// are the rank's shard alone; 3: the parameters too), shards of floats /
// world.
struct BucketLayout {
  int64_t floats = 111;
  int64_t world = 1;
  int zero = 0;
  int64_t Shard() const { return zero == 0 ? 0 : floats / world; }
  // What a rank updates, and where it starts in the span (the gradients:
  // GradBegin) as the instruction reads it.
  int64_t Count() const { return zero == 0 ? floats : Shard(); }
  int64_t ParamBegin(int rank) const { return zero == 1 || zero == 2 ? rank * Shard() : 0; }
  int64_t GradBegin(int rank) const { return zero == 1 ? rank * Shard() : 0; }
  int64_t ParamFloats() const { return zero == 3 ? Shard() : floats; }
  int64_t GradFloats() const { return zero >= 2 ? Shard() : floats; }
};

// Bucket 0 of the plan from the instruction's operands: input `grads` its
// gradients, input `params` (-1: none) its parameters, inputs from
// `states` on its state spans, `grad_sq` (-1: none) a step scalar; the
// span and the bucket as buffers of their own where the instruction reads
// shards of them.
void SetBucket(Plan& plan, const Instruction& instr, const BucketLayout& l, int params, int grads,
               int states, int grad_sq, bool decayed) {
  plan.world_size = l.world;
  plan.zero = l.zero;
  auto as = [&](int j, BufferKind kind) {
    plan.buffers[instr.inputs[j]].kind = kind;
    return instr.inputs[j];
  };
  Bucket b;
  b.bytes = l.floats * 4;
  b.shard_elems = l.Shard();
  b.weight_decay = decayed;
  if (l.zero >= 2) b.grad_shard = as(grads, BufferKind::kGradShard);
  b.grad_buffer = l.zero >= 2 ? AddBuffer(plan, "bucket", {l.floats}, BufferKind::kBucket)
                              : as(grads, BufferKind::kBucket);
  if (params >= 0 && l.zero == 3) b.param_shard = as(params, BufferKind::kParamShard);
  b.param_span = params >= 0 && l.zero != 3
                     ? as(params, BufferKind::kParameterSpan)
                     : AddBuffer(plan, "span", {l.floats}, BufferKind::kParameterSpan);
  const int end = static_cast<int>(instr.inputs.size()) - (grad_sq >= 0 ? 1 : 0);
  for (int j = states; j < end && states >= 0; ++j) {
    b.state_spans.push_back(as(j, BufferKind::kStateSpan));
  }
  if (grad_sq >= 0) as(grad_sq, BufferKind::kStepScalar);
  plan.buckets = {b};
}

// sum_squares over bucket `l` (its gradient buffer two slots when it is
// not sharded) into [1]. Its definition: the sum of the squares of the
// rank's floats (+ the prior). Both sum in double and round once to f32,
// twice when accumulating: 2^-22.
PlanCase SumSquaresCase(const std::string& name, const BucketLayout& l, int rank,
                        bool accumulate, std::mt19937& rng) {
  const int64_t grads = l.zero >= 2 ? l.Shard() : l.zero == 1 ? l.floats : 2 * l.floats;
  std::map<std::string, double> attrs = {{"bucket", 0}, {"accumulate", accumulate ? 1 : 0}};
  if (l.zero > 0) attrs["shard"] = 1;
  PlanCase k{name,
             {"sum_squares", attrs, {RandomTensor(Operand{{grads}}, rng)},
              {RandomTensor(Operand{{1}}, rng)}},
             AllF32,
             {},
             std::ldexp(1.0, -22)};
  k.setting.step.rank = rank;
  k.setting.edit = [l](Plan& plan, Instruction& instr) {
    SetBucket(plan, instr, l, -1, 0, -1, -1, true);
  };
  k.definition = [l, rank, accumulate](Call& c) {
    double s = accumulate ? c.outputs[0].data[0] : 0.0;
    const double* g = c.inputs[0].data.data() + l.GradBegin(rank);
    for (int64_t i = 0; i < l.Count(); ++i) s += g[i] * g[i];
    c.outputs[0].data[0] = s;
  };
  return k;
}

std::vector<PlanCase> SumSquaresCases(std::mt19937& rng) {
  return {
      SumSquaresCase("slot 0 of the bucket", BucketLayout{}, 0, false, rng),
      SumSquaresCase("accumulating", BucketLayout{}, 0, true, rng),
      SumSquaresCase("ZeRO-1: rank 2's shard of 3", BucketLayout{111, 3, 1}, 2, false, rng),
      SumSquaresCase("ZeRO-2: rank 1's gradient shard", BucketLayout{111, 3, 2}, 1, false, rng),
  };
}

// One optimizer step over bucket `bucket`, as the rank and step of `step`.
struct OptimizerCase {
  std::string name;
  OptimizerConfig config;
  BucketLayout bucket;
  StepState step;
  bool decayed = true;  // the bucket's parameters are decayed
  double grad_sq = -1;  // the squared norm's input; < 0: none
  double clip = 0;
};

// The optimizer by torch's definitions, in float64, over the rank's floats:
// torch.optim.AdamW (m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p = p (1 - lr wd) - lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + eps)) and
// torch.optim.SGD (d = g + wd p, buf = d on step 1 else momentum buf + d,
// p -= lr (nesterov ? d + momentum buf : buf), or lr d without momentum);
// g scaled by min(1, clip / (sqrt(grad_sq) + 1e-6)), nothing changed when
// grad_sq is not finite.
void OptimizerDefinition(const OptimizerCase& o, Call& c) {
  const OptimizerConfig& h = o.config;
  double scale = 1;
  if (o.grad_sq >= 0) {  // +inf too
    if (!std::isfinite(o.grad_sq)) return;
    if (o.clip > 0) scale = std::min(1.0, o.clip / (std::sqrt(o.grad_sq) + 1e-6));
  }
  const double lr = o.step.lr, t = static_cast<double>(o.step.step);
  const double wd = o.decayed ? h.weight_decay : 0;
  double* p = c.outputs[0].data.data() + o.bucket.ParamBegin(o.step.rank);
  const double* grad = c.inputs[1].data.data() + o.bucket.GradBegin(o.step.rank);
  for (int64_t i = 0; i < o.bucket.Count(); ++i) {
    const double g = grad[i] * scale;
    if (h.kind == OptimizerKind::kAdamW) {
      double& m = c.outputs[1].data[i];
      double& v = c.outputs[2].data[i];
      m = h.beta1 * m + (1 - h.beta1) * g;
      v = h.beta2 * v + (1 - h.beta2) * g * g;
      p[i] = p[i] * (1 - lr * wd) - lr / (1 - std::pow(h.beta1, t)) * m /
                                        (std::sqrt(v / (1 - std::pow(h.beta2, t))) + h.eps);
      continue;
    }
    const double d = g + wd * p[i];
    if (h.momentum == 0) {
      p[i] -= lr * d;
      continue;
    }
    double& buf = c.outputs[1].data[i];
    buf = o.step.step == 1 ? d : h.momentum * buf + d;
    p[i] -= lr * (h.nesterov ? d + h.momentum * buf : buf);
  }
}

// The optimizer's instruction for `o`: params, grads, state spans[,
// grad_sq] -> params, state spans, in place. Each float passes through
// about ten f32 roundings (2^-24 relative each) of parameters, states and
// updates below 1.5: 10 x 1.5 x 2^-24 < 1e-6 (the CPU's largest, 9e-8);
// a wrong formula or element is off by more than lr x 1e-3 = 1e-5.
PlanCase OptimizerPlanCase(const OptimizerCase& o, std::mt19937& rng) {
  const int states = o.config.kind == OptimizerKind::kAdamW ? 2 : o.config.momentum != 0 ? 1 : 0;
  const BucketLayout& l = o.bucket;
  Call c{"optimizer", {{"bucket", 0}}, {}, {}};
  if (l.zero > 0) c.attrs["shard"] = 1;
  if (o.clip > 0) c.attrs["clip"] = o.clip;
  c.inputs = {RandomTensor(Operand{{l.ParamFloats()}}, rng),
              RandomTensor(Operand{{l.GradFloats()}}, rng)};
  std::vector<int> in_place = {0};
  for (int s = 0; s < states; ++s) {
    Tensor state = RandomTensor(Operand{{l.Count()}}, rng);
    // v >= 0, as AdamW's second moment is.
    for (double& v : state.data) v = s == 1 ? std::abs(v) : v;
    in_place.push_back(static_cast<int>(c.inputs.size()));
    c.inputs.push_back(state);
  }
  const bool norm = o.grad_sq >= 0;
  if (norm) c.inputs.push_back(Tensor{Operand{{1}}, {o.grad_sq}});
  for (int j : in_place) c.outputs.push_back(c.inputs[j]);
  PlanCase k{o.name, c, AllF32, {}, 1e-6};
  k.setting.in_place = in_place;
  k.setting.step = o.step;
  const int grad_sq = norm ? static_cast<int>(c.inputs.size()) - 1 : -1;
  k.setting.edit = [o, grad_sq](Plan& plan, Instruction& instr) {
    plan.optimizer = o.config;
    SetBucket(plan, instr, o.bucket, 0, 1, 2, grad_sq, o.decayed);
  };
  k.definition = [o](Call& c) { OptimizerDefinition(o, c); };
  return k;
}

std::vector<PlanCase> OptimizerCases(std::mt19937& rng) {
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::kAdamW;
  adamw.beta1 = 0.9, adamw.beta2 = 0.999, adamw.eps = 1e-8, adamw.weight_decay = 0.1;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0.9, sgd.weight_decay = 0.01;
  OptimizerConfig nesterov = sgd, plain = sgd;
  nesterov.nesterov = true;
  plain.momentum = 0;
  const BucketLayout whole, zero1{111, 3, 1}, zero2{111, 3, 2}, zero3{111, 3, 3};
  // {step, lr, rank, training}.
  const StepState step3{3, 1e-2, 0, true}, rank2{2, 1e-2, 2, true}, rank1{1, 1e-2, 1, true};
  std::vector<OptimizerCase> cases = {
      {"AdamW, step 3", adamw, whole, step3},
      {"AdamW, undecayed, clipped, ZeRO-1: rank 2's shard", adamw, zero1, rank2, false, 9, 0.5},
      {"AdamW, ZeRO-3: rank 1's parameter and gradient shards", adamw, zero3, rank1},
      {"AdamW, a non-finite norm changes nothing", adamw, whole, step3, true, INFINITY, 1},
      {"SGD, momentum's first step", sgd, whole, {1, 1e-2, 0, true}},
      {"SGD, Nesterov, step 2, ZeRO-2: rank 2's gradient shard", nesterov, zero2, rank2},
      {"SGD without momentum, clipped", plain, whole, step3, true, 9, 0.5},
  };
  std::vector<PlanCase> all;
  for (const OptimizerCase& o : cases) all.push_back(OptimizerPlanCase(o, rng));
  return all;
}

// Every case above, and the ops they run.
std::vector<PlanCase> PlanCases() {
  std::mt19937 rng(4321);
  std::vector<PlanCase> all;
  for (auto* family : {&DropoutCases, &CastCases, &SumSquaresCases, &OptimizerCases}) {
    for (PlanCase& k : family(rng)) all.push_back(std::move(k));
  }
  return all;
}

std::set<std::string> OpsWithPlanCases() {
  std::set<std::string> ops;
  for (const PlanCase& k : PlanCases()) ops.insert(k.call.op);
  return ops;
}

std::set<std::string> ReachedByRules() {
  std::set<std::string> reached;
  for (const ops::OpDef& def : ops::AllOps()) {
    for (const ops::GradRule& r : def.grads) reached.insert(r.op);
  }
  return reached;
}

TEST(OpConformance, EveryComputeOpHasAKernelOnEveryBackend) {
  for (const ops::OpDef& def : ops::AllOps()) {
    if (!IsKernelOp(def.name)) continue;
    for (int i = 0; i < kNumKernelOps; ++i) {
      const KernelOp op = static_cast<KernelOp>(i);
      if (InstructionOpOf(op) != std::string(def.name)) continue;
      // (CUDA's table: runtime/cuda/cuda_device_test.cc.)
      EXPECT_NE(cpu::CpuKernels()[op], nullptr) << def.name << " has no CPU kernel ("
                                                << KernelOpName(op) << ")";
    }
  }
  // And every kernel op belongs to an op of the table.
  for (int i = 1; i < kNumKernelOps; ++i) {
    const KernelOp op = static_cast<KernelOp>(i);
    EXPECT_NE(ops::FindOp(InstructionOpOf(op)), nullptr)
        << "kernel " << KernelOpName(op) << " runs \"" << InstructionOpOf(op)
        << "\", which the op table does not define";
  }
}

TEST(OpConformance, EveryOpIsCheckedSomewhere) {
  const std::set<std::string> reached = ReachedByRules();
  const std::set<std::string> planned = OpsWithPlanCases();
  for (const ops::OpDef& def : ops::AllOps()) {
    if (!IsKernelOp(def.name)) continue;
    Example ex;
    EXPECT_TRUE(ExampleOf(def, &ex) || reached.count(def.name) || planned.count(def.name))
        << def.name << ": no conformance example (add one to Examples() in "
        << "runtime/conformance/op_conformance_test.cc, or to PlanCases() for an op that "
        << "reads the plan) and no gradient rule emits it";
  }
}

std::vector<Backend> Backends() {
  std::vector<Backend> all = {Cpu()};
  if (CudaDeviceCount() > 0) {
    all.push_back({"cuda",
                   [] {
                     auto device = CreateCudaDevice(0);
                     EXPECT_TRUE(device.ok()) << device.status();
                     return std::move(device).value();
                   },
                   CudaWorkspaceBytes});
  } else {
    std::cout << "[ SKIPPED  ] the CUDA half: no GPU (" << CudaUnavailableReason() << ")\n";
  }
  return all;
}

TEST(OpConformance, ForwardBackwardAndGradientRulesAgainstTheReference) {
  const std::vector<Backend> backends = Backends();
  int checked = 0;
  for (const ops::OpDef& def : ops::AllOps()) {
    Example ex;
    if (!IsKernelOp(def.name) || !ExampleOf(def, &ex)) continue;
    CheckOp(def, ex, backends);
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

// Attention over the shapes that matter: one token, short and long
// contexts (a partial last block of rows, 1000, and GPT-2's 1024), head
// sizes 32, 64 and 128, one, two and as many key/value heads as query
// heads, rotary positions on and off. Too large for finite differences
// (the small example above has them); each backend against the float64
// reference, forward and backward, overwriting and accumulating.
TEST(OpConformance, AttentionShapes) {
  struct Shape {
    int64_t batch, seq, heads, kv_heads, head_dim;
    bool rope;
  };
  const ops::OpDef* def = ops::FindOp("attention");
  ASSERT_NE(def, nullptr);
  const std::vector<Backend> backends = Backends();
  for (const Shape& a : {Shape{2, 1, 2, 1, 32, true}, Shape{2, 7, 4, 2, 64, true},
                         Shape{1, 64, 2, 2, 128, false}, Shape{1, 130, 4, 1, 32, true},
                         Shape{1, 1000, 2, 1, 32, true}, Shape{1, 1024, 1, 1, 64, false}}) {
    SCOPED_TRACE(absl::StrCat("B ", a.batch, " T ", a.seq, " H ", a.heads, " KV ",
                              a.kv_heads, " d ", a.head_dim, a.rope ? " rope" : ""));
    const int64_t width = (a.heads + 2 * a.kv_heads) * a.head_dim;
    const Example ex{{{{a.batch, a.seq, width}}},
                     {{{a.batch, a.seq, a.heads * a.head_dim}}, {{a.batch, a.heads, a.seq}}},
                     {{"heads", a.heads},
                      {"kv_heads", a.kv_heads},
                      {"rope", a.rope ? 1 : 0},
                      {"rope_theta", 10000}}};
    CheckOp(*def, ex, backends, /*finite_differences=*/false);
  }
}

// The norms on small activations, as a Llama's residual stream is at its
// start (embeddings of std 0.02): x at RMS ~0.02, eps 1e-5, so that
// mean(x^2) = 4e-4 is only 40 times eps and where eps goes shows (moving it
// outside the square root, x / (sqrt(mean(x^2)) + eps), changes the output
// by ~1.2 %; on the unit-scale examples above, by ~1e-6, within f32's
// rounding). Each backend against the float64 reference, forward and
// backward, and the reference's gradient rules against finite differences.
constexpr double kSmall = 0.023;  // uniform in +-1.5 * kSmall: RMS 0.02

TEST(OpConformance, NormsOnSmallActivations) {
  const std::map<std::string, double> eps = {{"eps", 1e-5}};
  const Operand x{{8, 64}, 0, false, false, kSmall}, features{{64}}, rows{{8, 64}},
      per_row{{8}};
  const std::map<std::string, Example> small = {
      {"rmsnorm", {{x, features}, {rows, per_row}, eps}},
      {"layernorm", {{x, features, features}, {rows, per_row, per_row}, eps}},
      {"add_layernorm",
       {{x, x, features, features}, {rows, rows, per_row, per_row}, eps}},
  };
  const std::vector<Backend> backends = Backends();
  for (const auto& [name, ex] : small) {
    const ops::OpDef* def = ops::FindOp(name);
    ASSERT_NE(def, nullptr) << name;
    CheckOp(*def, ex, backends);
  }
}

// RMSNorm from its definition (Llama's; transformers' LlamaRMSNorm), in
// float64 and written here, not taken from the reference interpreter: with
// s = sqrt(mean(x^2) + eps) per row, y = w x / s, and for L = sum(dy y)
// dL/dx_j = w_j dy_j / s - x_j sum_k(dy_k w_k x_k) / (d s^3),
// dL/dw_j = sum over rows of dy_j x_j / s.
struct RmsNormByDefinition {
  std::vector<double> y, dx, dw;
};

RmsNormByDefinition RmsNormDefinition(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& dy, int64_t d, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / d;
  RmsNormByDefinition out{std::vector<double>(x.size()), std::vector<double>(x.size()),
                          std::vector<double>(d, 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * d;
    const double* dyr = dy.data() + r * d;
    double squares = 0, dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      squares += xr[j] * xr[j];
      dot += dyr[j] * w[j] * xr[j];
    }
    const double s = std::sqrt(squares / d + eps);
    for (int64_t j = 0; j < d; ++j) {
      out.y[r * d + j] = w[j] * xr[j] / s;
      out.dx[r * d + j] = w[j] * dyr[j] / s - xr[j] * dot / (d * s * s * s);
      out.dw[j] += dyr[j] * xr[j] / s;
    }
  }
  return out;
}

// max |got - want| / max |want|.
double RelativeError(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, size = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    size = std::max(size, std::abs(want[i]));
  }
  return diff / size;
}

// The CPU backend's rmsnorm and the backward instructions its gradient
// rules emit, and the float64 reference interpreter's, against the
// definition above on small activations (the reference is ours too: a
// mistake made in both the kernel and the reference is seen here only).
TEST(OpConformance, RmsNormOnSmallActivationsMatchesItsDefinition) {
  const ops::OpDef* def = ops::FindOp("rmsnorm");
  ASSERT_NE(def, nullptr);
  const int64_t rows = 8, d = 64;
  const double eps = 1e-5;
  std::mt19937 rng(21);
  Call fwd{"rmsnorm", {{"eps", eps}}, {}, {}};
  fwd.inputs = {RandomTensor(Operand{{rows, d}, 0, false, false, kSmall}, rng),
                RandomTensor(Operand{{d}}, rng)};
  fwd.outputs = {{Operand{{rows, d}}, std::vector<double>(rows * d)},
                 {Operand{{rows}}, std::vector<double>(rows)}};
  double squares = 0;
  for (double v : fwd.inputs[0].data) squares += v * v;
  const double rms = std::sqrt(squares / (rows * d));
  ASSERT_GT(rms, 0.015);
  ASSERT_LT(rms, 0.025);
  const Tensor dy = RandomTensor(Operand{{rows, d}}, rng);
  const RmsNormByDefinition want =
      RmsNormDefinition(fwd.inputs[0].data, fwd.inputs[1].data, dy.data, d, eps);

  for (const bool on_cpu : {true, false}) {
    SCOPED_TRACE(on_cpu ? "cpu" : "float64 reference");
    Call got = fwd;
    const absl::Status run = on_cpu ? RunOn(Cpu(), got, AllF32) : RunReference(got);
    ASSERT_TRUE(run.ok()) << run;
    EXPECT_LE(RelativeError(got.outputs[0].data, want.y), 1e-5) << "y";
    int checked = 0;
    for (const ops::GradRule& rule : def->grads) {
      Call b = BackwardCall(rule, got, dy, 1.0, nullptr);
      const absl::Status back = on_cpu ? RunOn(Cpu(), b, AllF32) : RunReference(b);
      ASSERT_TRUE(back.ok()) << rule.op << ": " << back;
      ASSERT_EQ(rule.targets.size(), 1u) << rule.op;
      const bool input = rule.targets[0] == 0;
      EXPECT_LE(RelativeError(b.outputs[0].data, input ? want.dx : want.dw), 1e-5)
          << rule.op << (input ? ": dx" : ": dweight");
      ++checked;
    }
    EXPECT_EQ(checked, 2);
  }
}

// add_layernorm (the plan's residual-layernorm fusion) gives the bits of
// the add and then the layernorm, each run as its own instruction, on
// every backend: operands f32, the GPT residual (a f32, b bf16, the sum
// f32) and all bf16 (the sum rounded before it is normalized); rows from
// narrower than a warp to wider than CUDA's registers hold.
TEST(OpConformance, AddLayerNormIsTheAddThenTheLayerNormBitForBit) {
  struct Dtypes {
    bool a, b, sum;  // bf16?
  };
  const std::map<std::string, double> eps = {{"eps", 1e-5}};
  for (const Backend& backend : Backends()) {
    for (const int64_t d : {7, 37, 768, 2100}) {
      for (const Dtypes bf16 : {Dtypes{false, false, false}, Dtypes{false, true, false},
                                Dtypes{true, true, true}}) {
        SCOPED_TRACE(absl::StrCat(backend.name, " d ", d, " bf16 a ", bf16.a, " b ", bf16.b,
                                  " sum ", bf16.sum));
        std::mt19937 rng(7);
        const Operand rows{{5, d}}, features{{d}}, per_row{{5}};
        Call fused{"add_layernorm", eps, {}, {}};
        fused.inputs = {RandomTensor(rows, rng, bf16.a), RandomTensor(rows, rng, bf16.b),
                        RandomTensor(features, rng), RandomTensor(features, rng)};
        for (const Operand& o : {rows, rows, per_row, per_row}) {
          fused.outputs.push_back({o, std::vector<double>(Count(o.shape))});
        }
        Call add{"add", {}, {fused.inputs[0], fused.inputs[1]}, {fused.outputs[0]}};
        ASSERT_TRUE(RunOn(backend, add, [&](bool output, int j) {
                      return output ? bf16.sum : j == 0 ? bf16.a : bf16.b;
                    }).ok());
        Call norm{"layernorm", eps, {add.outputs[0], fused.inputs[2], fused.inputs[3]},
                  {fused.outputs[1], fused.outputs[2], fused.outputs[3]}};
        ASSERT_TRUE(
            RunOn(backend, norm, [&](bool output, int j) { return !output && j == 0 && bf16.sum; })
                .ok());
        const absl::Status run = RunOn(backend, fused, [&](bool output, int j) {
          return output ? j == 0 && bf16.sum : j == 0 ? bf16.a : j == 1 && bf16.b;
        });
        ASSERT_TRUE(run.ok()) << run;
        const std::vector<const Tensor*> unfused = {&add.outputs[0], &norm.outputs[0],
                                                    &norm.outputs[1], &norm.outputs[2]};
        for (size_t j = 0; j < unfused.size(); ++j) {
          EXPECT_EQ(fused.outputs[j].data, unfused[j]->data) << "output " << j;
        }
      }
    }
  }
}

// linear_grad_input_gelu (the plan's backward linear-gelu fusion) gives the
// bits of linear_grad_input into dh and then gelu_tanh_grad(dh, pre), each
// run as its own instruction, on the CPU: operands f32, or all bf16 (dh
// then a bf16 tensor in the unfused plan, rounded before the gelu's
// gradient reads it); writing dpre or accumulating into it (dh in the
// workspace); in a multiple of 8 or not, dpre over one or several of the
// kernel's blocks. On CUDA (the DGELU epilogue: the product not rounded,
// cuBLASLt's GELU) as close as the bf16 policy asks.
TEST(OpConformance, LinearGradInputGeluIsTheTwoBitForBit) {
  for (const Backend& backend : Backends()) {
    for (const int64_t in : {16, 37}) {
      for (const bool bf16 : {false, true}) {
        for (const bool accumulate : {false, true}) {
          SCOPED_TRACE(absl::StrCat(backend.name, " in ", in, " bf16 ", bf16, " accumulate ",
                                    accumulate));
          std::mt19937 rng(11);
          const int64_t rows = 40, out = 24;
          const Operand batch_in{{rows, in}};
          const std::map<std::string, double> acc = {{"accumulate", accumulate ? 1 : 0}};
          const Tensor dy = RandomTensor(Operand{{rows, out}}, rng, bf16);
          const Tensor w = RandomTensor(Operand{{out, in}}, rng, bf16);
          const Tensor pre = RandomTensor(batch_in, rng, bf16);
          const Tensor prior = RandomTensor(batch_in, rng, bf16);
          auto all = [bf16](bool, int) { return bf16; };
          Call product{"linear_grad_input", {{"accumulate", 0}}, {dy, w},
                       {{batch_in, std::vector<double>(rows * in)}}};
          ASSERT_TRUE(RunOn(backend, product, all).ok());
          Call grad{"gelu_tanh_grad", acc, {product.outputs[0], pre}, {prior}};
          ASSERT_TRUE(RunOn(backend, grad, all).ok());
          Call fused{"linear_grad_input_gelu", acc, {dy, w, pre}, {prior, Tensor{W(), {}}}};
          const absl::Status run = RunOn(backend, fused, all);
          ASSERT_TRUE(run.ok()) << run;
          if (backend.name == "cpu") {
            EXPECT_EQ(fused.outputs[0].data, grad.outputs[0].data);
          } else {
            ExpectClose(fused, grad, bf16 ? 1.0 / 64 : 1e-3, backend.name);
          }
        }
      }
    }
  }
}

// swiglu_grad is swiglu's gradient: with it as swiglu's rule (d gate and
// d up from dy, gate, up), the rule against central differences of the
// float64 swiglu, and each backend's forward and backward, writing and
// accumulating, against the reference; gate over silu's whole range too
// (below -86 its sigmoid is 0).
TEST(OpConformance, SwiGluGradIsSwiGlusGradient) {
  ops::OpDef def = *ops::FindOp("swiglu");
  def.grads = {{"swiglu_grad", {ops::kDy, ops::In(0), ops::In(1)}, {0, 1}}};
  const Operand wide{{3, 7}, 0, false, false, 64};  // gate in +-96
  CheckOp(def, Examples().at("swiglu"), Backends());
  CheckOp(def, {{wide, {{3, 7}}}, {{{3, 7}}}, {}}, Backends(), /*finite_differences=*/false);
}

// silu(gate) -> s, mul(s, up) -> y, each run as its own instruction (s
// of `dtype`, as all operands), on `backend`: y.
std::vector<double> SiluThenMul(const Backend& backend, const Tensor& gate, const Tensor& up,
                                bool bf16) {
  auto all = [bf16](bool, int) { return bf16; };
  Call silu{"silu", {}, {gate}, {{gate.spec, std::vector<double>(gate.data.size())}}};
  EXPECT_TRUE(RunOn(backend, silu, all).ok());
  Call mul{"mul", {}, {silu.outputs[0], up}, {silu.outputs[0]}};
  EXPECT_TRUE(RunOn(backend, mul, all).ok());
  return mul.outputs[0].data;
}

// Their gradients as the unfused plan runs them: ds = mul_grad(dy, up),
// dgate (+)= silu_grad(ds, gate), s = silu(gate), dup (+)= mul_grad(dy,
// s); `prior` the outputs' values before.
std::vector<Tensor> UnfusedGrads(const Backend& backend, const Tensor& dy, const Tensor& gate,
                                 const Tensor& up, const std::vector<Tensor>& prior, bool bf16,
                                 bool accumulate) {
  auto all = [bf16](bool, int) { return bf16; };
  const std::map<std::string, double> acc = {{"accumulate", accumulate ? 1 : 0}};
  Call ds{"mul_grad", {{"accumulate", 0}}, {dy, up}, {prior[0]}};
  EXPECT_TRUE(RunOn(backend, ds, all).ok());
  Call dgate{"silu_grad", acc, {ds.outputs[0], gate}, {prior[0]}};
  EXPECT_TRUE(RunOn(backend, dgate, all).ok());
  Call s{"silu", {}, {gate}, {prior[1]}};
  EXPECT_TRUE(RunOn(backend, s, all).ok());
  Call dup{"mul_grad", acc, {dy, s.outputs[0]}, {prior[1]}};
  EXPECT_TRUE(RunOn(backend, dup, all).ok());
  return {dgate.outputs[0], dup.outputs[0]};
}

// swiglu and swiglu_grad (the plan's SwiGLU fusion) give the bits of the
// unfused instructions on the CPU: operands f32, or all bf16 (s and ds
// then bf16 tensors in the unfused plan, rounded before they are read);
// writing or accumulating the gradients; sizes with and without a vector
// remainder; gate over silu's whole range. On CUDA (nvcc may contract a
// product and an add differently in one kernel and in two) as close as f32
// or the bf16 policy asks.
TEST(OpConformance, SwiGluIsSiluThenMulBitForBit) {
  for (const Backend& backend : Backends()) {
    for (const int64_t n : {7, 37, 4099}) {
      for (const double scale : {1.0, 64.0}) {
        for (const bool bf16 : {false, true}) {
          SCOPED_TRACE(absl::StrCat(backend.name, " n ", n, " scale ", scale, " bf16 ", bf16));
          std::mt19937 rng(13);
          const Operand shape{{n}, 0, false, false, scale};
          const Tensor gate = RandomTensor(shape, rng, bf16), up = RandomTensor(shape, rng, bf16);
          const Tensor dy = RandomTensor(shape, rng, bf16);
          const std::vector<Tensor> prior = {RandomTensor(shape, rng, bf16),
                                             RandomTensor(shape, rng, bf16)};
          auto all = [bf16](bool, int) { return bf16; };
          const double tolerance = backend.name == "cpu" ? 0 : bf16 ? 1.0 / 64 : 1e-6;
          Call fused{"swiglu", {}, {gate, up}, {prior[0]}};
          ASSERT_TRUE(RunOn(backend, fused, all).ok());
          Call unfused = fused;
          unfused.outputs[0].data = SiluThenMul(backend, gate, up, bf16);
          ExpectClose(fused, unfused, tolerance, "swiglu");
          for (const bool accumulate : {false, true}) {
            Call grad{"swiglu_grad", {{"accumulate", accumulate ? 1 : 0}}, {dy, gate, up}, prior};
            ASSERT_TRUE(RunOn(backend, grad, all).ok());
            Call apart = grad;
            apart.outputs = UnfusedGrads(backend, dy, gate, up, prior, bf16, accumulate);
            ExpectClose(grad, apart, tolerance, accumulate ? "accumulating" : "writing");
          }
        }
      }
    }
  }
}

// The ops that read the plan (PlanCases), each case against its
// definition and on every backend against the float64 reference.
TEST(OpConformance, OpsThatReadThePlan) {
  const std::vector<Backend> backends = Backends();
  std::set<std::string> ops;
  for (const PlanCase& k : PlanCases()) {
    CheckPlanCase(k, backends);
    ops.insert(k.call.op);
  }
  EXPECT_EQ(ops, (std::set<std::string>{"cast", "dropout", "dropout_grad", "optimizer",
                                        "sum_squares"}));
}

TEST(OpConformance, Bf16AsThePrecisionPolicySays) {
  for (const ops::OpDef& def : ops::AllOps()) {
    Example ex;
    if (!IsKernelOp(def.name) || !ExampleOf(def, &ex)) continue;
    for (const Backend& backend : Backends()) CheckBf16(def, ex, backend);
  }
}

}  // namespace
}  // namespace trainc
