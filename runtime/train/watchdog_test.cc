#include "runtime/train/watchdog.h"

#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// The order of events, not their timing: a watchdog that is fed never
// fires; one that stops being fed fires once, naming the rank and the
// last step.
TEST(StepWatchdog, FiresOnceAfterTheStepsStop) {
  absl::Notification fired;
  std::string message;
  int calls = 0;
  {
    StepWatchdog watchdog(absl::Milliseconds(200), 3, [&](const std::string& why) {
      ++calls;
      message = why;
      fired.Notify();
    });
    watchdog.StepDone(41);
    watchdog.StepDone(42);
    fired.WaitForNotification();  // bounded by the test's own timeout
  }
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(message, HasSubstr("rank 3: no step finished for"));
  EXPECT_THAT(message, HasSubstr("(the last was step 42)"));
}

TEST(StepWatchdog, UnarmedUntilTheFirstStep) {
  bool fired = false;
  {
    StepWatchdog watchdog(absl::Milliseconds(1), 0, [&](const std::string&) { fired = true; });
    absl::SleepFor(absl::Milliseconds(50));  // start-up: no step yet
  }
  EXPECT_FALSE(fired);
}

}  // namespace
}  // namespace trainc
