// Done marks: each node of a round writes, into the round's store, that its workers are done and
// with which exit status; node rank 0, which serves that store, keeps it until every node's mark
// is there, and the nodes can learn the run's outcome from the marks when the rendezvous service
// is gone (docs/RENDEZVOUS.md, "Losing the service").
//
// Keys (common/store_keys.h, keys::DoneMarkKey and keys::DoneSeenKey):
//   dgt/done/<round>/<node_rank>       = the exit status of that node's workers ("0": succeeded)
//   dgt/done/<round>/seen/<node_rank>  = "1" once that node learned the outcome from the marks
//
// ReadDoneMarks/WriteDoneMark/WriteSeenMark are plain functions over a blocking store::Store;
// RoundStoreTasks runs them on its own thread (transitional, until agent.cc calls the *Async
// versions over a store::AsyncClient on its event loop: no thread).
//
// Thread-safety: the functions are as thread-safe as the Store; RoundStoreTasks is thread-safe.
#ifndef DGT_AGENT_DONE_MARKS_H_
#define DGT_AGENT_DONE_MARKS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/failure_publisher.h"
#include "boost/asio/any_io_executor.hpp"
#include "common/mutex.h"
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

// The event-loop counterpart of RoundStoreTasks: one store::AsyncClient (torch 2.x protocol, keys
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

  // Forgets the client: what is pending completes with Cancelled (as RoundStoreTasks::
  // DropQueued, when nobody needs the marks any more).
  void Drop();

 private:
  boost::asio::any_io_executor executor_;
  const absl::Duration timeout_;
  std::unique_ptr<store::AsyncClient> client_;
  std::string address_;
};

// Runs store tasks one at a time, in order, on its own thread, over a connection to the task's
// host:port kept between tasks (opened again when the address changes or a task reports that
// the connection broke).
class RoundStoreTasks {
 public:
  // The store at host:port, or why it could not be reached within the timeout. The task returns
  // false when the connection failed under it (it is then dropped).
  using Task = std::function<bool(absl::StatusOr<store::Store*>)>;

  RoundStoreTasks(FailurePublisher::Connector connect, absl::Duration timeout);
  // Runs the tasks still queued (each connection bounded by the timeout), then returns: a node's
  // last mark is written before the agent exits.
  ~RoundStoreTasks();
  RoundStoreTasks(const RoundStoreTasks&) = delete;
  RoundStoreTasks& operator=(const RoundStoreTasks&) = delete;

  void Run(std::string host, int port, Task task);
  // Forgets the queued tasks (not the one running): when every node learned the run's outcome
  // from the service, nobody needs the marks, and a node need not wait for a store that is gone.
  void DropQueued();

 private:
  struct Item {
    std::string host;
    int port = 0;
    Task task;
  };
  void Loop();

  const FailurePublisher::Connector connect_;
  const absl::Duration timeout_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Owned by the thread.
  std::unique_ptr<store::Store> store_;
  std::string store_address_;
  std::thread thread_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_DONE_MARKS_H_
