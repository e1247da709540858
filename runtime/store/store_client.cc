#include "runtime/store/store_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {

using store::FrameReader;
using store::FrameWriter;
using store::Op;

namespace {

int MillisUntil(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms + 1, 1 << 30)));
}

// Waits for `events` on fd until the deadline: false when it passed.
bool PollUntil(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, MillisUntil(deadline));
    if (ready > 0) return true;
    if (ready == 0 && absl::Now() >= deadline) return false;
    if (ready < 0 && errno != EINTR) return false;
  }
}

absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    } else if (n < 0 && errno != EINTR && !PollUntil(fd, POLLOUT, deadline)) {
      return absl::DeadlineExceededError("no room to send before the deadline");
    }
  }
  return absl::OkStatus();
}

// Exactly n bytes; an error on end of stream or past the deadline.
absl::Status RecvExact(int fd, size_t n, absl::Time deadline, std::string* out) {
  out->clear();
  char buffer[65536];
  while (out->size() < n) {
    const ssize_t got = ::recv(fd, buffer, std::min(sizeof(buffer), n - out->size()), 0);
    if (got > 0) {
      out->append(buffer, static_cast<size_t>(got));
    } else if (got == 0) {
      return absl::UnavailableError(out->empty() ? "the connection was closed"
                                                 : "the connection was closed mid-answer");
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    } else if (errno != EINTR && !PollUntil(fd, POLLIN, deadline)) {
      return absl::DeadlineExceededError("no answer before the deadline");
    }
  }
  return absl::OkStatus();
}

// One frame's body, of at most `max` bytes.
absl::Status RecvFrame(int fd, size_t max, absl::Time deadline, std::string* body) {
  std::string head;
  if (absl::Status s = RecvExact(fd, 4, deadline, &head); !s.ok()) return s;
  const uint32_t length = store::ReadU32(head.data());
  if (length == 0 || length > max) {
    return absl::DataLossError(absl::StrCat("an answer of ", length, " bytes"));
  }
  return RecvExact(fd, length, deadline, body);
}

// A TCP connection to host:port, or the reason there is none (errno's
// words: "Connection refused").
absl::StatusOr<int> ConnectOnce(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot resolve: ", ::gai_strerror(rc)));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = list; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int error = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        socklen_t length = sizeof(error);
        error = PollUntil(fd, POLLOUT, deadline) &&
                        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0
                    ? error
                    : ETIMEDOUT;
      }
    }
    if (error != 0) {
      why = std::strerror(error);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(list);
  if (fd < 0) return absl::UnavailableError(why);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Bytes as they would print (a foreign service's greeting).
std::string Printable(absl::string_view bytes) {
  return absl::CHexEscape(bytes.substr(0, 32));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Connect(
    const StoreClientOptions& options) {
  const std::string address = absl::StrCat(options.host, ":", options.port);
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::string last;
  while (true) {
    absl::StatusOr<int> fd = ConnectOnce(options.host, options.port, deadline);
    if (fd.ok()) {
      std::string greeting;
      const absl::Status greeted = RecvExact(
          *fd, store::kMagicBytes + store::kNonceBytes, absl::Now() + options.greeting_timeout, &greeting);
      if (absl::IsDeadlineExceeded(greeted) ||
          (!greeting.empty() && greeting.compare(0, store::kMagicBytes, store::kMagic) != 0)) {
        ::close(*fd);
        return absl::FailedPreconditionError(absl::StrCat(
            "the program listening on ", address, " is not a trainc job store (",
            greeting.empty() ? absl::StrCat("it said nothing within ",
                                            absl::FormatDuration(options.greeting_timeout))
                             : absl::StrCat("it said \"", Printable(greeting), "\""),
            "): another service holds that port"));
      }
      if (greeted.ok()) {
        std::unique_ptr<StoreClient> client(new StoreClient(*fd, options));
        const std::string client_nonce = store::RandomBytes(store::kNonceBytes);
        const std::string server_nonce = greeting.substr(store::kMagicBytes);
        const uint32_t rank = static_cast<uint32_t>(options.rank);
        absl::MutexLock lock(&client->mu_);
        absl::StatusOr<std::string> answer = client->Call(
            FrameWriter(Op::kAuth)
                .U32(rank)
                .Bytes(client_nonce)
                .Bytes(store::Proof(options.key, "client", server_nonce, client_nonce, rank))
                .Frame(),
            absl::ZeroDuration());
        if (!answer.ok() && !absl::IsFailedPrecondition(answer.status())) {
          return answer.status();  // the connection failed mid-way
        }
        if (!answer.ok()) {
          absl::string_view why = answer.status().message();
          absl::ConsumePrefix(&why, "refused: ");
          return absl::PermissionDeniedError(absl::StrCat(
              "the job's store at ", address, " refused rank ", options.rank, " (", why,
              "): the token comes from the job id and TRAINC_JOB_SECRET (else the plan); "
              "this rank is of another job, or was started with another secret or plan"));
        }
        const std::string expected =
            store::Proof(options.key, "server", server_nonce, client_nonce, rank);
        if (answer->size() != 1 + store::kProofBytes || static_cast<Op>((*answer)[0]) != Op::kOk ||
            !store::SameBytes(answer->substr(1), expected)) {
          return absl::PermissionDeniedError(absl::StrCat(
              "the store at ", address, " does not hold this job's token: it serves "
              "another job (or another secret or plan); rank ", options.rank,
              " tells it nothing"));
        }
        return client;
      }
      ::close(*fd);  // closed before greeting: too busy; try again
      last = std::string(greeted.message());
    } else {
      last = std::string(fd.status().message());
    }
    if (absl::Now() + absl::Milliseconds(100) >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no job store answered at ", address, " within ",
      absl::FormatDuration(options.connect_timeout), " (", last,
      "): rank 0 serves it there; did rank 0 start, with the same address and port?"));
}

StoreClient::~StoreClient() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
}

std::string StoreClient::address() const {
  return absl::StrCat(options_.host, ":", options_.port);
}

absl::StatusOr<std::string> StoreClient::Call(const std::string& frame,
                                              absl::Duration extra_wait) {
  if (fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("the job's store at ", address(), ": the connection was lost earlier"));
  }
  const absl::Time deadline = absl::Now() + options_.io_timeout + extra_wait;
  std::string body;
  absl::Status status = SendAll(fd_, frame, deadline);
  if (status.ok()) status = RecvFrame(fd_, options_.limits.max_frame_bytes(), deadline, &body);
  if (!status.ok()) {
    ::close(fd_);
    fd_ = -1;
    return absl::UnavailableError(
        absl::StrCat("the job's store at ", address(), ": ", status.message()));
  }
  if (static_cast<Op>(body[0]) == Op::kError) {
    FrameReader r(absl::string_view(body).substr(1));
    std::string why;
    r.String(body.size(), &why);
    return absl::FailedPreconditionError(why);
  }
  return body;
}

absl::Status StoreClient::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> answer =
      Call(FrameWriter(Op::kSet).String(key).String(value).Frame(), absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> StoreClient::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> answer =
      Call(FrameWriter(Op::kGet).String(key).Frame(), absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  if (static_cast<Op>((*answer)[0]) == Op::kNotFound) return std::optional<std::string>();
  FrameReader r(absl::string_view(*answer).substr(1));
  std::string value;
  if (static_cast<Op>((*answer)[0]) != Op::kValue || !r.String(answer->size(), &value)) {
    return absl::DataLossError(absl::StrCat("the job's store at ", address(),
                                            ": a malformed answer to get ", key));
  }
  return std::optional<std::string>(std::move(value));
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  FrameWriter request(Op::kWait);
  request.U32(static_cast<uint32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, UINT32_MAX)));
  request.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) request.String(k);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> answer = Call(request.Frame(), timeout);
  if (!answer.ok()) return answer.status();
  if (static_cast<Op>((*answer)[0]) == Op::kOk) return absl::OkStatus();
  FrameReader r(absl::string_view(*answer).substr(1));
  uint32_t n = 0;
  std::vector<std::string> missing;
  if (static_cast<Op>((*answer)[0]) == Op::kTimeout && r.U32(&n)) {
    std::string k;
    while (missing.size() < n && r.String(answer->size(), &k)) missing.push_back(k);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Wait timeout for key(s): ", absl::StrJoin(missing, ", "), " (the job's store at ",
      address(), ", after ", absl::FormatDuration(timeout), ")"));
}

absl::StatusOr<bool> StoreClient::Check(const std::vector<std::string>& keys) {
  FrameWriter request(Op::kCheck);
  request.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) request.String(k);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> answer = Call(request.Frame(), absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  return answer->size() == 2 && (*answer)[1] == 1;
}

}  // namespace trainc
