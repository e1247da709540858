// A rank's connection to the job's store (store_server.h): connect and
// prove the job's key, then set, get and wait for keys. Every call is
// bounded in time; errors name the store's address.
//
//   StoreClientOptions options;
//   options.host = "10.0.0.1"; options.port = 29500;
//   options.key = store::JobKey(secret, job);
//   options.rank = rank;
//   ASSIGN_OR_RETURN(std::unique_ptr<StoreClient> store, StoreClient::Connect(options));
//   RETURN_IF_ERROR(store->Set("0", address));
//   RETURN_IF_ERROR(store->Wait({"1"}, absl::Seconds(20)));
//
// Connect retries a refused connection (rank 0 not listening yet) until
// `connect_timeout`, then fails naming the address; a store that refuses
// this rank's token, or does not prove the job's key itself, is an error
// at once (PermissionDenied). Calls are serialised: one thread at a time.
#ifndef TRAINC_RUNTIME_STORE_STORE_CLIENT_H_
#define TRAINC_RUNTIME_STORE_STORE_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/store/store_protocol.h"

namespace trainc {

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string key;  // store::JobKey of the job
  int rank = 0;     // which rank this is (for the server's records)
  absl::Duration connect_timeout = absl::Seconds(30);
  // A program that accepts the connection must greet as a store within this.
  absl::Duration greeting_timeout = absl::Seconds(10);
  absl::Duration io_timeout = absl::Seconds(30);  // per answer (a Wait: plus its timeout)
  store::Limits limits;
};

class StoreClient {
 public:
  static absl::StatusOr<std::unique_ptr<StoreClient>> Connect(const StoreClientOptions& options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  absl::Status Set(const std::string& key, const std::string& value);
  // The value, or nullopt when the key is not set (does not wait).
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  // Until every key is set; DeadlineExceeded naming the missing ones after
  // `timeout`.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout);
  // Whether every key is set.
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys);

  // "host:port".
  std::string address() const;

 private:
  StoreClient(int fd, StoreClientOptions options) : fd_(fd), options_(std::move(options)) {}
  // Sends one request and reads its answer's body (op byte first).
  absl::StatusOr<std::string> Call(const std::string& frame, absl::Duration extra_wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  const StoreClientOptions options_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_STORE_STORE_CLIENT_H_
