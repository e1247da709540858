// Fault injection, for tests of how a job fails: off unless TRAINC_FAULT
// is set, read once at start; off, it costs nothing (no source is wrapped).
//
//   TRAINC_FAULT=loader_sleep:rank=1:step=5:seconds=600
//     rank 1's data loader sleeps 600 s in load_batch at step 5 (before
//     its first micro-batch), as a read from a stuck file system would:
//     the process lives and beats, its peers wait in a collective.
//
//   TRAINC_FAULT=loader_slow:rank=1:ms=20
//     rank 1's data loader sleeps 20 ms in every load_batch (every
//     micro-batch), as a slow disk or a noisy neighbour would: a straggler.
//
//   ASSIGN_OR_RETURN(Fault fault, FaultFromEnvironment());
//   if (fault.kind == Fault::Kind::kLoaderSleep && fault.rank == rank)
//     batches = std::make_unique<SleepingBatchSource>(batches, fault);
#ifndef TRAINC_RUNTIME_FAULT_FAULT_H_
#define TRAINC_RUNTIME_FAULT_FAULT_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/exec/batch_source.h"

namespace trainc {

inline constexpr char kFaultEnv[] = "TRAINC_FAULT";

struct Fault {
  enum class Kind { kNone, kLoaderSleep, kLoaderSlow };
  Kind kind = Kind::kNone;
  int rank = 0;
  int64_t step = 0;     // loader_sleep: from 1
  int64_t seconds = 0;  // loader_sleep
  int64_t ms = 0;       // loader_slow: per load_batch
};

// "" is no fault; anything else must be KIND:key=value:... with every key
// of the kind once (an unknown kind or key, a missing one or a value that
// is not a whole number in range is an error saying which).
absl::StatusOr<Fault> ParseFault(const std::string& spec);

// ParseFault of TRAINC_FAULT, errors naming the variable.
absl::StatusOr<Fault> FaultFromEnvironment();

// A loader fault's batch source: `inner`'s, except that it first sleeps:
// loader_sleep at the fault's step (saying so on `log`), loader_slow at
// every Fill (saying so once).
class SleepingBatchSource : public BatchSource {
 public:
  SleepingBatchSource(BatchSource* inner, const Fault& fault, std::ostream& log)
      : inner_(inner), fault_(fault), log_(log) {}
  // The optimizer step the next Fill calls belong to.
  void SetStep(int64_t step) { step_ = step; }
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  BatchSource* inner_;
  const Fault fault_;
  std::ostream& log_;
  int64_t step_ = 0;
  bool slept_ = false;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_FAULT_FAULT_H_
