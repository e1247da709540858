#include "compiler/cost/machine_profile.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/cost/bundled_profiles.h"

namespace trainc::cost {
namespace {

using ::testing::HasSubstr;

constexpr char kMinimal[] = R"(# a comment line
name                         = test   # a trailing comment
compute.peak_flops           = 1e12
compute.memory_bandwidth     = 1e11
compute.kernel_overhead_us   = 2
compute.host_synchronous     = false
compute.step_overhead_us     = 10
network.ranks_per_node       = 8
network.intra.alpha_us       = 1
network.intra.bandwidth_GBps = 100
network.inter.alpha_us       = 5
network.inter.bandwidth_GBps = 25
network.all_reduce           = ring
network.reduce_bandwidth     = 1e12
)";

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<MachineProfile> p = ParseMachineProfile(text, "x.profile");
  return p.ok() ? "(parsed)" : std::string(p.status().message());
}

TEST(MachineProfileTest, ParsesEveryKeyAndDefaults) {
  MachineProfile p = ParseMachineProfile(
                         absl::StrCat(kMinimal, "efficiency.matmul = 0.5\n"
                                                "efficiency.linear_grad_params = 0.25\n"
                                                "scale.relu = 3\n"),
                         "x.profile")
                         .value();
  EXPECT_EQ(p.name, "test");
  EXPECT_DOUBLE_EQ(p.peak_flops, 1e12);
  EXPECT_DOUBLE_EQ(p.peak_flops_tf32, 1e12);  // defaults to the f32 peak
  EXPECT_FALSE(p.host_synchronous);
  EXPECT_EQ(p.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_GBps, 25);
  EXPECT_EQ(p.all_reduce, AllReduceAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(p.efficiency.at("matmul"), 0.5);
  EXPECT_DOUBLE_EQ(p.efficiency.at("linear_grad_params"), 0.25);
  EXPECT_DOUBLE_EQ(p.scale.at("relu"), 3);
  EXPECT_DOUBLE_EQ(p.rank_imbalance, 0);
  EXPECT_EQ(&p.LinkFor(8), &p.intra);
  EXPECT_EQ(&p.LinkFor(9), &p.inter);
}

TEST(MachineProfileTest, EveryBundledProfileParses) {
  ASSERT_GE(BundledProfiles().size(), 3u);
  for (const BundledProfile& b : BundledProfiles()) {
    EXPECT_TRUE(ParseMachineProfile(b.text, b.path).ok()) << b.path;
  }
}

TEST(MachineProfileTest, FormatReadsBackToTheSameProfile) {
  for (const BundledProfile& b : BundledProfiles()) {
    const MachineProfile p = ParseMachineProfile(b.text, b.path).value();
    const std::string text = FormatMachineProfile(p, "round trip\nof " + b.name);
    const MachineProfile q = ParseMachineProfile(text, "again").value();
    EXPECT_EQ(FormatMachineProfile(q, ""), FormatMachineProfile(p, "")) << b.name;
    EXPECT_THAT(text, HasSubstr("# round trip\n# of "));
  }
}

TEST(MachineProfileTest, ErrorsNameTheFileAndLine) {
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "compute.peak_flop = 1\n")),
            "x.profile:15: unknown key 'compute.peak_flop' (did you mean "
            "'compute.peak_flops'?)");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "just words\n")),
            "x.profile:15: expected 'key = value', got 'just words'");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "compute.peak_flops = 2e12\n")),
            "x.profile:15: compute.peak_flops: given twice");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "efficiency.lienar = 0.5\n")),
            "x.profile:15: efficiency.lienar: 'lienar' is not an op or an op "
            "category (did you mean 'linear'?)");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "scale.matmul = 2\n")),
            "x.profile:15: scale.matmul: 'matmul' is not an op");
  EXPECT_EQ(ErrorOf(absl::StrCat(kMinimal, "compute.rank_imbalance = -1\n")),
            "x.profile:15: compute.rank_imbalance: must be >= 0, got -1");
}

TEST(MachineProfileTest, BadValues) {
  auto with = [](const std::string& key, const std::string& value) {
    std::string text = kMinimal;
    const size_t at = text.find(key);
    const size_t eq = text.find('=', at), end = text.find('\n', at);
    return ErrorOf(text.replace(eq + 1, end - eq - 1, " " + value));
  };
  EXPECT_EQ(with("compute.peak_flops", "fast"),
            "x.profile:3: compute.peak_flops: expected a number, got 'fast'");
  EXPECT_EQ(with("compute.memory_bandwidth", "0"),
            "x.profile:4: compute.memory_bandwidth: must be > 0, got 0");
  EXPECT_EQ(with("compute.host_synchronous", "yes"),
            "x.profile:6: compute.host_synchronous: expected true or false, got 'yes'");
  EXPECT_EQ(with("network.ranks_per_node", "0"),
            "x.profile:8: network.ranks_per_node: expected an integer >= 1, got '0'");
  EXPECT_EQ(with("network.all_reduce", "butterfly"),
            "x.profile:13: network.all_reduce: expected ring, tree, auto or "
            "whole_buffer_ring, got 'butterfly'");
  EXPECT_EQ(with("network.inter.alpha_us", "inf"),
            "x.profile:11: network.inter.alpha_us: expected a number, got 'inf'");
}

TEST(MachineProfileTest, MissingKeysAreListed) {
  std::string text = kMinimal;
  for (const char* key : {"network.reduce_bandwidth", "compute.peak_flops "}) {
    const size_t at = text.find(key);
    text.erase(at, text.find('\n', at) + 1 - at);
  }
  EXPECT_EQ(ErrorOf(text),
            "x.profile: missing compute.peak_flops, network.reduce_bandwidth");
}

TEST(MachineProfileTest, UnreadableFileIsNamed) {
  absl::StatusOr<MachineProfile> p = ReadMachineProfile("/no/such/dir/h100.profile");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "cannot read the machine profile '/no/such/dir/h100.profile': No such file or "
            "directory");
}

// A folder opens as an empty stream: it must be refused as a folder, not
// read as a profile with every key missing.
TEST(MachineProfileTest, FolderIsRefusedAsAFolder) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(CheckProfileFile(dir).message(), "it is a directory");
  absl::StatusOr<MachineProfile> p = ReadMachineProfile(dir);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            absl::StrCat("cannot read the machine profile '", dir, "': it is a directory"));
}

}  // namespace
}  // namespace trainc::cost
