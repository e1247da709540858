#include "compiler/autodiff/reference_eval.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"

namespace trainc {
namespace {

// An i32 index held in the double arena.
int64_t Index(double v) { return static_cast<int64_t>(std::llround(v)); }

class Writer {
 public:
  Writer(const TensorRef& t, bool accumulate) : t_(t), acc_(accumulate) {}
  void Set(int64_t i, double v) { t_.data[i] = acc_ ? t_.data[i] + v : v; }

 private:
  TensorRef t_;
  bool acc_;
};

// A pointwise op (compiler/ops/pointwise.h): its formula in f64.
template <typename F, int kArity>
void Pointwise(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out, bool acc) {
  Writer y(out[0], acc);
  for (int64_t i = 0; i < in[0].size(); ++i) {
    if constexpr (kArity == 1) {
      y.Set(i, F::F(in[0].data[i]));
    } else {
      y.Set(i, F::F(in[0].data[i], in[1].data[i]));
    }
  }
}

// Runs `op` if it is pointwise; false otherwise.
bool RunPointwise(KernelOp op, const std::vector<TensorRef>& in,
                  const std::vector<TensorRef>& out, bool acc) {
  switch (op) {
#define TRAINC_REFERENCE_POINTWISE(name, Name, arity) \
  case KernelOp::k##Name:                             \
    Pointwise<pointwise::Name, arity>(in, out, acc);  \
    return true;
    TRAINC_POINTWISE_OPS(TRAINC_REFERENCE_POINTWISE)
#undef TRAINC_REFERENCE_POINTWISE
    default:
      return false;
  }
}

// An instruction's attributes.
class Attrs {
 public:
  Attrs(const std::map<std::string, double>& attrs, const ops::unit::PlanFacts& facts,
        const ops::unit::Step& step)
      : attrs_(attrs), facts_(facts), step_(step) {}
  const std::map<std::string, double>& map() const { return attrs_; }
  // What the plan says about the instruction (defaults without a plan).
  const ops::unit::PlanFacts& facts() const { return facts_; }
  // The step the kernel runs in.
  const ops::unit::Step& step() const { return step_; }
  // 0 when absent.
  double operator()(const char* name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? 0.0 : it->second;
  }

 private:
  const std::map<std::string, double>& attrs_;
  const ops::unit::PlanFacts& facts_;
  const ops::unit::Step& step_;
};

// The float64 semantics of each op that is not pointwise, one function
// per kernel op (or per family sharing one body), found by ReferenceOf.

using RefOp = absl::Status (*)(KernelOp op, const Attrs& attr,
                               const std::vector<TensorRef>& in,
                               const std::vector<TensorRef>& out, bool acc);

// A unit family's reference: its Resolve and its loops in float64
// (compiler/ops/kernel_families.h).
template <typename Family>
absl::Status RefUnit(KernelOp op, const Attrs& attr, const std::vector<TensorRef>& in,
                     const std::vector<TensorRef>& out, bool acc) {
  std::vector<std::vector<int64_t>> in_shapes, out_shapes;
  std::vector<const double*> x;
  std::vector<double*> y;
  for (const TensorRef& t : in) in_shapes.push_back(t.shape), x.push_back(t.data);
  for (const TensorRef& t : out) out_shapes.push_back(t.shape), y.push_back(t.data);
  typename Family::Args args;
  op = ops::unit::KernelOfUnit<Family>(op, attr.facts());
  std::string why =
      ops::unit::ResolveUnit<Family>(op, in_shapes, out_shapes, attr.map(), attr.facts(), &args);
  // The i32 operand (compiler/ops/unit_family.h), held in the double arena.
  std::vector<int32_t> ids;
  if (const int j = ops::unit::IdsInputOf<Family>(op); j >= 0 && why.empty()) {
    for (int64_t i = 0; i < in[j].size(); ++i) {
      const int64_t id = Index(in[j].data[i]);
      ids.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    }
    if constexpr (ops::unit::HasIds<Family>::value) args.*Family::kIds = ids.data();
  }
  if (why.empty()) {
    why = ops::unit::RunUnit<Family, double>(op, ops::unit::ForStep(args, attr.step()), x.data(),
                                             y.data(), acc);
  }
  if (!why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference_eval: ", InstructionOpOf(op), ": ", why));
  }
  return absl::OkStatus();
}

// Every kernel op's reference, its family's (compiler/ops/kernel_families.h),
// indexed by KernelOp.
RefOp ReferenceOf(KernelOp op) {
#define TRAINC_REFERENCE_ENTRY(Fam, Name, op) &RefUnit<ops::Fam##Family>,
  static constexpr RefOp kRefs[] = {
      nullptr,
#define TRAINC_REFERENCE_NOT_POINTWISE(op, Name, arity) nullptr,
      TRAINC_POINTWISE_OPS(TRAINC_REFERENCE_NOT_POINTWISE)
      TRAINC_KERNEL_OPS(TRAINC_REFERENCE_ENTRY)};
#undef TRAINC_REFERENCE_ENTRY
#undef TRAINC_REFERENCE_NOT_POINTWISE
  static_assert(sizeof(kRefs) / sizeof(RefOp) == kNumKernelOps);
  return kRefs[static_cast<int>(op)];
}

}  // namespace

int64_t TensorRef::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// EvalOp, given what the plan says about the instruction.
absl::Status Eval(const std::string& op, const std::map<std::string, double>& attrs,
                  const ops::unit::PlanFacts& facts, const ops::unit::Step& step,
                  const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  const Attrs attr(attrs, facts, step);
  const bool acc = attr("accumulate") != 0;
  const KernelOp kernel = KernelOpOfInstruction(op);
  if (RunPointwise(kernel, in, out, acc)) return absl::OkStatus();
  const RefOp ref = ReferenceOf(kernel);
  if (ref == nullptr) return absl::UnimplementedError(absl::StrCat("reference_eval: op ", op));
  return ref(kernel, attr, in, out, acc);
}

}  // namespace

absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  return Eval(op, attrs, ops::unit::PlanFacts{}, ops::unit::Step{}, in, out);
}

absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const ops::unit::PlanFacts& facts, const ops::unit::Step& step,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  return Eval(op, attrs, facts, step, in, out);
}

PlanInterpreter::PlanInterpreter(const Plan& plan)
    : plan_(plan), arena_(plan.arena_bytes / 4, 0.0) {}

TensorRef PlanInterpreter::buffer(int id) {
  const Buffer& b = plan_.buffers[id];
  return TensorRef{arena_.data() + b.offset / 4, b.shape};
}

absl::Status PlanInterpreter::Run(const Instruction& instr) {
  const StepOp step_op = StepOpOfInstruction(instr.op);
  if (step_op == StepOp::kLoadBatch) {
    const int k = static_cast<int>(instr.attrs.at("micro"));
    if (k >= static_cast<int>(batches_.size())) {
      return absl::FailedPreconditionError("no batch for this micro-step");
    }
    for (size_t j = 0; j < instr.outputs.size(); ++j) {
      TensorRef t = buffer(instr.outputs[j]);
      std::copy(batches_[k][j].begin(), batches_[k][j].end(), t.data);
    }
    return absl::OkStatus();
  }
  if (step_op == StepOp::kAllReduce) {
    if (!plan_.deterministic) return absl::OkStatus();
    const Bucket& bucket = plan_.buckets[static_cast<int>(instr.attrs.at("bucket"))];
    TensorRef t = buffer(bucket.grad_buffer);
    const int64_t n = bucket.bytes / 4;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t k = 0; k < plan_.accumulate; ++k) s += t.data[k * n + i];
      t.data[i] = s;
    }
    return absl::OkStatus();
  }
  std::vector<TensorRef> in, out;
  for (int id : instr.inputs) in.push_back(buffer(id));
  for (int id : instr.outputs) out.push_back(buffer(id));
  return Eval(instr.op, instr.attrs, UnitFactsOf(plan_, instr), ops::unit::Step{}, in, out);
}

}  // namespace trainc
