#include "runtime/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ops/unit_family.h"
#include "compiler/util/status_macros.h"
#include "runtime/cpu/kernels.h"
#include "runtime/device/bf16.h"

namespace trainc::cpu {
namespace {

using Op = KernelOp;

absl::Status Ok() { return absl::OkStatus(); }

absl::Status Pointwise(const KernelCall& c) {
  const KernelArgs& k = c.k;
  PointwiseKernel(k.op)(k.x[0], k.x[1], k.rows, k.accumulate, k.y[0]);
  return Ok();
}

// precision = bf16: a kernel that reads back its own output (`o`, staged)
// first rounds elements [begin, begin + n) to the bf16 tensor, as the
// instruction after it would read them.
void RoundStagedOutput(const Bf16Operand& o, int64_t begin, int64_t n) {
  uint16_t* bf16 = static_cast<uint16_t*>(o.bf16) + begin;
  NarrowToBf16(o.f32 + begin, n, bf16);
  WidenBf16(bf16, n, o.f32 + begin);
}

// The instruction's matrix product (LinearGemmOf): the prepared bf16
// primitive on the bf16 operands themselves, or the f32 GEMM.
absl::Status Product(const KernelCall& c) {
  if (c.matmuls.Runs(c.instr.id)) return c.matmuls.Run(c.instr.id);
  RunF32(LinearGemmOf(c.k));
  return Ok();
}

// linear_grad_input_gelu(dy, w, pre) -> dpre: the unfused plan's two
// kernels in order, linear_grad_input into dh and then gelu_tanh_grad(dh,
// pre) as that instruction would read dh (under bf16, dpre staged, dh was
// a bf16 tensor: rounded first), so the fused plan trains on the unfused
// plan's bits. dh is the workspace where dpre accumulates; otherwise it is
// dpre itself, each block of it copied aside (the pointwise kernel's
// operands do not alias) before the gradient overwrites it.
absl::Status LinearGradInputGelu(const KernelCall& c) {
  const KernelArgs& k = c.k;
  const ops::LinearFamily::Args& l = k.linear;
  const PointwiseFn gelu_grad = PointwiseKernel(Op::kGeluTanhGrad);
  const bool round = StagedOutput(k, 0) != nullptr;
  const int64_t n = l.rows * l.in;
  auto read_dh = [round](const float* dh, int64_t count, float* to) {
    for (int64_t i = 0; i < count; ++i) to[i] = round ? Bf16ToFloat(FloatToBf16(dh[i])) : dh[i];
  };
  if (k.accumulate) {
    if (k.workspace_bytes < LinearGradInputGeluWorkspaceBytes(k)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu: linear_grad_input_gelu accumulating needs a workspace of ",
          LinearGradInputGeluWorkspaceBytes(k),
          " bytes, the plan has ", k.workspace_bytes,
          ": compile the plan with the CPU's workspace sizes (PlanOptions::workspace)"));
    }
    float* dh = reinterpret_cast<float*>(k.workspace);
    RETURN_IF_ERROR(Product(c));  // into dh
    read_dh(dh, n, dh);
    gelu_grad(dh, k.x[2], n, true, k.y[0]);
    return Ok();
  }
  RETURN_IF_ERROR(Product(c));  // into dpre
  constexpr int64_t kBlock = 1024;
  float dh[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t count = std::min(kBlock, n - at);
    read_dh(k.y[0] + at, count, dh);
    gelu_grad(dh, k.x[2] + at, count, false, k.y[0] + at);
  }
  return Ok();
}

// linear_grad_params: dw by the product, db from dy (bf16 when the
// product read it natively).
absl::Status LinearGradParams(const KernelCall& c) {
  const KernelArgs& k = c.k;
  const ops::LinearFamily::Args& l = k.linear;
  RETURN_IF_ERROR(Product(c));
  if (k.y[1] == nullptr) return Ok();
  if (c.matmuls.Runs(c.instr.id)) {
    LinearGradBias(reinterpret_cast<const uint16_t*>(k.x[0]), l.rows, l.out, k.accumulate,
                   k.y[1]);
  } else {
    LinearGradBias(k.x[0], l.rows, l.out, k.accumulate, k.y[1]);
  }
  return Ok();
}

absl::Status Linear(const KernelCall& c) {
  const KernelArgs& k = c.k;
  const ops::LinearFamily::Args& l = k.linear;
  switch (k.op) {
    case Op::kLinearGradInput: return Product(c);
    case Op::kLinearGradInputGelu: return LinearGradInputGelu(c);
    case Op::kLinearGradParams: return LinearGradParams(c);
    case Op::kLinearGelu:
      // The unfused plan's two kernels, in order: the linear into pre, then
      // gelu_tanh of pre as that instruction would read it (under bf16,
      // rounded to the bf16 tensor), so the fused plan trains on its bits.
      RETURN_IF_ERROR(Product(c));
      LinearEpilogue(k.x[2], l.rows, l.out, k.y[0], Activation::kNone, nullptr);
      if (const Bf16Operand* pre = StagedOutput(k, 0)) RoundStagedOutput(*pre, 0, pre->elems);
      PointwiseKernel(Op::kGeluTanh)(k.y[0], nullptr, l.rows * l.out, false, k.y[1]);
      return Ok();
    default:  // linear, linear_relu, linear_tanh, linear_gelu_erf
      RETURN_IF_ERROR(Product(c));
      LinearEpilogue(k.x[2], l.rows, l.out, k.y[0], l.act, k.y[1]);
      return Ok();
  }
}

// Convolution and pooling: oneDNN's primitives, prepared with the plan.
absl::Status Window(const KernelCall& c) { return c.dnnl.Run(c.instr.id); }

// A unit family's CPU kernel: its loops in f32
// (compiler/ops/kernel_families.h, compiler/ops/unit_family.h), compiled
// with the kernels (kernels.h); a refusal (a label outside the classes) is
// the instruction's error.
template <typename Args>
absl::Status UnitKernel(const KernelCall& c, UnitRunFn<Args> run, const Args& args) {
  const ops::unit::Step step{c.step.training, c.step.step, c.step.rank, c.step.lr};
  const std::string why =
      run(c.k.op, ops::unit::ForStep(args, step), c.k.x, c.k.y, c.k.accumulate);
  if (why.empty()) return Ok();
  return absl::InvalidArgumentError(absl::StrCat("cpu: ", c.instr.label, ": ", why));
}
#define TRAINC_CPU_UNIT(Fam, snake) \
  absl::Status Fam##Unit(const KernelCall& c) { return UnitKernel(c, &Run##Fam, c.k.snake); }
TRAINC_UNIT_FAMILIES(TRAINC_CPU_UNIT)
#undef TRAINC_CPU_UNIT

// One kernel per family (compiler/ops/kernel_families.h); a family left
// out has no CPU kernel.
KernelTable<CpuKernel> MakeTable() {
  using F = KernelFamily;
#define TRAINC_CPU_UNIT_ENTRY(Family, snake) {F::k##Family, &Family##Unit},
  return KernelTable<CpuKernel>::OfFamilies({
      {F::kPointwise, &Pointwise},
      {F::kLinear, &Linear},
      {F::kWindow, &Window},
      TRAINC_UNIT_FAMILIES(TRAINC_CPU_UNIT_ENTRY)
  });
#undef TRAINC_CPU_UNIT_ENTRY
}

}  // namespace

const KernelTable<CpuKernel>& CpuKernels() {
  static const KernelTable<CpuKernel> table = MakeTable();
  return table;
}

}  // namespace trainc::cpu
