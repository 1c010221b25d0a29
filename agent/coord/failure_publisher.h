// FailurePublisher: tells a job's surviving workers that a rank died, by publishing the failure
// into the job's store with dgt::worker::recovery::PublishRankFailure (keys under
// dgt/recovery/<group>/, docs/RECOVERY.md), twice: as dgt::store clients name the keys (the C++
// worker runtime) and behind '/', as torch TCPStore clients name them (the dgt Python package).
// Used by the agent's `--restart-policy rank`.
//
// Publications run one at a time in submission order over a connection kept between them and
// opened again when the store address changes or a publication on a kept connection failed (the
// store was restarted: one fresh attempt). Connecting and each store request are bounded by
// Options::timeout.
//
// They run on the agent's event loop, over a store::AsyncClient (torch 2.x protocol); callbacks
// run on that executor. No thread. Thread-compatible: use it from the executor's thread only. The
// destructor drops what is pending without calling back.
#ifndef DGT_AGENT_COORD_FAILURE_PUBLISHER_H_
#define DGT_AGENT_COORD_FAILURE_PUBLISHER_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "dgt/store/async_client.h"

namespace dgt::agent {

class FailurePublisher {
 public:
  // The generation opened for the failure, or why it could not be published.
  using Done = std::function<void(absl::StatusOr<int>)>;

  struct Options {
    std::string group = "world";                // ElasticGroupOptions::group of the trainers.
    absl::Duration timeout = absl::Seconds(5);  // Per publication, connecting included.
  };

  // On `executor`'s event loop (no thread).
  FailurePublisher(boost::asio::any_io_executor executor, Options options);
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
  // Starts the next queued item unless one is running.
  void Next();
  // Connects client_ to host:port unless it is connected (or connecting) there already.
  void EnsureClient(const std::string& host, int port);
  // Runs `item` on client_; `retry`: once more on a fresh connection if it fails Unavailable.
  void Run(const std::shared_ptr<Item>& item, bool retry);
  // Finishes the running item with `result`.
  void Finish(const std::shared_ptr<Item>& item, absl::StatusOr<int> result);

  const Options options_;
  boost::asio::any_io_executor executor_;
  std::unique_ptr<store::AsyncClient> client_;
  std::string client_address_;
  std::deque<Item> pending_;
  bool running_ = false;
  bool closing_ = false;
};

// Publishes "rank `rank` failed (`reason`)" over `client` as
// dgt::worker::recovery::PublishRankFailure does over a blocking store, with every key behind
// `prefix` ("" as dgt::store clients name keys, "/" as torch TCPStore clients do): CHECK and GET
// of the rank's member key, COMPARE_SET of the generation ("" -> "0", then from -> from+1),
// APPEND to the new generation's failed list, SET of its open key. Each request bounded by
// `timeout`. `done` (on the client's executor, exactly once): the generation opened; the
// client's errors; Internal when a key holds no generation number.
void PublishRankFailureAsync(store::AsyncClient& client, const std::string& prefix,
                             const std::string& group, int rank, const std::string& reason,
                             absl::Duration timeout, std::function<void(absl::StatusOr<int>)> done);

// Rank restarts: SETs keys::RestartWireKey(rank) = "<generation>" in the job's store at
// host:port (torch 1.x frames, so a trainer's torch TCPStore client reads
// store.get(keys::RestartKey(rank))), on `executor`, connecting and writing within 5 s; a failure
// is logged as a warning. Fire and forget: the connection lives until the SET went out or failed.
// dgt's own protocol: torchrun's agent has no such key.
void PublishRestartGeneration(const boost::asio::any_io_executor& executor, const std::string& host,
                              int port, int rank, int generation);

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_FAILURE_PUBLISHER_H_
