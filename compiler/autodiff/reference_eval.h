// Reference semantics of plan.h's ops in double precision, for tests.
//
// EvalOp runs one op on caller-owned tensors; PlanInterpreter runs a whole
// Plan on one rank over a double-precision arena addressed exactly like the
// real one (element = byte offset / 4), so memory-planning mistakes (two
// live buffers sharing memory) show up as wrong numbers.
#ifndef TRAINC_COMPILER_AUTODIFF_REFERENCE_EVAL_H_
#define TRAINC_COMPILER_AUTODIFF_REFERENCE_EVAL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ops/unit_family.h"
#include "compiler/plan/plan.h"

namespace trainc {

struct TensorRef {
  double* data = nullptr;
  std::vector<int64_t> shape;
  int64_t size() const;
};

// Writes `out` from `in` as plan.h and the op table (compiler/ops/
// op_table.cc, runtime/cpu/kernels.h) specify (attr accumulate: += instead
// of =). Tensors are [.., n]: row-wise ops work over the last axis, i32
// operands (ids, labels) hold integral doubles. load_batch and the
// collectives are not ops here.
absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out);
// EvalOp as instruction of a plan: `facts` what the plan says about it
// (UnitFactsOf: the operands' dtypes, the batch's layout and seed, its
// bucket), `step` the step its kernel runs in (EvalOp's: step 1 of rank 0,
// training, at learning rate 0).
absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const ops::unit::PlanFacts& facts, const ops::unit::Step& step,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out);

class PlanInterpreter {
 public:
  explicit PlanInterpreter(const Plan& plan);

  TensorRef buffer(int id);
  // Data for load_batch(micro=k): batches[k][j] fills Plan::input_buffers[j].
  void set_batches(std::vector<std::vector<std::vector<double>>> batches) {
    batches_ = std::move(batches);
  }
  // Runs one instruction as a world of one rank would: all_reduce is a
  // no-op, or in deterministic mode the ordered sum of the slots into slot
  // 0. The optimizer is not run (fails).
  absl::Status Run(const Instruction& instr);

 private:
  const Plan& plan_;
  std::vector<double> arena_;
  std::vector<std::vector<std::vector<double>>> batches_;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_AUTODIFF_REFERENCE_EVAL_H_
