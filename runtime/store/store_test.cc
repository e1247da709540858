// The job store's server and client over real loopback sockets, and what a
// hostile or broken peer does to it: each case ends with a good client
// still served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/store/store_client.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/store_server.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using store::FrameWriter;
using store::Op;

const std::string kKey = store::JobKey("secret", "job-1");

StoreServerOptions ServerOptions() {
  StoreServerOptions options;
  options.key = kKey;
  options.auth_timeout = absl::Milliseconds(500);
  options.frame_timeout = absl::Milliseconds(500);
  return options;
}

std::unique_ptr<StoreServer> StartServer(const StoreServerOptions& options = ServerOptions()) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

StoreClientOptions ClientOptions(const StoreServer& server, int rank = 0) {
  StoreClientOptions options;
  options.port = server.port();
  options.key = kKey;
  options.rank = rank;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

std::unique_ptr<StoreClient> Connect(const StoreServer& server, int rank = 0) {
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(ClientOptions(server, rank));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// After whatever a test did to it, the server still serves a good client.
void ExpectServes(const StoreServer& server) {
  std::unique_ptr<StoreClient> client = Connect(server, 7);
  ASSERT_NE(client, nullptr);
  const std::string key = absl::StrCat("still-", absl::ToUnixNanos(absl::Now()));
  ASSERT_TRUE(client->Set(key, "served").ok());
  absl::StatusOr<std::optional<std::string>> got = client->Get(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value_or(""), "served");
}

// A TCP connection of the test's own, speaking (or not) the protocol.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Raw() { ::close(fd_); }
  bool connected() const { return connected_; }

  void Send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Everything until the server closes the connection (or 30 s pass: the
  // test then fails on what it got).
  std::string ReadToEnd() {
    std::string all;
    char buffer[4096];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0) return all + "<still open>";
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return all;
      all.append(buffer, static_cast<size_t>(n));
    }
  }
  std::string Read(size_t n) {
    std::string got;
    char buffer[4096];
    while (got.size() < n) {
      const ssize_t r = ::recv(fd_, buffer, std::min(sizeof(buffer), n - got.size()), 0);
      if (r <= 0) break;
      got.append(buffer, static_cast<size_t>(r));
    }
    return got;
  }
  // Reads the greeting and proves `key`; true when let in.
  bool Authenticate(const std::string& key) {
    const std::string greeting = Read(store::kMagicBytes + store::kNonceBytes);
    if (greeting.size() != store::kMagicBytes + store::kNonceBytes) return false;
    const std::string client_nonce(store::kNonceBytes, 'c');
    Send(FrameWriter(Op::kAuth)
             .U32(3)
             .Bytes(client_nonce)
             .Bytes(store::Proof(key, "client", greeting.substr(store::kMagicBytes),
                                 client_nonce, 3))
             .Frame());
    const std::string answer = Read(4 + 1 + store::kProofBytes);
    return answer.size() == 4 + 1 + store::kProofBytes &&
           static_cast<Op>(answer[4]) == Op::kOk;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(StoreTest, SetGetCheckAndWaitAcrossClients) {
  std::unique_ptr<StoreServer> server = StartServer();
  std::unique_ptr<StoreClient> a = Connect(*server, 0), b = Connect(*server, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<std::optional<std::string>> missing = a->Get("k");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  EXPECT_FALSE(*a->Check({"k"}));
  // a waits (long enough never to time out here) until b sets the key.
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = a->Wait({"k", "k2"}, absl::Seconds(60)); });
  ASSERT_TRUE(b->Set("k", std::string("\0bytes\xff", 7)).ok());
  ASSERT_TRUE(b->Set("k2", "").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_TRUE(*a->Check({"k", "k2"}));
  EXPECT_EQ(a->Get("k")->value_or("?"), std::string("\0bytes\xff", 7));
  EXPECT_EQ(a->Get("k2")->value_or("?"), "");
  ASSERT_TRUE(b->Set("k", "again").ok());  // a key is overwritten
  EXPECT_EQ(a->Get("k")->value_or("?"), "again");
}

TEST(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  std::unique_ptr<StoreServer> server = StartServer();
  std::unique_ptr<StoreClient> client = Connect(*server);
  ASSERT_TRUE(client->Set("here", "1").ok());
  const absl::Status status = client->Wait({"here", "rank_1"}, absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("Wait timeout for key(s): rank_1 ("));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("127.0.0.1:", server->port())));
  // The connection serves on after a timeout.
  EXPECT_TRUE(client->Set("rank_1", "x").ok());
  EXPECT_TRUE(client->Wait({"here", "rank_1"}, absl::Milliseconds(100)).ok());
}

TEST(StoreTest, AWrongTokenIsRefusedAndLearnsNothing) {
  std::unique_ptr<StoreServer> server = StartServer();
  {
    std::unique_ptr<StoreClient> owner = Connect(*server);
    ASSERT_TRUE(owner->Set("secret-key", "v").ok());
  }
  StoreClientOptions stranger = ClientOptions(*server, 1);
  stranger.key = store::JobKey("another secret", "job-1");
  absl::StatusOr<std::unique_ptr<StoreClient>> refused = StoreClient::Connect(stranger);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("refused rank 1 (a token that is not this job's)"));
  stranger.key = store::JobKey("secret", "job-2");  // the same secret, another job
  EXPECT_TRUE(absl::IsPermissionDenied(StoreClient::Connect(stranger).status()));
  // Requests before (or instead of) the token are not served.
  Raw raw(server->port());
  raw.Read(store::kMagicBytes + store::kNonceBytes);
  raw.Send(FrameWriter(Op::kGet).String("secret-key").Frame());
  const std::string answer = raw.ReadToEnd();
  EXPECT_THAT(answer, HasSubstr("refused: a request before the job's token"));
  EXPECT_THAT(answer, ::testing::Not(HasSubstr("v")));
  EXPECT_EQ(server->stats().wrong_tokens, 2);
  ExpectServes(*server);
}

TEST(StoreTest, AStoreThatCannotProveTheKeyIsNotTrusted) {
  // A fake store that lets anyone in: the client does not believe it.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length);
  std::thread fake([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    const std::string hello = std::string(store::kMagic, store::kMagicBytes) +
                              std::string(store::kNonceBytes, 'n');
    ::send(fd, hello.data(), hello.size(), 0);
    char buffer[256];
    ::recv(fd, buffer, sizeof(buffer), 0);
    const std::string ok = FrameWriter(Op::kOk).Bytes(std::string(store::kProofBytes, 'p')).Frame();
    ::send(fd, ok.data(), ok.size(), 0);
    ::recv(fd, buffer, sizeof(buffer), 0);  // until the client goes
    ::close(fd);
  });
  StoreClientOptions options;
  options.port = ntohs(addr.sin_port);
  options.key = kKey;
  absl::StatusOr<std::unique_ptr<StoreClient>> client = StoreClient::Connect(options);
  EXPECT_TRUE(absl::IsPermissionDenied(client.status())) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("does not hold this job's token"));
  client = absl::UnknownError("closed");  // (the fake's recv returns)
  fake.join();
  ::close(listener);
}

TEST(StoreTest, GarbageIsRefusedWithoutHarm) {
  std::unique_ptr<StoreServer> server = StartServer();
  std::unique_ptr<StoreClient> good = Connect(*server);
  ASSERT_TRUE(good->Set("k", "v").ok());
  {
    Raw http(server->port());  // "GET " read as a length: far over the limit
    http.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(http.ReadToEnd(), HasSubstr("refused: a frame of 542393671 bytes"));
  }
  {
    Raw binary(server->port());
    std::string noise;
    for (int i = 0; i < 4096; ++i) noise.push_back(static_cast<char>((i * 7919 + 13) & 0xff));
    binary.Send(noise);
    EXPECT_THAT(binary.ReadToEnd(), HasSubstr("refused"));
  }
  EXPECT_EQ(good->Get("k")->value_or(""), "v");  // the earlier client is unharmed
  EXPECT_GE(server->stats().oversized, 1);
  ExpectServes(*server);
}

TEST(StoreTest, OversizedAndMalformedFramesAfterTheTokenAreRefused) {
  StoreServerOptions options = ServerOptions();
  options.limits.max_value_bytes = 1000;
  std::unique_ptr<StoreServer> server = StartServer(options);
  {
    Raw raw(server->port());
    ASSERT_TRUE(raw.Authenticate(kKey));
    raw.Send(std::string("\xff\xff\xff\xff", 4));  // a 4 GiB frame announced
    EXPECT_THAT(raw.ReadToEnd(), HasSubstr("refused: a frame of 4294967295 bytes (the limit is"));
  }
  {
    Raw raw(server->port());
    ASSERT_TRUE(raw.Authenticate(kKey));
    raw.Send(FrameWriter(Op::kSet).String("k").String(std::string(1001, 'v')).Frame());
    EXPECT_THAT(raw.ReadToEnd(), HasSubstr("refused"));
  }
  {
    Raw raw(server->port());
    ASSERT_TRUE(raw.Authenticate(kKey));
    // A key longer than its frame says.
    raw.Send(FrameWriter(Op::kGet).U32(1000).Bytes("short").Frame());
    EXPECT_THAT(raw.ReadToEnd(), HasSubstr("refused: a malformed request"));
  }
  {
    Raw raw(server->port());
    ASSERT_TRUE(raw.Authenticate(kKey));
    raw.Send(FrameWriter(static_cast<Op>(0x77)).U32(1).Frame());
    EXPECT_THAT(raw.ReadToEnd(), HasSubstr("refused: a malformed request"));
  }
  std::unique_ptr<StoreClient> client = Connect(*server);
  EXPECT_FALSE(client->Set("big", std::string(1001, 'v')).ok());
  ExpectServes(*server);
}

TEST(StoreTest, TruncatedFramesAreClosedWhileOthersAreServed) {
  std::unique_ptr<StoreServer> server = StartServer();
  Raw before_token(server->port());
  before_token.Read(store::kMagicBytes + store::kNonceBytes);
  before_token.Send(std::string("\x45\x00\x00\x00\x01\x03", 6));  // half an auth frame
  Raw after_token(server->port());
  ASSERT_TRUE(after_token.Authenticate(kKey));
  after_token.Send(FrameWriter(Op::kSet).String("k").String("value").Frame().substr(0, 9));
  Raw silent(server->port());  // says nothing at all
  // Served while the three hang.
  ExpectServes(*server);
  // Each is closed after its timeout.
  EXPECT_THAT(after_token.ReadToEnd(), HasSubstr("refused: a frame not finished in time"));
  EXPECT_THAT(before_token.ReadToEnd(), ::testing::Not(HasSubstr("<still open>")));
  EXPECT_THAT(silent.ReadToEnd(), ::testing::Not(HasSubstr("<still open>")));
  EXPECT_GE(server->stats().timed_out, 3);
  ExpectServes(*server);
}

TEST(StoreTest, AFloodOfConnectionsDoesNotKeepARankOut) {
  StoreServerOptions options = ServerOptions();
  options.max_pending = 8;
  options.max_clients = 3;
  options.auth_timeout = absl::Seconds(30);  // the flood stays until dropped
  std::unique_ptr<StoreServer> server = StartServer(options);
  std::vector<std::unique_ptr<Raw>> flood;
  for (int i = 0; i < 100; ++i) {
    flood.push_back(std::make_unique<Raw>(server->port()));
    ASSERT_TRUE(flood.back()->connected());
  }
  // Each newcomer past 8 waiting pushed out the oldest: a rank gets in
  // while the flood is still connected.
  std::unique_ptr<StoreClient> a = Connect(*server, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Set("k", "v").ok());
  EXPECT_GE(server->stats().turned_away, 92);
  // At most max_clients are let in.
  std::unique_ptr<StoreClient> b = Connect(*server, 1), c = Connect(*server, 2);
  absl::StatusOr<std::unique_ptr<StoreClient>> d = StoreClient::Connect(ClientOptions(*server, 3));
  EXPECT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("more than 3 clients"));
  EXPECT_EQ(c->Get("k")->value_or(""), "v");
}

TEST(StoreTest, NothingListeningIsAClearErrorAfterTheRetryWindow) {
  const int port = FreePort();
  StoreClientOptions options;
  options.port = port;
  options.key = kKey;
  options.connect_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<StoreClient>> client = StoreClient::Connect(options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(client.status())) << client.status();
  EXPECT_THAT(client.status().message(),
              HasSubstr(absl::StrCat("no job store answered at 127.0.0.1:", port)));
  EXPECT_THAT(client.status().message(), HasSubstr("Connection refused"));
}

TEST(StoreTest, TheClientWaitsForAServerThatStartsLate) {
  const int port = FreePort();
  StoreClientOptions options;
  options.port = port;
  options.key = kKey;
  options.connect_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<StoreClient>> client = absl::UnknownError("not run");
  std::thread rank1([&] { client = StoreClient::Connect(options); });
  StoreServerOptions server_options = ServerOptions();
  server_options.port = port;
  std::unique_ptr<StoreServer> server = StartServer(server_options);
  rank1.join();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("late", "ok").ok());
}

TEST(StoreTest, AnotherServiceOnThePortIsNamed) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);  // never accepts: the kernel does
  socklen_t length = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length);
  StoreClientOptions options;
  options.port = ntohs(addr.sin_port);
  options.key = kKey;
  options.greeting_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<StoreClient>> client = StoreClient::Connect(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(client.status())) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("is not a trainc job store (it said nothing"));
  ::close(listener);
}

TEST(StoreTest, AServiceThatSpeaksFirstIsNamedByWhatItSaid) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length);
  std::thread ssh([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    const std::string banner = "SSH-2.0-OpenSSH_9.2 and more bytes than a greeting holds\r\n";
    ::send(fd, banner.data(), banner.size(), 0);
    char buffer[16];
    ::recv(fd, buffer, sizeof(buffer), 0);  // until the client goes
    ::close(fd);
  });
  StoreClientOptions options;
  options.port = ntohs(addr.sin_port);
  options.key = kKey;
  absl::StatusOr<std::unique_ptr<StoreClient>> client = StoreClient::Connect(options);
  EXPECT_TRUE(absl::IsFailedPrecondition(client.status())) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("it said \"SSH-2.0-OpenSSH_9"));
  ssh.join();
  ::close(listener);
}

TEST(StoreTest, TheServerBindsOnlyTheAddressItWasGiven) {
  StoreServerOptions options = ServerOptions();
  options.host = "127.0.0.2";  // loopback too, but another address
  std::unique_ptr<StoreServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  StoreClientOptions client = ClientOptions(*server);
  client.connect_timeout = absl::Milliseconds(200);
  EXPECT_TRUE(absl::IsDeadlineExceeded(StoreClient::Connect(client).status()));
  client.host = "127.0.0.2";
  EXPECT_TRUE(StoreClient::Connect(client).ok());
}

TEST(StoreTest, APortInUseIsAClearError) {
  std::unique_ptr<StoreServer> first = StartServer();
  StoreServerOptions options = ServerOptions();
  options.port = first->port();
  absl::StatusOr<std::unique_ptr<StoreServer>> second = StoreServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot serve the job's store on 127.0.0.1:", first->port(),
                                     ": Address already in use")));
  options.host = "192.0.2.1";  // TEST-NET-1: not this machine's
  options.port = 0;
  second = StoreServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("not an address of this machine"));
}

}  // namespace
}  // namespace trainc
