// The plan handshake: before the first step every rank shows the others
// what it is about to run, and a job whose ranks disagree stops there with
// what differs, instead of training to the end on a silently wrong
// average (two ranks started by hand with different --micro_batch both
// "succeed" otherwise).
//
//   ASSIGN_OR_RETURN(RankFingerprint mine, FingerprintRank(plan, data, device, state));
//   RETURN_IF_ERROR(AgreeBeforeFirstStep(comm, mine));
//
// A fingerprint is the compiled plan's hash (PlanHash, plan_io.h: of its
// text form, not of the file name it was compiled from; the hash traces
// record), FNV-1a hashes (compiler/util/fnv.h) of the training data's
// identity (sizes, labels, a fixed sample of features or token windows)
// and of the initial parameters (after initialisation, --init-from or
// --resume; not under ZeRO-3, where each rank holds another shard of
// them), the training position, and the plan's headline numbers so that a
// mismatch can be named ("micro_batch 8, rank 0 has 16") rather than only
// detected.
#ifndef TRAINC_RUNTIME_TRAIN_HANDSHAKE_H_
#define TRAINC_RUNTIME_TRAIN_HANDSHAKE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/dataset.h"
#include "runtime/device/device.h"

namespace trainc {

struct RankFingerprint {
  // (name, value) in a fixed order, the same on every rank: the plan's
  // numbers first, then the hashes.
  std::vector<std::pair<std::string, uint64_t>> fields;
};

// This rank's fingerprint. Reads the parameters back from `device`.
absl::StatusOr<RankFingerprint> FingerprintRank(const Plan& plan, const Dataset& data,
                                                Device& device, const TrainingState& state);

// Exchanges fingerprints over `comm` (one all-gather) and fails on every
// rank, with the same message, when any rank's differs from rank 0's.
absl::Status AgreeBeforeFirstStep(Communicator& comm, const RankFingerprint& mine);

// What AgreeBeforeFirstStep says about `all` (one fingerprint per rank):
// OK, or FailedPrecondition naming each rank that differs from rank 0 and
// how. Exposed for tests.
absl::Status CompareFingerprints(const std::vector<RankFingerprint>& all);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_HANDSHAKE_H_
