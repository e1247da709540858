#include "runtime/train/trace_files.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {

// Where this rank's --trace goes: PATH, or PATH.rank<N>.json when the ranks
// share no folder (Redis rendezvous, mpirun): each machine keeps its own.
std::string TracePath(const RankContext& rank, const std::string& path) {
  if (rank.world_size == 1 || !rank.rendezvous_dir.empty()) return path;
  return absl::StrCat(path, ".rank", rank.rank, ".json");
}

namespace {

// A rank's events in the rendezvous folder, for the rank that merges.
std::string TracePartPath(const RankContext& rank, int r) {
  return absl::StrCat(rank.rendezvous_dir, "/trace.rank", r, ".json");
}

}  // namespace

// Whole, then renamed: a rank writing a stopped job's trace may read it
// at any time.
absl::Status WriteTracePart(const RankContext& rank, const std::string& part) {
  const std::string mine = TracePartPath(rank, rank.rank);
  const std::string temp = mine + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary);
    out << part;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  if (std::rename(temp.c_str(), mine.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", mine));
  }
  return absl::OkStatus();
}

// The parts the ranks (but `skip`) left in the rendezvous folder;
// `required` makes a missing one an error, else it is left out.
absl::StatusOr<std::vector<std::string>> ReadTraceParts(const RankContext& rank,
                                                        bool required, int skip) {
  std::vector<std::string> parts;
  for (int r = 0; r < rank.world_size; ++r) {
    if (r == skip) continue;
    const std::string p = TracePartPath(rank, r);
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in) {
      parts.push_back(ss.str());
    } else if (required) {
      return absl::InternalError(absl::StrCat("cannot read ", p));
    }
  }
  return parts;
}

absl::Status WriteTrace(const Plan& plan, const RankContext& rank,
                        const Tracer& tracer, Communicator& comm,
                        const std::string& path, const PlanIdentity& identity) {
  const std::string part = tracer.EventsJson(plan);
  if (rank.world_size == 1 || rank.rendezvous_dir.empty()) {
    return MergeTraceParts(plan, {part}, tracer.steps_traced(), TracePath(rank, path),
                           nullptr, &identity);
  }
  // Ranks meet in the rendezvous folder: each writes its part, rank 0
  // merges once every part is there.
  RETURN_IF_ERROR(WriteTracePart(rank, part));
  RETURN_IF_ERROR(comm.Barrier());
  if (rank.rank != 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::vector<std::string> parts,
                   ReadTraceParts(rank, /*required=*/true));
  return MergeTraceParts(plan, parts, tracer.steps_traced(), path, nullptr, &identity);
}

// A line of the position table as the trace records it; `now_ns` is the
// time since the job start when the positions were read.
TracePosition ToTrace(const RankPosition& p, int64_t now_ns) {
  TracePosition t;
  t.rank = p.rank;
  t.step = p.step;
  t.instr = p.instruction;
  t.instructions = p.instructions;
  t.label = p.label;
  t.state = p.state;
  t.in_collective = p.in_collective;
  t.seconds = p.seconds;
  t.behind = p.behind;
  t.where = p.where;
  t.since_us = std::max(0.0, (now_ns - p.seconds * 1e9) / 1e3);
  return t;
}

void WriteStopTrace(const Plan& plan, const RankContext& rank, const Tracer& tracer,
                    const RankPositions& positions, const std::string& path,
                    const PlanIdentity& identity, const std::string& why) {
  TraceStop stop{why, rank.rank, {}};
  int behind = -1;
  if (std::optional<StopNote> note;
      !positions.launcher_dir().empty() && (note = ReadStopNote(positions.launcher_dir()))) {
    stop.reason = note->reason;  // the launcher's verdict on the job
    behind = note->behind;
  }
  const int64_t now = TraceClockNs() - tracer.job_start_ns();
  for (const RankPosition& p : positions.All(behind)) stop.positions.push_back(ToTrace(p, now));
  // The other ranks' traced steps, from the parts they left at the end of
  // their traced window (a rank stopped before it has none there).
  std::vector<std::string> parts = {tracer.EventsJson(plan)};
  if (!rank.rendezvous_dir.empty() && rank.world_size > 1) {
    absl::StatusOr<std::vector<std::string>> theirs =
        ReadTraceParts(rank, /*required=*/false, /*skip=*/rank.rank);
    if (theirs.ok()) parts.insert(parts.end(), theirs->begin(), theirs->end());
  }
  const std::string out = TracePath(rank, path);
  const absl::Status written =
      MergeTraceParts(plan, parts, tracer.steps_traced(), out, &stop, &identity);
  std::cerr << (written.ok() ? absl::StrCat("train: the stopped job's trace: ", out)
                             : absl::StrCat("train: warning: ", written.message()))
            << std::endl;
}

}  // namespace trainc
