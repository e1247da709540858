// Exact checks of a Communicator's collectives, for every implementation's
// test (Gloo's ranks are threads, MPI's processes under mpirun). Each call
// is collective: every rank makes it with the same arguments. Each returns
// "" when every element this rank can see is right, else the first wrong
// one; none stops early, since a rank that left while its peers went on to
// the next collective would hang them.
//
// The values are integers (and, for bf16, integers plus 1/1024, which bf16
// rounding drops), so every sum over ranks is exact in float and in bf16.
#ifndef TRAINC_RUNTIME_COMM_TESTING_COLLECTIVE_CHECKS_H_
#define TRAINC_RUNTIME_COMM_TESTING_COLLECTIVE_CHECKS_H_

#include <cstdint>
#include <string>

#include "runtime/comm/communicator.h"

namespace trainc::testing {

// ZeRO-1's pair on one buffer of world_size x count floats: an in-place
// reduce-scatter (this rank's segment is the sum), then an in-place
// all-gather (every segment is), `rounds` times on the same buffer (a
// communicator that caches per buffer reuses its state).
std::string CheckReduceScatterThenAllGather(Communicator& comm, int64_t count,
                                            int rounds = 1);

// AllReduceSumBf16 on `count` floats and ReduceScatterSumBf16 on
// world_size x count: each result is the bf16 sum. On one rank the values
// must come back as they were (nothing travels, nothing is rounded).
std::string CheckBf16Collectives(Communicator& comm, int64_t count);

}  // namespace trainc::testing

#endif  // TRAINC_RUNTIME_COMM_TESTING_COLLECTIVE_CHECKS_H_
