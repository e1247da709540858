#include "runtime/device/kernel_args.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"
#include "runtime/device/resolve.h"

namespace trainc {
namespace {

// The instruction ops the executor runs itself (no kernel).
constexpr const char* kNotComputeOps[] = {"load_batch", "all_reduce", "reduce_scatter",
                                          "all_gather"};

// The kernel of instruction op `name` (cast and optimizer: their first;
// their resolvers pick); nullopt when it has none.
std::optional<KernelOp> FindKernel(absl::string_view name) {
  for (const char* op : kNotComputeOps) {
    if (name == op) return KernelOp::kNotCompute;
  }
  const KernelOp op = KernelOpOfInstruction(std::string_view(name.data(), name.size()));
  if (op == KernelOp::kNotCompute) return std::nullopt;
  return op;
}

// Fills `k` for `instr` (already checked for arity and ids): the operand
// slots, then its family's resolver.
absl::Status ResolveOne(const Plan& plan, const Instruction& instr, const ops::OpDef& def,
                        char* base, const std::string& device_name, KernelArgs& k) {
  const resolve::Resolving r{plan, instr, base, device_name, def.workspace};
  for (size_t j = 0; j < instr.inputs.size() && j < std::size(k.x); ++j) {
    k.x[j] = r.ptr(r.in(static_cast<int>(j)));
  }
  for (size_t j = 0; j < instr.outputs.size() && j < std::size(k.y); ++j) {
    k.y[j] = r.ptr(r.out(static_cast<int>(j)));
  }
  k.accumulate = r.attr("accumulate", 0) != 0;
  const resolve::Resolver resolver = resolve::ResolverOf(k.op);
  return resolver == nullptr ? absl::OkStatus() : resolver(r, k);
}

// precision = bf16: the operands a kernel reads or writes as bf16, to be
// staged in f32 around it. A cast converts by itself; the optimizer and
// the other persistent-state ops never see bf16 (plan validation).
template <typename Fail>
absl::Status RecordBf16Operands(const Plan& plan, const Instruction& instr, char* base,
                                const Fail& fail, KernelArgs& k) {
  if (k.op == KernelOp::kCastToBf16 || k.op == KernelOp::kCastToF32) return absl::OkStatus();
  auto add = [&](const Buffer& b, float* slot, bool output) {
    Bf16Operand& o = k.bf16[k.num_bf16++];
    o.bf16 = slot;
    o.elems = Elements(b);
    o.output = output;
  };
  for (size_t j = 0; j < instr.inputs.size(); ++j) {
    const Buffer& b = plan.buffers[instr.inputs[j]];
    if (b.dtype != DType::kBF16) continue;
    if (j >= std::size(k.x) ||
        (base != nullptr && k.x[j] != reinterpret_cast<float*>(base + b.offset))) {
      return fail(absl::StrCat("input ", j, " (", b.name, ") is bf16, which this op cannot read"));
    }
    add(b, const_cast<float*>(k.x[j]), false);
  }
  for (size_t j = 0; j < instr.outputs.size(); ++j) {
    const Buffer& b = plan.buffers[instr.outputs[j]];
    if (b.dtype != DType::kBF16) continue;
    if (j >= std::size(k.y) ||
        (base != nullptr && k.y[j] != reinterpret_cast<float*>(base + b.offset))) {
      return fail(absl::StrCat("output ", j, " (", b.name, ") is bf16, which this op cannot write"));
    }
    add(b, k.y[j], true);
  }
  return absl::OkStatus();
}

// Checks `instr` against the op table (arity, ids, stream) and fills `k`;
// `base` null: no arena, pointers stay null.
absl::Status ResolveInstruction(const Plan& plan, const Instruction& instr,
                                char* base, const std::string& device_name,
                                KernelArgs& k) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        device_name, ": instruction ", instr.id, " (", instr.op, " \"", instr.label,
        "\"): ", why));
  };
  if (instr.id < 0 || instr.id >= static_cast<int>(plan.instructions.size()) ||
      &plan.instructions[instr.id] != &instr) {
    return fail("id != its index");
  }
  const ops::OpDef* def = ops::FindOp(instr.op);
  const std::optional<KernelOp> kernel = FindKernel(instr.op);
  if (def == nullptr || !kernel.has_value()) {
    return fail(def == nullptr ? "unknown op" : "no kernel for this op");
  }
  const int n_in = static_cast<int>(instr.inputs.size());
  const int n_out = static_cast<int>(instr.outputs.size());
  if (n_in < def->min_inputs || (def->max_inputs >= 0 && n_in > def->max_inputs) ||
      n_out < def->min_outputs || (def->max_outputs >= 0 && n_out > def->max_outputs)) {
    return fail(absl::StrCat("has ", n_in, " inputs and ", n_out,
                             " outputs; ", def->name, " takes ", def->doc));
  }
  const int num_buffers = static_cast<int>(plan.buffers.size());
  for (int id : instr.inputs) {
    if (id < 0 || id >= num_buffers) return fail("input id out of range");
  }
  for (int id : instr.outputs) {
    if (id < 0 || id >= num_buffers) return fail("output id out of range");
  }
  k.op = *kernel;
  if (k.op == KernelOp::kNotCompute) return absl::OkStatus();
  if (instr.stream != Stream::kCompute) return fail("not on compute stream");
  RETURN_IF_ERROR(ResolveOne(plan, instr, *def, base, device_name, k));
  return RecordBf16Operands(plan, instr, base, fail, k);
}

}  // namespace

absl::StatusOr<KernelArgs> DescribeKernel(const Plan& plan, const Instruction& instr,
                                          const std::string& device_name) {
  KernelArgs k;
  RETURN_IF_ERROR(ResolveInstruction(plan, instr, nullptr, device_name, k));
  return k;
}

namespace {

// An operand written over an earlier one (an in-place output over its
// input, ops::OpDef::in_place) shares that operand's staging: the index of
// the earlier operand, or -1.
int SharedStaging(const KernelArgs& k, int i) {
  for (int j = 0; j < i; ++j) {
    if (!k.bf16[j].native && k.bf16[j].bf16 == k.bf16[i].bf16 &&
        k.bf16[j].elems == k.bf16[i].elems) {
      return j;
    }
  }
  return -1;
}

}  // namespace

int64_t Bf16StagingBytes(const KernelArgs& k) {
  int64_t bytes = 0;
  for (int i = 0; i < k.num_bf16; ++i) {
    if (!k.bf16[i].native && SharedStaging(k, i) < 0) {
      bytes += (k.bf16[i].elems * 4 + 63) / 64 * 64;
    }
  }
  return bytes;
}

int64_t Bf16StagingBytes(const std::vector<KernelArgs>& kernels) {
  int64_t most = 0;
  for (const KernelArgs& k : kernels) most = std::max(most, Bf16StagingBytes(k));
  return most;
}

void AssignBf16Staging(std::vector<KernelArgs>& kernels, char* staging) {
  for (KernelArgs& k : kernels) AssignBf16Staging(k, staging);
}

void AssignBf16Staging(KernelArgs& k, char* staging) {
  int64_t at = 0;
  for (int i = 0; i < k.num_bf16; ++i) {
    Bf16Operand& o = k.bf16[i];
    if (o.native) continue;  // read and written as bf16 by the kernel
    const int shared = SharedStaging(k, i);
    if (shared >= 0) {
      o.f32 = k.bf16[shared].f32;
    } else {
      o.f32 = reinterpret_cast<float*>(staging + at);
      at += (o.elems * 4 + 63) / 64 * 64;
    }
    // Point the kernel's own operand slot (the one that held the bf16
    // address) at the staging.
    for (auto& x : k.x) {
      if (x == o.bf16 && !o.output) x = o.f32;
    }
    for (auto& y : k.y) {
      if (y == o.bf16 && o.output) y = o.f32;
    }
  }
}

int64_t LinearGradInputGeluWorkspaceBytes(const KernelArgs& k) {
  return k.accumulate ? k.linear.rows * k.linear.in * static_cast<int64_t>(sizeof(float)) : 0;
}

const Bf16Operand* StagedOutput(const KernelArgs& k, int j) {
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output && o.f32 != nullptr && o.f32 == k.y[j]) return &o;
  }
  return nullptr;
}

absl::Status MissingKernelError(const Instruction& instr, KernelOp op,
                                const std::string& device_name) {
  return absl::UnimplementedError(absl::StrCat(
      device_name, ": no kernel for op ", instr.op, " (", KernelOpName(op),
      ") on this backend; instruction ", instr.id, " \"", instr.label, "\" needs it"));
}

bool IsWindowOp(KernelOp op) { return FamilyOf(op) == KernelFamily::kWindow; }

bool IsKernelOp(absl::string_view op) {
  const std::optional<KernelOp> kernel = FindKernel(op);
  return kernel.has_value() && *kernel != KernelOp::kNotCompute;
}

absl::StatusOr<std::vector<KernelArgs>> ResolveKernels(
    const Plan& plan, char* arena, int64_t arena_bytes,
    const std::string& device_name) {
  if (plan.arena_bytes > arena_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(device_name, ": plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", arena_bytes));
  }
  for (const Buffer& b : plan.buffers) {
    if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          device_name, ": buffer ", b.name, " lies outside the arena"));
    }
  }
  std::vector<KernelArgs> kernels(plan.instructions.size());
  for (size_t i = 0; i < plan.instructions.size(); ++i) {
    RETURN_IF_ERROR(ResolveInstruction(plan, plan.instructions[i], arena, device_name,
                                       kernels[i]));
  }
  return kernels;
}

}  // namespace trainc
