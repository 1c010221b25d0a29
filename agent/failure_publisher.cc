#include "agent/failure_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "dgt/store/client.h"
#include "dgt/store/prefix_store.h"
#include "dgt/worker/recovery_keys.h"

namespace dgt::agent {
namespace {

// Publishes into both namespaces of the job's store: the keys as dgt::store clients name them
// (the C++ worker runtime) and the same keys behind '/', which is how every torch TCPStore client
// names its keys (the Python package, python/dgt/keys.py). Returns the later generation: the one
// of the namespace the job's trainers use, since the other one never moves past 1.
absl::StatusOr<int> PublishInBothNamespaces(store::Store& store, const std::string& group, int rank,
                                            absl::string_view reason) {
  DGT_ASSIGN_OR_RETURN(int raw, worker::recovery::PublishRankFailure(store, group, rank, reason));
  store::PrefixStore torch_view("", store);  // "" + "/" + key.
  DGT_ASSIGN_OR_RETURN(int torch,
                       worker::recovery::PublishRankFailure(torch_view, group, rank, reason));
  return std::max(raw, torch);
}

}  // namespace

FailurePublisher::Connector FailurePublisher::ClientConnector() {
  return [](const std::string& host, int port,
            absl::Duration timeout) -> absl::StatusOr<std::unique_ptr<store::Store>> {
    store::ClientOptions o;
    o.host = host;
    o.port = static_cast<uint16_t>(port);
    o.timeout = timeout;
    auto client = store::Client::Connect(o);
    if (!client.ok()) return client.status();
    return std::unique_ptr<store::Store>(std::move(*client));
  };
}

FailurePublisher::FailurePublisher(Options options, Connector connect)
    : options_(std::move(options)), connect_(std::move(connect)) {
  thread_ = std::thread([this] { Loop(); });
}

FailurePublisher::~FailurePublisher() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void FailurePublisher::Publish(std::string host, int port, int rank, std::string reason,
                               Done done) {
  MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(host), port, rank, std::move(reason), std::move(done)});
  cv_.Signal();
}

void FailurePublisher::Prepare(std::string host, int port) {
  MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(host), port, -1, "", nullptr});
  cv_.Signal();
}

void FailurePublisher::Loop() {
  for (;;) {
    Item item;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (item.rank < 0) {
      absl::Status s = Connect(item.host, item.port);
      if (!s.ok()) spdlog::debug("dgt-run: failure publisher: {}", s.message());
      continue;
    }
    absl::StatusOr<int> result = PublishOne(item);
    if (item.done) item.done(std::move(result));
  }
}

absl::Status FailurePublisher::Connect(const std::string& host, int port) {
  const std::string address = absl::StrCat(host, ":", port);
  if (store_ != nullptr && store_address_ == address) return absl::OkStatus();
  store_.reset();
  auto store = connect_(host, port, options_.timeout);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("store at ", address, ": ", store.status().message()));
  }
  store_ = std::move(*store);
  store_address_ = address;
  return absl::OkStatus();
}

absl::StatusOr<int> FailurePublisher::PublishOne(const Item& item) {
  const std::string address = absl::StrCat(item.host, ":", item.port);
  // A kept connection may have gone stale (the store was restarted): then one fresh attempt.
  const bool reused = store_ != nullptr && store_address_ == address;
  for (int attempt = reused ? 0 : 1; attempt < 2; ++attempt) {
    if (attempt == 1) {
      store_.reset();
      if (absl::Status s = Connect(item.host, item.port); !s.ok()) return s;
    }
    absl::StatusOr<int> generation =
        PublishInBothNamespaces(*store_, options_.group, item.rank, item.reason);
    if (generation.ok()) return generation;
    store_.reset();
    if (attempt == 1) {
      return absl::Status(generation.status().code(),
                          absl::StrCat("store at ", address, ": ", generation.status().message()));
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace dgt::agent
