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
// An op added to the table without a kernel, a reference or an example
// fails here, by name. Pointwise ops get their example from their arity;
// other forward ops have one in kExamples; backward ops are reached from
// their forward op's rules.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/autodiff/reference_eval.h"
#include "compiler/ops/op_table.h"
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
  };
  return *examples;
}

// Ops whose kernels are checked by a test of their own instead, and why.
const std::map<std::string, std::string>& CheckedElsewhere() {
  static const auto* ops = new std::map<std::string, std::string>{
      {"dropout", "a Philox mask: runtime/cpu/kernels_test.cc checks it against "
                  "Random123's algorithm element by element"},
      {"dropout_grad", "as dropout"},
      {"cast", "rounding: runtime/cpu/cpu_device_test.cc (Bf16Operands...)"},
      {"sum_squares", "over a bucket: tests/e2e/clip_test.py and the executor tests"},
      {"optimizer", "over a bucket: kernels_test.cc (AdamW, SGD against PyTorch's formulas)"},
  };
  return *ops;
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

absl::Status RunReference(Call& c) {
  std::vector<TensorRef> in, out;
  for (Tensor& t : c.inputs) in.push_back({t.data.data(), t.spec.shape});
  // A workspace stays in the list (the reference counts outputs) but is
  // never written.
  for (Tensor& t : c.outputs) out.push_back({t.data.data(), t.spec.shape});
  return EvalOp(c.op, c.attrs, in, out);
}

// The one-instruction plan of `c`: float operands f32, or bf16 where
// `is_bf16(output?, index)`; a workspace of `workspace_bytes`.
Plan PlanOf(const Call& c, const std::function<bool(bool output, int j)>& is_bf16,
            int64_t workspace_bytes) {
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
    instr.outputs.push_back(add(c.outputs[j], true, static_cast<int>(j)));
  }
  plan.instructions = {instr};
  plan.arena_bytes = offset;
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
                   const std::function<bool(bool, int)>& is_bf16) {
  Plan plan = PlanOf(c, is_bf16, 0);
  if (!c.outputs.empty() && c.outputs.back().spec.workspace) {
    ASSIGN_OR_RETURN(const int64_t bytes, backend.workspace(plan, plan.instructions[0]));
    plan = PlanOf(c, is_bf16, bytes);
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
    if (c.outputs[j].spec.workspace) continue;
    RETURN_IF_ERROR(Upload(*device, plan.buffers[instr.outputs[j]], c.outputs[j].data));
  }
  RETURN_IF_ERROR(device->Prepare(plan));
  RETURN_IF_ERROR(device->RunKernel(plan, instr, StepState{}));
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
      diff = std::max(diff, std::abs(g.data[i] - want.outputs[j].data[i]));
      scale = std::max(scale, std::abs(want.outputs[j].data[i]));
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
  for (const ops::OpDef& def : ops::AllOps()) {
    if (!IsKernelOp(def.name) || CheckedElsewhere().count(def.name)) continue;
    Example ex;
    EXPECT_TRUE(ExampleOf(def, &ex) || reached.count(def.name))
        << def.name << ": no conformance example (add one to Examples() in "
        << "runtime/conformance/op_conformance_test.cc) and no gradient rule emits it";
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
    if (!IsKernelOp(def.name) || CheckedElsewhere().count(def.name) || !ExampleOf(def, &ex)) {
      continue;
    }
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

TEST(OpConformance, Bf16AsThePrecisionPolicySays) {
  for (const ops::OpDef& def : ops::AllOps()) {
    Example ex;
    if (!IsKernelOp(def.name) || CheckedElsewhere().count(def.name) || !ExampleOf(def, &ex)) {
      continue;
    }
    for (const Backend& backend : Backends()) CheckBf16(def, ex, backend);
  }
}

}  // namespace
}  // namespace trainc
