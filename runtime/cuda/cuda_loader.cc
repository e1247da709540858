#include "runtime/cuda/cuda_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {
namespace {

constexpr char kPluginName[] = "libtrainc_cuda.so";
// The plugin inside the workspace (and so inside a runfiles tree).
constexpr char kPluginPackagePath[] = "runtime/cuda/libtrainc_cuda.so";
constexpr char kWorkspace[] = "trainc";
constexpr char kEnvOverride[] = "TRAINC_CUDA_PLUGIN";

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

std::vector<std::string> CudaPluginSearchPath() {
  std::vector<std::string> paths;
  const std::string in_runfiles = absl::StrCat("/", kWorkspace, "/", kPluginPackagePath);
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    const char* dir = std::getenv(var);
    if (dir != nullptr && *dir != '\0') paths.push_back(dir + in_runfiles);
  }
  const std::string exe = SelfExe();
  if (!exe.empty()) {
    paths.push_back(exe + ".runfiles" + in_runfiles);
    std::string dir = Dirname(exe);
    paths.push_back(absl::StrCat(dir, "/", kPluginName));
    // bazel-bin/<package>/<binary>: up to the root of bazel-bin.
    for (int up = 0; up < 8 && dir != "/"; ++up) {
      paths.push_back(absl::StrCat(dir, "/", kPluginPackagePath));
      dir = Dirname(dir);
    }
  }
  return paths;
}

absl::StatusOr<const CudaPluginV2*> LoadCudaPluginFrom(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: cannot load the CUDA plugin ", path, ": ", DlError()));
  }
  dlerror();
  void* entry = dlsym(handle, TRAINC_CUDA_PLUGIN_SYMBOL);
  if (entry == nullptr) {
    const std::string why = DlError();
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda: ", path, " is not a trainc CUDA plugin: no symbol ",
        TRAINC_CUDA_PLUGIN_SYMBOL, " (", why, ")"));
  }
  using EntryFn = const CudaPluginV2* (*)();
  const CudaPluginV2* plugin = reinterpret_cast<EntryFn>(entry)();
  if (plugin == nullptr || plugin->abi_version != TRAINC_CUDA_PLUGIN_ABI_VERSION) {
    const int version = plugin == nullptr ? 0 : plugin->abi_version;
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda: the CUDA plugin ", path, " has ABI version ", version,
        " but this program expects ", TRAINC_CUDA_PLUGIN_ABI_VERSION,
        "; build both from the same tree"));
  }
  if (plugin->toolchain == nullptr ||
      std::strcmp(plugin->toolchain, TRAINC_CUDA_PLUGIN_TOOLCHAIN) != 0) {
    const std::string theirs = plugin->toolchain ? plugin->toolchain : "(none)";
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda: the CUDA plugin ", path, " was built by '", theirs,
        "' but this program by '", TRAINC_CUDA_PLUGIN_TOOLCHAIN,
        "'; build both from the same tree"));
  }
  // Loaded for good: the plugin's objects live until the process ends.
  return plugin;
}

absl::StatusOr<const CudaPluginV2*> LoadCudaPlugin() {
  const char* override_path = std::getenv(kEnvOverride);
  if (override_path != nullptr && *override_path != '\0') {
    if (!IsFile(override_path)) {
      return absl::NotFoundError(absl::StrCat(
          "cuda: ", kEnvOverride, "=", override_path, ": no such file"));
    }
    return LoadCudaPluginFrom(override_path);
  }
  const std::vector<std::string> paths = CudaPluginSearchPath();
  for (const std::string& path : paths) {
    if (IsFile(path)) return LoadCudaPluginFrom(path);
  }
  return absl::NotFoundError(absl::StrCat(
      "cuda: the CUDA plugin ", kPluginName, " was not found (looked for ",
      absl::StrJoin(paths, ", "), "); build it with the program (bazel build "
      "//runtime/cuda:", kPluginName, ") or set ", kEnvOverride, " to its path"));
}

absl::StatusOr<const CudaPluginV2*> CudaPlugin() {
  static const auto* const loaded =
      new absl::StatusOr<const CudaPluginV2*>(LoadCudaPlugin());
  return *loaded;
}

absl::Status CudaDriverPresent() {
  dlerror();
  // Kept open: cudart would load it again at once.
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no NVIDIA driver (", DlError(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace trainc
