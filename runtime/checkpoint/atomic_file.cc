#include "runtime/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const char* data, size_t n,
                      const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write failed", path);
    }
    data += w;
    n -= w;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> WriteTemporaryFile(
    const std::string& path,
    const std::function<absl::Status(int fd, const std::string& tmp)>& write) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return ErrnoError("cannot create a temporary file", tmp);
  absl::Status status = write(fd, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("fsync failed", tmp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("close failed", tmp);
  // mkstemp creates 0600; a checkpoint is an ordinary file.
  if (status.ok() && ::chmod(tmp.c_str(), 0644) != 0) {
    status = ErrnoError("chmod failed", tmp);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return tmp;
}

absl::Status CommitTemporaryFile(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename the temporary file into place", path);
    ::unlink(tmp.c_str());
    return status;
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (dir.empty()) dir = "/";
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  ASSIGN_OR_RETURN(const std::string tmp,
                   WriteTemporaryFile(path, [&](int fd, const std::string& tmp) {
                     return WriteAll(fd, bytes.data(), bytes.size(), tmp);
                   }));
  return CommitTemporaryFile(tmp, path);
}

}  // namespace trainc
