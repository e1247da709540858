// dropout: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes and the plan, and its loops: Run<float> is the CPU
// kernel, Run<double> the float64 reference. The CUDA kernel is
// runtime/cuda/dropout.cu; the op table entries in compiler/ops/op_table.cc.
//
//   dropout      x[B, ..] -> y (+)= x * DropoutFactor(seed, key, example, j, p)
//   dropout_grad dy -> dx, the same mask regenerated
//
// The mask is a Philox function (compiler/ops/philox.h) of the plan's seed,
// the op's key, the global example and the element: the global batch's
// micro-batches are rank-major (rank * accumulate + micro-step), as the
// data loader fills them, so the mask does not depend on the split. In
// evaluation (p taken as 0) both copy.
#ifndef TRAINC_COMPILER_OPS_DROPOUT_FAMILY_H_
#define TRAINC_COMPILER_OPS_DROPOUT_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/philox.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct DropoutFamily {
  struct Args {
    int64_t rows = 0;         // x's first axis: examples
    int64_t per_example = 0;  // elements per example
    float p = 0;              // probability of zeroing an element
    uint32_t key = 0;         // the op's key
    uint64_t seed = 0;        // the plan's
    int64_t global_batch = 0;
    int64_t rank_examples = 0;  // one rank's examples per step: accumulate x micro_batch
    int64_t micro_offset = 0;   // the micro-step's first example within its rank's
    unit::Step step;            // the run's (training, step, rank)

    // The global example of row 0 before the step's: what a CUDA kernel
    // adds to (step - 1) x global_batch, read from device memory.
    int64_t Position(int rank) const { return rank * rank_examples + micro_offset; }
    // The global example of row 0 at `step` of `rank`.
    uint64_t FirstExample(int64_t step, int rank) const {
      return static_cast<uint64_t>(step - 1) * static_cast<uint64_t>(global_batch) +
             static_cast<uint64_t>(Position(rank));
    }
  };

  // "" or why `in` / `out` (full buffer shapes), `attrs` and `plan` do not
  // fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs,
                             const unit::PlanFacts& plan, Args* a) {
    const std::vector<int64_t>& x = in[0];
    if (x.empty() || x[0] == 0) return "x has no batch axis";
    if (unit::Elements(out[0]) != unit::Elements(x)) return "output size";
    a->rows = x[0];
    a->per_example = unit::Elements(x) / a->rows;
    a->p = static_cast<float>(unit::Attr(attrs, "p", -1));
    if (!(a->p >= 0 && a->p < 1)) return "attr p outside [0, 1)";
    a->key = static_cast<uint32_t>(unit::Attr(attrs, "key", 0));
    a->seed = plan.seed;
    a->global_batch = plan.global_batch;
    a->rank_examples = plan.accumulate * plan.micro_batch;
    a->micro_offset = static_cast<int64_t>(plan.micro_step) * plan.micro_batch;
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above):
  // both ops are the same mask.
  template <typename T>
  static void Run(KernelOp, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    Masked(a, a.FirstExample(a.step.step, a.step.rank), a.step.training ? a.p : 0.0f, x[0],
           accumulate, y[0]);
  }

  // y[b, j] (+)= x[b, j] * DropoutFactor(a.seed, a.key, first + b, j, p)
  // over x[a.rows, a.per_example]; p = 0 copies.
  template <typename T>
  static void Masked(const Args& a, uint64_t first, float p, const T* __restrict x,
                     bool accumulate, T* __restrict y) {
    for (int64_t b = 0; b < a.rows; ++b) {
      const T* __restrict xr = x + b * a.per_example;
      T* __restrict yr = y + b * a.per_example;
      const uint64_t example = first + static_cast<uint64_t>(b);
      for (int64_t j = 0; j < a.per_example; ++j) {
        const T v = xr[j] * DropoutFactor(a.seed, a.key, example, j, p);
        yr[j] = accumulate ? yr[j] + v : v;
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_DROPOUT_FAMILY_H_
