#include "runtime/train/overlap.h"

#include "gtest/gtest.h"

namespace trainc {
namespace {

TraceSpan Span(Stream stream, int64_t b, int64_t e, int64_t step = 1) {
  TraceSpan s;
  s.stream = stream;
  s.begin_ns = b;
  s.end_ns = e;
  s.step = step;
  return s;
}

TEST(Overlap, CountsCommTimeCoveredByComputeOnce) {
  // Compute [0,10) and [5,20) overlap each other; comm [15,30) is hidden
  // for [15,20) only.
  OverlapStats s = ComputeOverlap({Span(Stream::kCompute, 0, 10),
                                   Span(Stream::kCompute, 5, 20),
                                   Span(Stream::kComm, 15, 30)});
  EXPECT_EQ(s.comm_ns, 15);
  EXPECT_EQ(s.hidden_ns, 5);
  EXPECT_NEAR(s.hidden_fraction(), 1.0 / 3, 1e-12);
}

TEST(Overlap, FullyHiddenAndExposed) {
  OverlapStats s = ComputeOverlap({Span(Stream::kCompute, 0, 100),
                                   Span(Stream::kComm, 10, 20),
                                   Span(Stream::kComm, 100, 150, 2)});
  EXPECT_EQ(s.comm_ns, 60);
  EXPECT_EQ(s.hidden_ns, 10);
  EXPECT_EQ(s.steps, 2);
}

TEST(Overlap, NoCommIsZero) {
  EXPECT_EQ(ComputeOverlap({Span(Stream::kCompute, 0, 1)}).hidden_fraction(),
            0.0);
}

}  // namespace
}  // namespace trainc
