// The name tables of --device and --comm (runtime/train/trainer.h).
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/train/trainer.h"

namespace trainc {
namespace {

// As compiler/plan/settings_test.cc: the table is `want`, in order (the
// order messages list the choices in), and every name parses back.
template <typename Enum>
void ExpectTable(const std::vector<std::pair<Enum, std::string>>& want) {
  ASSERT_EQ(std::size(EnumTable<Enum>::kEntries), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [value, name] = want[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(EnumTable<Enum>::kEntries[i].value, value);
    EXPECT_EQ(EnumName(value), name);
    EXPECT_EQ(ParseEnum<Enum>(name), value);
  }
}

TEST(TrainerSettingsTest, DeviceKind) {
  ExpectTable<DeviceKind>(
      {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}, {DeviceKind::kAuto, "auto"}});
  EXPECT_FALSE(ParseEnum<DeviceKind>("gpu").has_value());
}

TEST(TrainerSettingsTest, CommKind) {
  ExpectTable<CommKind>(
      {{CommKind::kGloo, "gloo"}, {CommKind::kMpi, "mpi"}, {CommKind::kAuto, "auto"}});
  EXPECT_FALSE(ParseEnum<CommKind>("nccl").has_value());
}

}  // namespace
}  // namespace trainc
