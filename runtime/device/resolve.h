// Inside ResolveKernels (kernel_args.h): one resolver per kernel family
// (compiler/ops/kernel_families.h), which fills the family's sizes and
// operands of KernelArgs from one instruction and checks them against the
// plan's buffers. ResolveKernels has already checked the instruction's
// arity and buffer ids against the op table and set k.op, k.x, k.y and
// k.accumulate; a resolver checks shapes, sets sizes and may null or
// re-point operand slots.
#ifndef TRAINC_RUNTIME_DEVICE_RESOLVE_H_
#define TRAINC_RUNTIME_DEVICE_RESOLVE_H_

#include <string>

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_args.h"

namespace trainc::resolve {

// One instruction being resolved.
struct Resolving {
  const Plan& plan;
  const Instruction& instr;
  char* base;  // the arena; null without one (DescribeKernel): pointers stay null
  const std::string& device_name;
  bool workspace;  // its last output is its workspace (ops::OpDef::workspace)

  const Buffer& in(int j) const { return plan.buffers[instr.inputs[j]]; }
  const Buffer& out(int j) const { return plan.buffers[instr.outputs[j]]; }
  int num_buffers() const { return static_cast<int>(plan.buffers.size()); }
  float* ptr(const Buffer& b) const {
    return base == nullptr ? nullptr : reinterpret_cast<float*>(base + b.offset);
  }
  double attr(const char* name, double fallback) const {
    auto it = instr.attrs.find(name);
    return it == instr.attrs.end() ? fallback : it->second;
  }
  // "<device>: instruction <id> (<op> "<label>"): <why>".
  absl::Status Fail(const std::string& why) const;
};

using Resolver = absl::Status (*)(const Resolving& r, KernelArgs& k);

// Resolve<Family> for every family, defined in resolve_families.cc: a
// family without one fails to link.
#define TRAINC_RESOLVER_DECL(Family) absl::Status Resolve##Family(const Resolving& r, KernelArgs& k);
TRAINC_KERNEL_FAMILIES(TRAINC_RESOLVER_DECL)
#undef TRAINC_RESOLVER_DECL

// The resolver of `op`'s family; null for kNotCompute.
Resolver ResolverOf(KernelOp op);

}  // namespace trainc::resolve

#endif  // TRAINC_RUNTIME_DEVICE_RESOLVE_H_
