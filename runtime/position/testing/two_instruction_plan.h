// Tests of runtime/position: the smallest plan with a compute instruction
// and a bucket's collective, for labels and tables.
#ifndef TRAINC_RUNTIME_POSITION_TESTING_TWO_INSTRUCTION_PLAN_H_
#define TRAINC_RUNTIME_POSITION_TESTING_TWO_INSTRUCTION_PLAN_H_

#include <string>

#include "compiler/plan/plan.h"

namespace trainc::testing {

// Instruction 0: `op` ("label", in `phase`) on compute; instruction 1:
// bucket 0's all_reduce on comm.
inline Plan TwoInstructionPlan(const std::string& op, const std::string& label, Phase phase) {
  Plan plan;
  Instruction first;
  first.id = 0;
  first.op = op;
  first.label = label;
  first.phase = phase;
  Instruction ar;
  ar.id = 1;
  ar.op = "all_reduce";
  ar.label = "all_reduce bucket 0";
  ar.stream = Stream::kComm;
  plan.instructions = {first, ar};
  Bucket b;
  b.id = 0;
  b.all_reduce = 1;
  plan.buckets = {b};
  return plan;
}

}  // namespace trainc::testing

#endif  // TRAINC_RUNTIME_POSITION_TESTING_TWO_INSTRUCTION_PLAN_H_
