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
// attention_grad on the operands in op table order. Always "".
std::string OwnCpuKernel(KernelOp op, const attention::Geometry& g, const float* const* x,
                         float* const* y, bool accumulate);

// precision = bf16 with the products on oneDNN's bf16 kernels
// (bf16_matmul.h's Bf16Gemm; the rounding points are the CUDA tensor-core
// kernels', attention.cc says where): whether instruction `k` runs so (an
// attention op whose q|k|v is a staged bf16 tensor, on a CPU with the
// kernels and without TRAINC_BF16_GEMM=widened), and the kernel, on the
// same operands as OwnCpuKernel ("" or oneDNN's error). Else
// OwnCpuKernel's f32 products on the widened values, as before.
bool RunsBf16Attention(const KernelArgs& k);
std::string OwnCpuKernelBf16(KernelOp op, const attention::Geometry& g, const float* const* x,
                             float* const* y, bool accumulate);

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_ATTENTION_H_
