// sum_squares: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes and the plan's bucket, and its loop: Run<float> is the
// CPU kernel, Run<double> the float64 reference. The CUDA kernel is
// runtime/cuda/sum_squares.cu; the op table entry in
// compiler/ops/op_table.cc.
//
//   sum_squares  bucket grads -> grad_sq[1] (+)= the sum of their squares,
//                in double: the bucket's slot 0 (deterministic mode leaves
//                the reduced sum there), or under ZeRO (attr shard) this
//                rank's shard of it: at rank x shard in the bucket, or the
//                ZeRO-2 gradient shard, which holds that shard alone.
#ifndef TRAINC_COMPILER_OPS_SUM_SQUARES_FAMILY_H_
#define TRAINC_COMPILER_OPS_SUM_SQUARES_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct SumSquaresFamily {
  struct Args {
    int64_t bucket = 0;          // floats of the bucket's slot 0
    int64_t shard = 0;           // floats of one rank's shard; 0: the whole bucket
    bool grads_sharded = false;  // x[0] is the rank's shard alone (ZeRO-2)
    unit::Step step;             // the run's: its rank picks the shard

    // The floats summed, and where they start in x[0], on `rank`.
    int64_t Count() const { return shard == 0 ? bucket : shard; }
    int64_t Begin(int rank) const { return shard == 0 || grads_sharded ? 0 : rank * shard; }
  };

  // "" or why `in` / `out` (full buffer shapes), `attrs` and the bucket in
  // `plan` do not fit.
  static std::string Resolve(KernelOp, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs,
                             const unit::PlanFacts& plan, Args* a) {
    if (plan.bucket_elems < 0) return "attr bucket out of range";
    a->bucket = plan.bucket_elems;
    if (unit::Elements(out[0]) != 1) return "grad_sq is not [1]";
    std::string why = unit::ShardOfBucket(attrs, plan, a->bucket, &a->shard);
    if (why.empty()) {
      why = unit::BucketGrads(plan.inputs[0], unit::Elements(in[0]), a->bucket, a->shard,
                              &a->grads_sharded);
    }
    return why;
  }

  template <typename T>
  static void Run(KernelOp, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    const T* g = x[0] + a.Begin(a.step.rank);
    double s = 0;
    for (int64_t i = 0, n = a.Count(); i < n; ++i) s += static_cast<double>(g[i]) * g[i];
    y[0][0] = accumulate ? y[0][0] + static_cast<T>(s) : static_cast<T>(s);
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_SUM_SQUARES_FAMILY_H_
