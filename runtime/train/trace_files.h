// Where a rank's --trace goes and how the ranks' parts meet: a private
// part of runtime/train (trainer.cc's), kept apart so the training loop's
// file stays about the loop.
#ifndef TRAINC_RUNTIME_TRAIN_TRACE_FILES_H_
#define TRAINC_RUNTIME_TRAIN_TRACE_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/position/position.h"
#include "runtime/trace/plan_identity.h"
#include "runtime/trace/tracer.h"
#include "runtime/train/rank_positions.h"
#include "runtime/train/trainer.h"

namespace trainc {

// Where this rank's --trace goes: PATH, or PATH.rank<N>.json when the ranks
// share no folder (Redis rendezvous, mpirun): each machine keeps its own.
std::string TracePath(const RankContext& rank, const std::string& path);

// This rank's events in the rendezvous folder, written whole then renamed
// (a rank writing a stopped job's trace may read it at any time).
absl::Status WriteTracePart(const RankContext& rank, const std::string& part);

// The parts the ranks (but `skip`) left in the rendezvous folder;
// `required` makes a missing one an error, else it is left out.
absl::StatusOr<std::vector<std::string>> ReadTraceParts(const RankContext& rank,
                                                        bool required, int skip = -1);

// The end of a traced run: every rank's part, merged by rank 0 into PATH
// (a barrier on `comm` between), or this rank's own file.
// `identity` is the plan that ran, recorded in the metadata.
absl::Status WriteTrace(const Plan& plan, const RankContext& rank, const Tracer& tracer,
                        Communicator& comm, const std::string& path,
                        const PlanIdentity& identity);

// --trace (`path`) when the run stops (an error, a stall, the launcher's
// stop note, which when there is one says why and who was behind): the
// traced steps of this rank and of the ranks that left their part in the
// rendezvous folder, and where each rank was. No collective, since a peer
// may be gone; says on stderr where it went, or why not.
void WriteStopTrace(const Plan& plan, const RankContext& rank, const Tracer& tracer,
                    const RankPositions& positions, const std::string& path,
                    const PlanIdentity& identity, const std::string& why);

// A line of the position table as the trace records it; `now_ns` is the
// time since the job start when the positions were read.
TracePosition ToTrace(const RankPosition& p, int64_t now_ns);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_TRACE_FILES_H_
