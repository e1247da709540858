#include <algorithm>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "compiler/ops/unit_family.h"
#include "compiler/util/status_macros.h"
#include "runtime/device/resolve.h"

namespace trainc::resolve {

absl::Status Resolving::Fail(const std::string& why) const {
  return absl::InvalidArgumentError(absl::StrCat(device_name, ": instruction ", instr.id, " (",
                                                 instr.op, " \"", instr.label, "\"): ", why));
}

namespace {

// An op with a workspace (ops::OpDef::workspace): its last output, the
// plan's reservation, as KernelArgs::workspace rather than a y slot.
absl::Status TakeWorkspace(const Resolving& r, KernelArgs& k) {
  const size_t last = r.instr.outputs.size() - 1;
  const Buffer& workspace = r.out(static_cast<int>(last));
  if (workspace.kind != BufferKind::kWorkspace) {
    return r.Fail("the last output is not a workspace buffer");
  }
  k.workspace = reinterpret_cast<char*>(k.y[last]);
  k.y[last] = nullptr;  // at most 4 outputs
  k.workspace_bytes = workspace.bytes;
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolvePointwise(const Resolving& r, KernelArgs& k) {
  k.rows = Elements(r.in(0));
  for (int id : r.instr.inputs) {
    if (Elements(r.plan.buffers[id]) != k.rows) return r.Fail("sizes differ");
  }
  if (Elements(r.out(0)) != k.rows) return r.Fail("output size");
  return absl::OkStatus();
}

// The operands a unit family's kernels read or write as f32 under any
// precision (compiler/ops/unit_family.h) are f32 tensors.
template <typename Family>
absl::Status CheckF32Operands(const Resolving& r, KernelOp op) {
  if constexpr (ops::unit::HasF32Operands<Family>::value) {
    for (bool output : {false, true}) {
      const std::vector<int>& ids = output ? r.instr.outputs : r.instr.inputs;
      for (size_t j = 0; j < ids.size(); ++j) {
        const Buffer& b = r.plan.buffers[ids[j]];
        if (Family::F32Operand(op, output, static_cast<int>(j)) && b.dtype != DType::kF32) {
          return r.Fail(absl::StrCat(output ? "output " : "input ", j, " (", b.name,
                                     ") is not f32"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// A unit family's sizes: its Resolve (compiler/ops/kernel_families.h) over
// the operands' shapes, into KernelArgs::<snake>; and, where its Args asks,
// which outputs are bf16 tensors. An op with a workspace leaves it in
// KernelArgs::workspace, its y slot null (as every absent operand's).
template <typename Family>
absl::Status ResolveUnit(const Resolving& r, KernelArgs& k, typename Family::Args& args) {
  if (r.workspace) RETURN_IF_ERROR(TakeWorkspace(r, k));
  const ops::unit::PlanFacts facts = UnitFactsOf(r.plan, r.instr);
  k.op = ops::unit::KernelOfUnit<Family>(k.op, facts);
  // The i32 operand, if any (compiler/ops/unit_family.h): read through
  // Args, not its x slot.
  const int ids = ops::unit::IdsInputOf<Family>(k.op);
  if (ids >= 0) {
    if (r.in(ids).dtype != DType::kI32) return r.Fail("ids are not i32");
    if constexpr (ops::unit::HasIds<Family>::value) {
      args.*Family::kIds = reinterpret_cast<const int32_t*>(r.ptr(r.in(ids)));
    }
    k.x[ids] = nullptr;
  }
  std::vector<std::vector<int64_t>> in, out;
  for (int id : r.instr.inputs) in.push_back(r.plan.buffers[id].shape);
  for (int id : r.instr.outputs) out.push_back(r.plan.buffers[id].shape);
  const std::string why =
      ops::unit::ResolveUnit<Family>(k.op, in, out, r.instr.attrs, facts, &args);
  if (!why.empty()) return r.Fail(why);
  RETURN_IF_ERROR(CheckF32Operands<Family>(r, k.op));
  if constexpr (ops::unit::HasBf16Outputs<typename Family::Args>::value) {
    args.bf16_outputs = 0;
    for (size_t j = 0; j < r.instr.outputs.size() && j < 32; ++j) {
      if (r.out(static_cast<int>(j)).dtype == DType::kBF16) args.bf16_outputs |= 1u << j;
    }
  }
  return absl::OkStatus();
}
#define TRAINC_UNIT_RESOLVER(Fam, snake)                             \
  absl::Status Resolve##Fam(const Resolving& r, KernelArgs& k) {         \
    return ResolveUnit<ops::Fam##Family>(r, k, k.snake);              \
  }
TRAINC_UNIT_FAMILIES(TRAINC_UNIT_RESOLVER)
#undef TRAINC_UNIT_RESOLVER

Resolver ResolverOf(KernelOp op) {
#define TRAINC_RESOLVER_ENTRY(Family) &Resolve##Family,
  static constexpr Resolver kResolvers[] = {nullptr,
                                            TRAINC_KERNEL_FAMILIES(TRAINC_RESOLVER_ENTRY)};
#undef TRAINC_RESOLVER_ENTRY
  return kResolvers[static_cast<int>(FamilyOf(op))];
}

}  // namespace trainc::resolve
