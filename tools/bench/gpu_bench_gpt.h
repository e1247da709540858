// gpu_bench's GPT table: dsl_examples/tiny_gpt.train and gpt2_small.train
// compiled by the real front end and planner (precision = bf16, one GPU),
// trained on a fixed random batch of tokens: ms per step, tokens/s, MFU and
// the plan's device memory, beside PyTorch on the same GPU and batch
// (tools/bench/torch_gpt2_bench.py: eager with SDPA and fused AdamW, and
// torch.compile) with its peak memory.
//
// MFU = (6 N + 12 L d T) x tokens per step / step time / the GPU's dense
// bf16 peak: N parameters (the tied head counted once), L attention
// layers of width d over context T (forward and backward of QK^T and AV,
// without the causal half: nanoGPT's and PaLM's count).
#ifndef TRAINC_TOOLS_BENCH_GPU_BENCH_GPT_H_
#define TRAINC_TOOLS_BENCH_GPU_BENCH_GPT_H_

#include <string>

#include "compiler/plan/plan.h"

namespace trainc::bench {

struct GptBenchArgs {
  int warmup = 5;
  int iters = 20;
  bool torch = true;
  std::string torch_script = "tools/bench/torch_gpt2_bench.py";
  // The dense bf16 peak in TFLOP/s; 0: by the GPU's name (H100/H200 SXM
  // 989, H100 PCIe 756, A100 312).
  double peak_tflops = 0;
  // gpt2_small's micro-batches besides 16; 0: the largest whose planned
  // memory fits the GPU's free memory less 3 GiB.
  int large_micro_batch = 0;
};

// Prints the table; returns the number of rows that failed.
int PrintGptRows(const GptBenchArgs& args);

// FLOPs of one step of `plan` by the MFU formula above: its parameters,
// and its forward attention instructions' width and context.
double GptStepFlops(const Plan& plan);

}  // namespace trainc::bench

#endif  // TRAINC_TOOLS_BENCH_GPU_BENCH_GPT_H_
