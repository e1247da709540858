#include "tools/viz/graphviz.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/util/status_macros.h"
#include "tools/viz/file_util.h"

namespace trainc::viz {
namespace {

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// A temporary file that removes itself.
class TempFile {
 public:
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    path_ = absl::StrCat(dir && *dir ? dir : "/tmp", "/trainc_viz_XXXXXX");
    int fd = mkstemp(path_.data());
    if (fd >= 0) {
      close(fd);
    } else {
      path_.clear();
    }
  }
  ~TempFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<std::string> FindDot() {
  if (const char* env = std::getenv("TRAINC_DOT"); env && *env) {
    if (IsExecutable(env)) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat("TRAINC_DOT=", env, " is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/dot");
    if (IsExecutable(candidate)) return candidate;
  }
  return absl::NotFoundError(
      "Graphviz 'dot' was not found on PATH: install graphviz "
      "(apt-get install graphviz) for .svg/.png output, or write .dot "
      "with -o FILE.dot");
}

absl::StatusOr<std::string> RenderDot(const std::string& dot_text,
                                      const std::string& format) {
  ASSIGN_OR_RETURN(std::string dot, FindDot());
  TempFile in, out, err;
  if (in.path().empty() || out.path().empty() || err.path().empty()) {
    return absl::InternalError("cannot create a temporary file for dot");
  }
  RETURN_IF_ERROR(WriteStringToFile(in.path(), dot_text));
  // Files rather than pipes: dot reads all input before writing, and a
  // large graph would otherwise need a poll loop to avoid a deadlock.
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int efd = open(err.path().c_str(), O_WRONLY | O_TRUNC);
    if (efd >= 0) dup2(efd, 2);
    std::string tflag = absl::StrCat("-T", format);
    execl(dot.c_str(), dot.c_str(), tflag.c_str(), "-o", out.path().c_str(),
          in.path().c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    absl::StatusOr<std::string> msg = ReadFileToString(err.path());
    return absl::InternalError(absl::StrCat(
        dot, " -T", format, " failed (status ", status, "): ",
        msg.ok() ? *msg : std::string("no message")));
  }
  return ReadFileToString(out.path());
}

}  // namespace trainc::viz
