// Done marks: each node of a round writes, into the round's store, that its workers are done and
// with which exit status; node rank 0, which serves that store, keeps it until every node's mark
// is there, and the nodes can learn the run's outcome from the marks when the rendezvous service
// is gone (docs/RENDEZVOUS.md, "Losing the service").
//
// Keys (common/store_keys.h, keys::DoneMarkKey and keys::DoneSeenKey):
//   dgt/done/<round>/<node_rank>       = the exit status of that node's workers ("0": succeeded)
//   dgt/done/<round>/seen/<node_rank>  = "1" once that node learned the outcome from the marks
//
// ReadDoneMarks/WriteDoneMark/WriteSeenMark are plain functions over a blocking store::Store (for
// tools and tests); the agent uses the *Async versions over the store::AsyncClient that
// RoundStoreClient keeps on its event loop (no thread).
//
// Thread-safety: the functions are as thread-safe as the Store; RoundStoreClient is
// thread-compatible (its executor's thread only).
#ifndef DGT_AGENT_COORD_DONE_MARKS_H_
#define DGT_AGENT_COORD_DONE_MARKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "dgt/store/async_client.h"
#include "dgt/store/store.h"

namespace dgt::agent {

struct DoneMarks {
  // By node rank: that node's exit status, or nullopt while its workers are not done.
  std::vector<std::optional<int>> status;
  // By node rank: whether that node has learned the outcome from the marks.
  std::vector<bool> seen;

  bool AllDone() const;
  // Every node is done and every status is 0.
  bool AllSucceeded() const;
  // Every node other than `except` has seen the outcome.
  bool AllSeenExcept(int except) const;
  // The lowest node rank whose status is not 0, or -1.
  int FirstFailed() const;
  // The lowest node rank whose workers failed: a status other than 0 and other than
  // kExitRendezvousUnavailable, which is that node's agent giving up on the lost service (every
  // node reaches that conclusion itself when its own reconnect window ends), or -1.
  int FirstWorkerFailure() const;
};

// Reads the marks of node ranks 0..node_count-1 of `round` (2 * node_count CHECKs and one GET per
// present mark). Errors: those of the store; InvalidArgument for a mark that is not a number.
absl::StatusOr<DoneMarks> ReadDoneMarks(store::Store& store, int64_t round, int node_count);
absl::Status WriteDoneMark(store::Store& store, int64_t round, int node_rank, int exit_status);
absl::Status WriteSeenMark(store::Store& store, int64_t round, int node_rank);

// As ReadDoneMarks / WriteDoneMark / WriteSeenMark, over `client` (the requests pipelined, each
// bounded by `timeout`); `done` runs exactly once, on the client's executor, with the first error
// when one request failed.
void ReadDoneMarksAsync(store::AsyncClient& client, int64_t round, int node_count,
                        absl::Duration timeout,
                        std::function<void(absl::StatusOr<DoneMarks>)> done);
void WriteDoneMarkAsync(store::AsyncClient& client, int64_t round, int node_rank, int exit_status,
                        absl::Duration timeout, store::AsyncClient::StatusCallback done);
void WriteSeenMarkAsync(store::AsyncClient& client, int64_t round, int node_rank,
                        absl::Duration timeout, store::AsyncClient::StatusCallback done);

// The agent's client to the round's store: one store::AsyncClient (torch 2.x protocol, keys
// as dgt::store clients name them) to the round's store, kept between calls and made anew when
// the address changes or the last one broke. No thread. Thread-compatible: use it on the
// executor's thread. Destroying it cancels what is pending (callbacks run with Cancelled).
class RoundStoreClient {
 public:
  // `timeout` bounds connecting and each request made through it.
  RoundStoreClient(boost::asio::any_io_executor executor, absl::Duration timeout);

  // The client for the store at host:port (connecting within the timeout when new).
  store::AsyncClient& For(const std::string& host, int port);
  absl::Duration timeout() const { return timeout_; }

  // `done` (exactly once, on the executor): Ok once everything issued so far went out, or the
  // client's error; Ok at once (posted) when there is no client. An agent about to exit waits
  // for this, so that its last done mark reaches the store.
  void Flush(store::AsyncClient::StatusCallback done);

  // Forgets the client: what is pending completes with Cancelled (when nobody needs the marks
  // any more).
  void Drop();

 private:
  boost::asio::any_io_executor executor_;
  const absl::Duration timeout_;
  std::unique_ptr<store::AsyncClient> client_;
  std::string address_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_DONE_MARKS_H_
