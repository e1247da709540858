// The CUDA plugin loader: the real plugin from the runfiles, and the errors
// for a bad TRAINC_CUDA_PLUGIN, a shared object without the entry point and
// one of another ABI version.
#include "runtime/cuda/cuda_loader.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_device.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

std::string TestFile(const std::string& name) {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir != nullptr ? dir : ".") + "/trainc/runtime/cuda/" + name;
}

class CudaLoaderTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("TRAINC_CUDA_PLUGIN"); }
};

TEST_F(CudaLoaderTest, FindsThePluginInTheRunfilesAndReadsItsVersion) {
  unsetenv("TRAINC_CUDA_PLUGIN");
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPlugin();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->abi_version, TRAINC_CUDA_PLUGIN_ABI_VERSION);
  EXPECT_STREQ((*plugin)->toolchain, TRAINC_CUDA_PLUGIN_TOOLCHAIN);
  // Callable, never crashes; without a GPU it says why.
  const int count = (*plugin)->device_count();
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE((*plugin)->unavailable_reason().empty());
  }
}

TEST_F(CudaLoaderTest, EnvOverrideLoadsThatFile) {
  setenv("TRAINC_CUDA_PLUGIN", TestFile("libtrainc_cuda.so").c_str(), 1);
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPlugin();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->abi_version, TRAINC_CUDA_PLUGIN_ABI_VERSION);
}

TEST_F(CudaLoaderTest, MissingEnvOverrideNamesThePath) {
  setenv("TRAINC_CUDA_PLUGIN", "/nonexistent/dir/libtrainc_cuda.so", 1);
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPlugin();
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(plugin.status().message(),
              HasSubstr("TRAINC_CUDA_PLUGIN=/nonexistent/dir/libtrainc_cuda.so"));
}

TEST_F(CudaLoaderTest, NotASharedObjectGivesDlopensMessage) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") +
                           "/libtrainc_cuda_not_elf.so";
  std::ofstream(path) << "not an ELF file\n";
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPluginFrom(path);
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(plugin.status().message(), HasSubstr("cannot load the CUDA plugin"));
  EXPECT_THAT(plugin.status().message(), HasSubstr(path));
}

TEST_F(CudaLoaderTest, SharedObjectWithoutEntryPointNamesTheSymbol) {
  const std::string path = TestFile("libtrainc_cuda_test_no_entry.so");
  setenv("TRAINC_CUDA_PLUGIN", path.c_str(), 1);
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPlugin();
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(plugin.status().message(), HasSubstr("trainc_cuda_plugin_v2"));
  EXPECT_THAT(plugin.status().message(), HasSubstr(path));
}

TEST_F(CudaLoaderTest, OtherAbiVersionIsRefused) {
  const std::string path = TestFile("libtrainc_cuda_test_bad_abi.so");
  absl::StatusOr<const CudaPluginV2*> plugin = LoadCudaPluginFrom(path);
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(plugin.status().message(),
              HasSubstr(absl::StrCat("ABI version ", TRAINC_CUDA_PLUGIN_ABI_VERSION + 998)));
  EXPECT_THAT(plugin.status().message(),
              HasSubstr(absl::StrCat("expects ", TRAINC_CUDA_PLUGIN_ABI_VERSION)));
}

TEST_F(CudaLoaderTest, SearchPathStartsInTheRunfiles) {
  const std::vector<std::string> paths = CudaPluginSearchPath();
  ASSERT_FALSE(paths.empty());
  EXPECT_THAT(paths.front(), HasSubstr("/trainc/runtime/cuda/libtrainc_cuda.so"));
}

TEST_F(CudaLoaderTest, DeviceCountIsZeroWithAReasonOrPositive) {
  const int count = CudaDeviceCount();
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(CudaUnavailableReason().empty());
    EXPECT_FALSE(CreateCudaDevice(0).ok());
  } else {
    EXPECT_EQ(CudaUnavailableReason(), "");
  }
}

}  // namespace
}  // namespace trainc
