// FailurePublisher: tells a job's surviving workers that a rank died, by publishing the failure
// into the job's store with dgt::worker::recovery::PublishRankFailure (keys under
// dgt/recovery/<group>/, docs/RECOVERY.md), twice: as dgt::store clients name the keys (the C++
// worker runtime) and behind '/', as torch TCPStore clients name them (the dgt Python package).
// Used by the agent's `--restart-policy rank`.
//
// The store client blocks, and the agent runs one event loop, so publications run on the
// publisher's own thread, one at a time in submission order; each one's result is handed to its
// callback on that thread (the agent posts it back to its loop). Every publication is bounded by
// Options::timeout (connecting included). A connection is kept between publications and opened
// again when the store address changes or a call fails.
//
// Thread-safe: Publish() from any thread. The destructor waits for the publication in progress
// (bounded by the timeout) and drops the queued ones without calling their callbacks.
#ifndef DGT_AGENT_FAILURE_PUBLISHER_H_
#define DGT_AGENT_FAILURE_PUBLISHER_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "dgt/store/store.h"

namespace dgt::agent {

class FailurePublisher {
 public:
  // Opens a store connection to host:port, giving up after `timeout`.
  using Connector = std::function<absl::StatusOr<std::unique_ptr<store::Store>>(
      const std::string& host, int port, absl::Duration timeout)>;
  // The generation opened for the failure, or why it could not be published.
  using Done = std::function<void(absl::StatusOr<int>)>;

  struct Options {
    std::string group = "world";                // ElasticGroupOptions::group of the trainers.
    absl::Duration timeout = absl::Seconds(5);  // Per publication, connecting included.
  };

  // A Connector for dgt::store::Client (torch 2.x protocol).
  static Connector ClientConnector();

  FailurePublisher(Options options, Connector connect);
  ~FailurePublisher();
  FailurePublisher(const FailurePublisher&) = delete;
  FailurePublisher& operator=(const FailurePublisher&) = delete;

  // Queues "rank `rank` failed (`reason`)" for the store at host:port.
  void Publish(std::string host, int port, int rank, std::string reason, Done done);

  // Queues opening the connection to the store at host:port now, so that a later Publish() to
  // it does not pay for connecting. Best effort: a failure is logged, and Publish() connects.
  void Prepare(std::string host, int port);

 private:
  struct Item {
    std::string host;
    int port = 0;
    int rank = 0;  // -1: only connect (Prepare).
    std::string reason;
    Done done;
  };
  void Loop();
  absl::StatusOr<int> PublishOne(const Item& item);
  // Opens store_ to host:port unless it is open to that address already.
  absl::Status Connect(const std::string& host, int port);

  const Options options_;
  const Connector connect_;
  Mutex mu_;  // dgt::Mutex (std::mutex underneath): TSan sees it, unlike Debian's absl::Mutex.
  CondVar cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Owned by the thread.
  std::unique_ptr<store::Store> store_;
  std::string store_address_;
  std::thread thread_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_FAILURE_PUBLISHER_H_
