#include "runtime/cpu/linear.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/kernels.h"
#include "runtime/device/bf16.h"

namespace trainc::cpu {
namespace {

using Op = KernelOp;

absl::Status Ok() { return absl::OkStatus(); }

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
absl::Status Product(const Prepared& p) {
  if (p.matmuls.Runs(p.id)) return p.matmuls.Run(p.id);
  RunF32(LinearGemmOf(p.k));
  return Ok();
}

// linear_grad_input_gelu(dy, w, pre) -> dpre: the unfused plan's two
// kernels in order, linear_grad_input into dh and then gelu_tanh_grad(dh,
// pre) as that instruction would read dh (under bf16, dpre staged, dh was
// a bf16 tensor: rounded first), so the fused plan trains on the unfused
// plan's bits. dh is the workspace where dpre accumulates; otherwise it is
// dpre itself, each block of it copied aside (the pointwise kernel's
// operands do not alias) before the gradient overwrites it.
absl::Status LinearGradInputGelu(const Prepared& p) {
  const KernelArgs& k = p.k;
  const ops::LinearFamily::Args& l = k.linear;
  const PointwiseFn gelu_grad = PointwiseKernel(Op::kGeluTanhGrad);
  const bool round = StagedOutput(k, 0) != nullptr;
  const int64_t n = l.rows * l.in;
  auto read_dh = [round](const float* dh, int64_t count, float* to) {
    for (int64_t i = 0; i < count; ++i) to[i] = round ? RoundedToBf16(dh[i]) : dh[i];
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
    RETURN_IF_ERROR(Product(p));  // into dh
    read_dh(dh, n, dh);
    gelu_grad(dh, k.x[2], n, true, k.y[0]);
    return Ok();
  }
  RETURN_IF_ERROR(Product(p));  // into dpre
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
absl::Status LinearGradParams(const Prepared& p) {
  const KernelArgs& k = p.k;
  const ops::LinearFamily::Args& l = k.linear;
  RETURN_IF_ERROR(Product(p));
  if (k.y[1] == nullptr) return Ok();
  if (p.matmuls.Runs(p.id)) {
    LinearGradBias(reinterpret_cast<const uint16_t*>(k.x[0]), l.rows, l.out, k.accumulate,
                   k.y[1]);
  } else {
    LinearGradBias(k.x[0], l.rows, l.out, k.accumulate, k.y[1]);
  }
  return Ok();
}

}  // namespace

absl::Status OwnCpuKernel(KernelOp op, const ops::LinearFamily::Args& l, const Prepared& p) {
  const KernelArgs& k = p.k;
  switch (op) {
    case Op::kLinearGradInput: return Product(p);
    case Op::kLinearGradInputGelu: return LinearGradInputGelu(p);
    case Op::kLinearGradParams: return LinearGradParams(p);
    case Op::kLinearGelu:
      // The unfused plan's two kernels, in order: the linear into pre, then
      // gelu_tanh of pre as that instruction would read it (under bf16,
      // rounded to the bf16 tensor), so the fused plan trains on its bits.
      RETURN_IF_ERROR(Product(p));
      LinearEpilogue(k.x[2], l.rows, l.out, k.y[0], Activation::kNone, nullptr);
      if (const Bf16Operand* pre = StagedOutput(k, 0)) RoundStagedOutput(*pre, 0, pre->elems);
      PointwiseKernel(Op::kGeluTanh)(k.y[0], nullptr, l.rows * l.out, false, k.y[1]);
      return Ok();
    default:  // linear, linear_relu, linear_tanh, linear_gelu_erf
      RETURN_IF_ERROR(Product(p));
      LinearEpilogue(k.x[2], l.rows, l.out, k.y[0], l.act, k.y[1]);
      return Ok();
  }
}

}  // namespace trainc::cpu
