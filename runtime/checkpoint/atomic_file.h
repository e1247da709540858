// Files written whole, then renamed into place (fsynced), so a reader never
// sees half a file and a failed write leaves the previous one: checkpoints,
// token shards.
//
//   RETURN_IF_ERROR(WriteFileAtomically("train.bin", bytes));
#ifndef TRAINC_RUNTIME_CHECKPOINT_ATOMIC_FILE_H_
#define TRAINC_RUNTIME_CHECKPOINT_ATOMIC_FILE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainc {

// "path: what: strerror(errno)".
absl::Status ErrnoError(const std::string& what, const std::string& path);

// Writes n bytes to fd (retrying short writes); errors name `path`.
absl::Status WriteAll(int fd, const char* data, size_t n, const std::string& path);

// Writes a whole temporary file beside `path` (`write` fills the open file
// descriptor), fsynced, and returns its name; nothing is renamed yet.
absl::StatusOr<std::string> WriteTemporaryFile(
    const std::string& path,
    const std::function<absl::Status(int fd, const std::string& tmp)>& write);

// Renames a finished temporary file into place, durably.
absl::Status CommitTemporaryFile(const std::string& tmp, const std::string& path);

// `bytes` as the whole of `path`, through a temporary file.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CHECKPOINT_ATOMIC_FILE_H_
