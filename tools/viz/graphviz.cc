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

absl::StatusOr<std::string> FindProgram(const std::string& name,
                                        const char* env_override,
                                        const std::string& how_to_get) {
  if (const char* env = std::getenv(env_override); env && *env) {
    if (IsExecutable(env)) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat(env_override, "=", env, " is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (IsExecutable(candidate)) return candidate;
  }
  return absl::NotFoundError(how_to_get);
}

// Runs `program <flag> -o OUT IN` on `input` and returns OUT's contents.
absl::StatusOr<std::string> RunConverter(const std::string& program,
                                         const std::vector<std::string>& flags,
                                         const std::string& input) {
  TempFile in, out, err;
  if (in.path().empty() || out.path().empty() || err.path().empty()) {
    return absl::InternalError(
        absl::StrCat("cannot create a temporary file for ", program));
  }
  RETURN_IF_ERROR(WriteStringToFile(in.path(), input));
  std::vector<std::string> args = {program};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("-o"), out.path(), in.path()}) {
    args.push_back(a);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Files rather than pipes: dot reads all input before writing, and a
  // large graph would otherwise need a poll loop to avoid a deadlock.
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int efd = open(err.path().c_str(), O_WRONLY | O_TRUNC);
    if (efd >= 0) dup2(efd, 2);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    absl::StatusOr<std::string> msg = ReadFileToString(err.path());
    return absl::InternalError(absl::StrCat(
        program, " ", flags.empty() ? "" : flags[0], " failed (status ", status,
        "): ", msg.ok() ? *msg : std::string("no message")));
  }
  return ReadFileToString(out.path());
}

}  // namespace

absl::StatusOr<std::string> FindDot() {
  return FindProgram("dot", "TRAINC_DOT",
                     "Graphviz 'dot' was not found on PATH: install graphviz "
                     "(apt-get install graphviz) for .svg/.png output, or write "
                     ".dot with -o FILE.dot");
}

absl::StatusOr<std::string> RenderDot(const std::string& dot_text,
                                      const std::string& format) {
  ASSIGN_OR_RETURN(std::string dot, FindDot());
  return RunConverter(dot, {absl::StrCat("-T", format)}, dot_text);
}

absl::StatusOr<std::string> RenderSvgToPng(const std::string& svg) {
  ASSIGN_OR_RETURN(
      std::string rsvg,
      FindProgram("rsvg-convert", "TRAINC_RSVG_CONVERT",
                  "'rsvg-convert' was not found on PATH: install librsvg2-bin "
                  "(apt-get install librsvg2-bin) for the curves as .png, or "
                  "write .svg"));
  return RunConverter(rsvg, {"--format=png"}, svg);
}

}  // namespace trainc::viz
