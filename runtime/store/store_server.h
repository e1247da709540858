// The job's key-value store, served by rank 0 on MASTER_ADDR:MASTER_PORT
// for the ranks' Gloo rendezvous (store_client.h is the other end; the
// wire format is store_protocol.h).
//
//   StoreServerOptions options;
//   options.host = "10.0.0.1";  // bound as given: not every interface
//   options.port = 29500;
//   options.key = store::JobKey(secret, job);
//   ASSIGN_OR_RETURN(std::unique_ptr<StoreServer> server, StoreServer::Start(options));
//   ... the ranks connect with StoreClient; ~StoreServer stops it.
//
// One thread polls every connection; nothing a client sends blocks the
// others. A connection must prove the job's key within `auth_timeout`
// before any key is read or written, and finish each frame it begins
// within `frame_timeout`; a wrong proof, a malformed frame or one over
// the limits is answered with an error and closed. At most `max_pending`
// connections wait to authenticate (a newcomer past that closes the oldest
// of them) and `max_clients` are let in. The keys and values held are
// capped at `max_store_bytes`.
#ifndef TRAINC_RUNTIME_STORE_STORE_SERVER_H_
#define TRAINC_RUNTIME_STORE_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/store/store_protocol.h"

namespace trainc {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // a name or a numeric address of this machine
  int port = 0;                    // 0: any free port (tests; see port())
  std::string key;                 // store::JobKey of the job
  int max_clients = 256;
  int max_pending = 64;
  absl::Duration auth_timeout = absl::Seconds(5);
  absl::Duration frame_timeout = absl::Seconds(10);
  store::Limits limits;
  size_t max_store_bytes = size_t{256} << 20;
};

// What the server turned away, for errors that explain a missing rank.
struct StoreServerStats {
  int64_t wrong_tokens = 0;     // proofs of another key
  int64_t malformed = 0;        // bad frames, requests before the proof
  int64_t oversized = 0;        // length prefixes past the limit
  int64_t timed_out = 0;        // silent past auth_timeout or frame_timeout
  int64_t turned_away = 0;      // past max_pending or max_clients
  int64_t served = 0;           // requests answered after the proof
};

class StoreServer {
 public:
  // Binds host:port (an error naming the address when it cannot: in use,
  // not an address of this machine) and starts serving.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  StoreServerStats stats() const;
  // Until no client is connected, or `timeout` passed (false then): rank 0
  // whose rendezvous failed lets the other ranks ask the store who is
  // missing before it exits.
  bool WaitForClientsToLeave(absl::Duration timeout) const;

 private:
  class Loop;  // store_server.cc
  StoreServer(std::unique_ptr<Loop> loop, int port);

  std::unique_ptr<Loop> loop_;
  const int port_;
  std::thread thread_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_STORE_STORE_SERVER_H_
