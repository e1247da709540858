#include "compiler/graph/precision.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

bool IsFloat(const Value& v) { return v.dtype != DType::kI32; }

bool IsConstantInput(const ops::OpDef& def, int index) {
  return std::find(def.constant_inputs.begin(), def.constant_inputs.end(), index) !=
         def.constant_inputs.end();
}

// The dtype of each forward output and each gradient, in program order
// (a forward value is decided before any gradient of it is written).
absl::Status AssignDtypes(Graph& graph) {
  for (const Node& node : graph.nodes()) {
    const ops::OpDef* def = ops::FindOp(node.op);
    if (def == nullptr) {
      return absl::InternalError(absl::StrCat("mixed precision: unknown op ", node.op));
    }
    // A cast is made by this pass: its dtype is its job.
    if (FamilyOf(KernelOpOfInstruction(node.op)) == KernelFamily::kCast) continue;
    const int num_outputs = static_cast<int>(node.outputs.size());
    for (int o = 0; o < num_outputs; ++o) {
      Value& out = graph.mutable_value(node.outputs[o]);
      if (!IsFloat(out)) continue;
      // A library's workspace is raw bytes: the planner sizes it.
      if (def->workspace && o == num_outputs - 1) continue;
      if (out.kind == ValueKind::kActivationGrad) {
        // A backward temporary (attention's dS) is the gradient of nothing.
        if (out.grad_of >= 0) out.dtype = graph.value(out.grad_of).dtype;
        continue;
      }
      if (out.kind != ValueKind::kActivation || node.role != NodeRole::kForward) continue;
      if (std::find(def->f32_outputs.begin(), def->f32_outputs.end(), o) !=
          def->f32_outputs.end()) {
        out.dtype = DType::kF32;
        continue;
      }
      switch (ops::PrecisionOf(*def)) {
        case ops::Precision::kLowPrecision:
          out.dtype = DType::kBF16;
          break;
        case ops::Precision::kFp32:
          out.dtype = DType::kF32;
          break;
        case ops::Precision::kFollow: {
          bool any = false, all_bf16 = true;
          for (size_t i = 0; i < node.inputs.size(); ++i) {
            const Value& in = graph.value(node.inputs[i]);
            if (!IsFloat(in) || IsConstantInput(*def, static_cast<int>(i))) continue;
            any = true;
            all_bf16 &= in.dtype == DType::kBF16;
          }
          out.dtype = any && all_bf16 ? DType::kBF16 : DType::kF32;
          break;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> MixedPrecision::Run(Graph* graph) {
  RETURN_IF_ERROR(AssignDtypes(*graph));
  // Values an op keeps in f32 whatever the policy (OpDef::f32_outputs):
  // their readers take them as they are.
  std::vector<bool> keep_f32(graph->values().size(), false);
  for (const Node& node : graph->nodes()) {
    for (int o : ops::FindOp(node.op)->f32_outputs) keep_f32[node.outputs.at(o)] = true;
  }
  // Every other f32 float operand of a matrix product becomes its bf16
  // copy, made once, before the first node that needs it.
  std::vector<int> cast_of(graph->values().size(), -1);
  std::vector<Node> rewritten;
  bool changed = false;
  for (Node node : graph->nodes()) {
    const ops::OpDef* def = ops::FindOp(node.op);
    if (ops::PrecisionOf(*def) == ops::Precision::kLowPrecision) {
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const int id = node.inputs[i];
        const Value& v = graph->value(id);
        if (v.dtype != DType::kF32 || IsConstantInput(*def, static_cast<int>(i)) ||
            (id < static_cast<int>(keep_f32.size()) && keep_f32[id])) {
          continue;
        }
        if (cast_of[id] < 0) {
          Value copy;
          copy.name = absl::StrCat(v.name, ".bf16");
          copy.kind = ValueKind::kActivation;
          copy.dtype = DType::kBF16;
          copy.shape = v.shape;
          const int copy_id = graph->AddValue(std::move(copy));
          cast_of.resize(graph->values().size(), -1);
          cast_of[id] = copy_id;
          Node cast;
          cast.op = "cast";
          cast.inputs = {id};
          cast.outputs = {copy_id};
          cast.role = node.role;
          cast.label = absl::StrCat(graph->value(copy_id).name, " = cast");
          rewritten.push_back(std::move(cast));
        }
        node.inputs[i] = cast_of[id];
        changed = true;
      }
    }
    rewritten.push_back(std::move(node));
  }
  graph->SetNodes(std::move(rewritten));  // renumbered, the index rebuilt
  for (const Value& v : graph->values()) changed |= v.dtype == DType::kBF16;
  return changed;
}

}  // namespace trainc
