#include "runtime/store/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace trainc {

using store::FrameReader;
using store::FrameWriter;
using store::Op;

namespace {

// An unauthenticated client's frame is its proof: a few dozen bytes.
constexpr size_t kMaxAuthFrameBytes = 256;
// A refused client gets this long to read why before the socket closes.
constexpr absl::Duration kLinger = absl::Seconds(1);

struct Conn {
  int fd = -1;
  bool authed = false;
  bool dead = false;
  bool closing = false;   // close once `out` is written (and the peer is done)
  bool shut = false;      // closing: our side shut down
  uint32_t rank = 0;
  std::string nonce;      // the server's, sent in the greeting
  std::string in, out;
  absl::Time opened;
  absl::Time frame_began = absl::InfinitePast();  // a partial frame since
  absl::Time out_since = absl::InfinitePast();    // unwritten bytes since
  absl::Time close_by = absl::InfiniteFuture();
  bool waiting = false;
  std::vector<std::string> wait_keys;
  absl::Time wait_until;
};

// The addresses `host`:`port` names (numeric or resolved).
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ": ", ::gai_strerror(rc)));
  }
  return list;
}

absl::StatusOr<int> Listen(const std::string& host, int port) {
  absl::StatusOr<addrinfo*> list = Resolve(host, port);
  if (!list.ok()) return list.status();
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = *list; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      why = std::strerror(errno);
      if (errno == EADDRNOTAVAIL) why += " (not an address of this machine)";
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(*list);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the job's store on ", host, ":", port, ": ", why));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(const StoreServerOptions& options, int listen_fd, int wake_read, int wake_write)
      : options_(options), listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write) {}
  ~Loop() {
    for (Conn& c : conns_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  void Run();
  void Stop() {
    const char byte = 1;
    while (::write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
    }
  }
  StoreServerStats stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  bool WaitForClientsToLeave(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(
                                    +[](const int* clients) { return *clients == 0; }, &clients_),
                                timeout);
  }

 private:
  void Count(int64_t StoreServerStats::*counter) {
    absl::MutexLock lock(&mu_);
    ++(stats_.*counter);
  }
  void Accept(absl::Time now);
  void Read(Conn& c, absl::Time now);
  void Write(Conn& c, absl::Time now);
  void Process(Conn& c, absl::Time now);
  void Handle(Conn& c, absl::string_view body, absl::Time now);
  void Authenticate(Conn& c, FrameReader& r, absl::Time now);
  void Serve(Conn& c, Op op, FrameReader& r, absl::Time now);
  void Reply(Conn& c, const FrameWriter& frame, absl::Time now);
  void Refuse(Conn& c, int64_t StoreServerStats::*counter, const std::string& why,
              absl::Time now);
  void WakeWaiters(absl::Time now);
  void Expire(absl::Time now);
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;
  int PollTimeoutMs(absl::Time now) const;

  const StoreServerOptions options_;
  const int listen_fd_, wake_read_, wake_write_;
  std::list<Conn> conns_;
  absl::flat_hash_map<std::string, std::string> values_;
  size_t bytes_ = 0;  // keys and values held
  absl::Time accept_again_ = absl::InfinitePast();  // out of descriptors until then
  mutable absl::Mutex mu_;
  StoreServerStats stats_ ABSL_GUARDED_BY(mu_);
  int clients_ ABSL_GUARDED_BY(mu_) = 0;  // authenticated, connected
};

void StoreServer::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<Conn*> polled;
  while (true) {
    absl::Time now = absl::Now();
    fds.clear();
    polled.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(now >= accept_again_ ? POLLIN : 0), 0});
    for (Conn& c : conns_) {
      // More than a frame unread waits in the kernel (see Read).
      short events =
          c.closing || c.in.size() <= options_.limits.max_frame_bytes() + 4 ? POLLIN : 0;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      polled.push_back(&c);
    }
    const int ready = ::poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (ready < 0 && errno != EINTR) return;
    now = absl::Now();
    if (fds[0].revents != 0) return;  // Stop()
    if (fds[1].revents & POLLIN) Accept(now);
    for (size_t i = 0; i < polled.size(); ++i) {
      Conn& c = *polled[i];
      const short revents = fds[i + 2].revents;
      if (revents & (POLLERR | POLLNVAL)) {
        c.dead = true;
      } else if (revents & POLLIN) {
        Read(c, now);
      } else if (revents & POLLHUP) {
        c.dead = true;  // gone, with nothing (or nothing we read) left
      }
      if (!c.dead && !c.out.empty()) Write(c, now);
    }
    Expire(now);
    int clients = 0;
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->dead) {
        ::close(it->fd);
        it = conns_.erase(it);
      } else {
        clients += it->authed && !it->closing ? 1 : 0;
        ++it;
      }
    }
    absl::MutexLock lock(&mu_);
    clients_ = clients;
  }
}

int StoreServer::Loop::PollTimeoutMs(absl::Time now) const {
  absl::Time next = now + absl::Seconds(1);
  if (accept_again_ > now) next = std::min(next, accept_again_);
  for (const Conn& c : conns_) {
    if (!c.authed) next = std::min(next, c.opened + options_.auth_timeout);
    if (c.frame_began != absl::InfinitePast()) {
      next = std::min(next, c.frame_began + options_.frame_timeout);
    }
    if (c.out_since != absl::InfinitePast()) {
      next = std::min(next, c.out_since + options_.frame_timeout);
    }
    if (c.waiting) next = std::min(next, c.wait_until);
    if (c.closing) next = std::min(next, c.close_by);
  }
  return static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(next - now) + 1));
}

void StoreServer::Loop::Accept(absl::Time now) {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: leave the backlog for a moment rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_again_ = now + absl::Milliseconds(100);
      }
      return;
    }
    int pending = 0;
    Conn* oldest = nullptr;
    for (Conn& c : conns_) {
      if (c.authed || c.dead || c.closing) continue;
      ++pending;
      if (oldest == nullptr || c.opened < oldest->opened) oldest = &c;
    }
    if (pending >= options_.max_pending && oldest != nullptr) {
      // A flood of silent connections cannot keep a rank out: the one that
      // waited longest goes.
      oldest->dead = true;
      Count(&StoreServerStats::turned_away);
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn& c = conns_.emplace_back();
    c.fd = fd;
    c.opened = now;
    c.nonce = store::RandomBytes(store::kNonceBytes);
    c.out = std::string(store::kMagic, store::kMagicBytes) + c.nonce;
    c.out_since = now;
    Write(c, now);
  }
}

void StoreServer::Loop::Read(Conn& c, absl::Time now) {
  char buffer[65536];
  while (!c.dead) {
    // A client waits for each answer: more than a frame unread is not one.
    if (!c.closing && c.in.size() > options_.limits.max_frame_bytes() + 4) break;
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {
      c.dead = true;
    } else if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      break;
    } else if (!c.closing) {
      c.in.append(buffer, static_cast<size_t>(n));
    }
  }
  if (!c.dead) Process(c, now);
}

void StoreServer::Loop::Write(Conn& c, absl::Time now) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
    c.out_since = now;
  }
  c.out_since = absl::InfinitePast();
  if (c.closing && !c.shut) {
    ::shutdown(c.fd, SHUT_WR);  // the peer reads the error, then EOF
    c.shut = true;
  }
}

void StoreServer::Loop::Process(Conn& c, absl::Time now) {
  while (!c.dead && !c.closing && !c.waiting) {
    if (c.in.empty()) {
      c.frame_began = absl::InfinitePast();
      return;
    }
    if (c.frame_began == absl::InfinitePast()) c.frame_began = now;
    if (c.in.size() < 4) return;
    const uint32_t length = store::ReadU32(c.in.data());
    const size_t limit = c.authed ? options_.limits.max_frame_bytes() : kMaxAuthFrameBytes;
    if (length == 0 || length > limit) {
      Refuse(c, &StoreServerStats::oversized,
             absl::StrCat("a frame of ", length, " bytes (the limit is ", limit, ")"), now);
      return;
    }
    if (c.in.size() < 4 + size_t{length}) return;
    const std::string body = c.in.substr(4, length);
    c.in.erase(0, 4 + size_t{length});
    c.frame_began = absl::InfinitePast();
    Handle(c, body, now);
  }
}

void StoreServer::Loop::Handle(Conn& c, absl::string_view body, absl::Time now) {
  FrameReader r(body);
  uint8_t op = 0;
  r.U8(&op);
  if (!c.authed) {
    if (static_cast<Op>(op) != Op::kAuth) {
      Refuse(c, &StoreServerStats::malformed, "a request before the job's token", now);
      return;
    }
    Authenticate(c, r, now);
    return;
  }
  Serve(c, static_cast<Op>(op), r, now);
}

void StoreServer::Loop::Authenticate(Conn& c, FrameReader& r, absl::Time now) {
  uint32_t rank = 0;
  std::string client_nonce, proof;
  if (!r.U32(&rank) || !r.Bytes(store::kNonceBytes, &client_nonce) ||
      !r.Bytes(store::kProofBytes, &proof) || !r.done()) {
    Refuse(c, &StoreServerStats::malformed, "a malformed token", now);
    return;
  }
  if (!store::SameBytes(proof, store::Proof(options_.key, "client", c.nonce, client_nonce, rank))) {
    Refuse(c, &StoreServerStats::wrong_tokens, "a token that is not this job's", now);
    return;
  }
  int clients = 0;
  for (const Conn& other : conns_) clients += other.authed && !other.dead ? 1 : 0;
  if (clients >= options_.max_clients) {
    Refuse(c, &StoreServerStats::turned_away,
           absl::StrCat("more than ", options_.max_clients, " clients"), now);
    return;
  }
  c.authed = true;
  c.rank = rank;
  Reply(c, FrameWriter(Op::kOk).Bytes(store::Proof(options_.key, "server", c.nonce,
                                                   client_nonce, rank)),
        now);
}

void StoreServer::Loop::Serve(Conn& c, Op op, FrameReader& r, absl::Time now) {
  const store::Limits& limits = options_.limits;
  std::string key, value;
  std::vector<std::string> keys;
  auto read_keys = [&] {
    uint32_t n = 0;
    if (!r.U32(&n) || n == 0 || n > limits.max_keys) return false;
    keys.resize(n);
    for (std::string& k : keys) {
      if (!r.String(limits.max_key_bytes, &k)) return false;
    }
    return true;
  };
  bool ok = false;
  uint32_t timeout_ms = 0;
  switch (op) {
    case Op::kSet:
      ok = r.String(limits.max_key_bytes, &key) && r.String(limits.max_value_bytes, &value);
      break;
    case Op::kGet:
      ok = r.String(limits.max_key_bytes, &key);
      break;
    case Op::kWait:
      ok = r.U32(&timeout_ms) && read_keys();
      break;
    case Op::kCheck:
      ok = read_keys();
      break;
    default:
      break;
  }
  if (!ok || !r.done()) {
    Refuse(c, &StoreServerStats::malformed, "a malformed request", now);
    return;
  }
  Count(&StoreServerStats::served);
  if (op == Op::kSet) {
    auto it = values_.find(key);
    const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
    if (bytes_ - old + key.size() + value.size() > options_.max_store_bytes) {
      Reply(c, FrameWriter(Op::kError).String(absl::StrCat(
                   "the store is full (", options_.max_store_bytes, " bytes)")),
            now);
      return;
    }
    bytes_ = bytes_ - old + key.size() + value.size();
    values_[key] = std::move(value);
    Reply(c, FrameWriter(Op::kOk), now);
    WakeWaiters(now);
  } else if (op == Op::kGet) {
    auto it = values_.find(key);
    Reply(c, it == values_.end() ? FrameWriter(Op::kNotFound)
                                 : FrameWriter(Op::kValue).String(it->second),
          now);
  } else if (op == Op::kCheck) {
    Reply(c, FrameWriter(Op::kOk).U8(Missing(keys).empty() ? 1 : 0), now);
  } else if (Missing(keys).empty()) {
    Reply(c, FrameWriter(Op::kOk), now);
  } else {
    c.waiting = true;
    c.wait_keys = std::move(keys);
    c.wait_until = now + absl::Milliseconds(timeout_ms);
  }
}

std::vector<std::string> StoreServer::Loop::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!values_.contains(k)) missing.push_back(k);
  }
  return missing;
}

void StoreServer::Loop::Reply(Conn& c, const FrameWriter& frame, absl::Time now) {
  if (c.out.empty()) c.out_since = now;
  c.out += frame.Frame();
}

void StoreServer::Loop::Refuse(Conn& c, int64_t StoreServerStats::*counter,
                               const std::string& why, absl::Time now) {
  Count(counter);
  Reply(c, FrameWriter(Op::kError).String(absl::StrCat("refused: ", why)), now);
  c.closing = true;
  c.waiting = false;
  c.in.clear();
  c.frame_began = absl::InfinitePast();
  c.close_by = now + kLinger;
}

void StoreServer::Loop::WakeWaiters(absl::Time now) {
  for (Conn& c : conns_) {
    if (!c.waiting || !Missing(c.wait_keys).empty()) continue;
    c.waiting = false;
    Reply(c, FrameWriter(Op::kOk), now);
    Process(c, now);
  }
}

void StoreServer::Loop::Expire(absl::Time now) {
  for (Conn& c : conns_) {
    if (c.dead) continue;
    if (c.closing) {
      if (now >= c.close_by) c.dead = true;
    } else if (!c.authed && now >= c.opened + options_.auth_timeout) {
      Count(&StoreServerStats::timed_out);
      c.dead = true;
    } else if (c.frame_began != absl::InfinitePast() &&
               now >= c.frame_began + options_.frame_timeout) {
      Refuse(c, &StoreServerStats::timed_out, "a frame not finished in time", now);
    } else if (c.waiting && now >= c.wait_until) {
      c.waiting = false;
      FrameWriter timeout(Op::kTimeout);
      const std::vector<std::string> missing = Missing(c.wait_keys);
      timeout.U32(static_cast<uint32_t>(missing.size()));
      for (const std::string& k : missing) timeout.String(k);
      Reply(c, timeout, now);
      Process(c, now);
    }
    // A client that does not read its answers is not let to hold them.
    if (c.out_since != absl::InfinitePast() && now >= c.out_since + options_.frame_timeout) {
      c.dead = true;
    }
  }
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const StoreServerOptions& options) {
  absl::StatusOr<int> fd = Listen(options.host, options.port);
  if (!fd.ok()) return fd.status();
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(*fd);
    return absl::InternalError(absl::StrCat("store: pipe: ", std::strerror(errno)));
  }
  const int port = BoundPort(*fd);
  return std::unique_ptr<StoreServer>(
      new StoreServer(std::make_unique<Loop>(options, *fd, wake[0], wake[1]), port));
}

StoreServer::StoreServer(std::unique_ptr<Loop> loop, int port)
    : loop_(std::move(loop)), port_(port), thread_([this] { loop_->Run(); }) {}

StoreServer::~StoreServer() {
  loop_->Stop();
  thread_.join();
}

StoreServerStats StoreServer::stats() const { return loop_->stats(); }

bool StoreServer::WaitForClientsToLeave(absl::Duration timeout) const {
  return loop_->WaitForClientsToLeave(timeout);
}

}  // namespace trainc
