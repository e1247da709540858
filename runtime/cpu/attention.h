// Causal attention on the CPU in O(T) memory: the attention family's own
// CPU kernel (compiler/ops/attention_family.h says the layout, the grouped
// heads and the rotary positions; its Run is the float64 reference).
//
// Each (batch, head) is walked in blocks of query rows; a block of rows
// [i0, i1) needs keys [0, i1) only, so the products skip everything above
// the diagonal and the scores of one block ([rows, i1], in cache) are all
// that ever exists of the T x T square. The forward saves y and each row's
// log-sum-exp; the backward recomputes the block's scores from them. Every
// sum runs in a fixed order on one thread, so results are bit-identical
// from run to run and whatever the batch split.
#ifndef TRAINC_RUNTIME_CPU_ATTENTION_H_
#define TRAINC_RUNTIME_CPU_ATTENTION_H_

#include <string>
#include <vector>

#include "compiler/ops/attention_family.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

// qkv[B, T, (H + 2 KV) d] -> y[B, T, H d], lse[B, H, T].
void Attention(const attention::Geometry& g, const float* qkv, float* y, float* lse);

// dqkv (+)= the gradient of the above given dy[B, T, H d] and the forward's
// y and lse; delta[B, H, T] receives rowsum(dy y) (working space the caller
// may read; its prior contents are never read).
void AttentionGrad(const attention::Geometry& g, const float* dy, const float* qkv,
                   const float* y, const float* lse, bool accumulate, float* dqkv,
                   float* delta);

// The attention family's CPU kernel (compiler/ops/unit_family.h: a CPU
// kernel of its own, which kernels.h's RunAttention runs): attention or
// attention_grad on the operands in op table order. "" or oneDNN's error.
//
// Where g.native_inputs has q|k|v's bit (set by PrepareAttention below
// alone): the products run on oneDNN's bf16 kernels (bf16_matmul.h's
// Bf16Gemm; the rounding points are the CUDA tensor-core kernels',
// attention.cc says where), every input whose native bit is set is read
// as the bf16 tensor it is (its x slot holds uint16_t values), and y or
// dqkv, where g.native_outputs says so, is written as one (rounded to
// nearest even after the f32 sum; lse and delta are f32). Else Attention
// and AttentionGrad above, on f32 operands (both native masks must be 0;
// the plan's facts, bf16_inputs and bf16_outputs, are not read).
std::string OwnCpuKernel(KernelOp op, const attention::Geometry& g, const float* const* x,
                         float* const* y, bool accumulate);

// The family's decision for a plan, once (prepared.h's ChooseNative, for
// CpuDevice::Prepare and the planner's staging estimate, while the x slots
// hold the tensors, before AssignBf16Staging): where the plan's products
// can run on bf16 (Bf16Gemm::Native: the CPU's kernels, and
// TRAINC_BF16_GEMM is not "widened"), the bf16 operands of every
// attention instruction whose q|k|v is bf16 become native operands (every
// KernelArgs::bf16 entry of their tensor), read and written by the kernel
// as they are, and native_inputs / native_outputs say which; elsewhere
// both are 0 and the operands stay staged, the f32 kernel on the widened
// values.
void PrepareAttention(std::vector<KernelArgs>& kernels);

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_ATTENTION_H_
