#include "agent/coord/done_marks.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "boost/asio/post.hpp"
#include "common/store_keys.h"

namespace dgt::agent {

bool DoneMarks::AllDone() const {
  for (const auto& s : status) {
    if (!s) return false;
  }
  return !status.empty();
}

bool DoneMarks::AllSucceeded() const { return AllDone() && FirstFailed() < 0; }

bool DoneMarks::AllSeenExcept(int except) const {
  for (size_t r = 0; r < seen.size(); ++r) {
    if (static_cast<int>(r) != except && !seen[r]) return false;
  }
  return true;
}

int DoneMarks::FirstFailed() const {
  for (size_t r = 0; r < status.size(); ++r) {
    if (status[r] && *status[r] != 0) return static_cast<int>(r);
  }
  return -1;
}

int DoneMarks::FirstWorkerFailure() const {
  for (size_t r = 0; r < status.size(); ++r) {
    if (status[r] && *status[r] != 0 && *status[r] != kExitRendezvousUnavailable) {
      return static_cast<int>(r);
    }
  }
  return -1;
}

absl::StatusOr<DoneMarks> ReadDoneMarks(store::Store& store, int64_t round, int node_count) {
  DoneMarks marks;
  marks.status.resize(node_count);
  marks.seen.resize(node_count, false);
  for (int r = 0; r < node_count; ++r) {
    const std::string key = keys::DoneMarkKey(round, r);
    absl::StatusOr<bool> present = store.Check({key});
    if (!present.ok()) return present.status();
    if (*present) {
      absl::StatusOr<std::string> value = store.Get(key);
      if (!value.ok()) return value.status();
      int status = 0;
      if (!absl::SimpleAtoi(*value, &status)) {
        return absl::InvalidArgumentError(
            absl::StrCat("done mark ", key, " must be an exit status, got '", *value, "'"));
      }
      marks.status[r] = status;
    }
    absl::StatusOr<bool> seen = store.Check({keys::DoneSeenKey(round, r)});
    if (!seen.ok()) return seen.status();
    marks.seen[r] = *seen;
  }
  return marks;
}

absl::Status WriteDoneMark(store::Store& store, int64_t round, int node_rank, int exit_status) {
  return store.Set(keys::DoneMarkKey(round, node_rank), absl::StrCat(exit_status));
}

absl::Status WriteSeenMark(store::Store& store, int64_t round, int node_rank) {
  return store.Set(keys::DoneSeenKey(round, node_rank), "1");
}

void ReadDoneMarksAsync(store::AsyncClient& client, int64_t round, int node_count,
                        absl::Duration timeout,
                        std::function<void(absl::StatusOr<DoneMarks>)> done) {
  struct Read {
    DoneMarks marks;
    int left = 0;  // Replies still to come.
    absl::Status error;
    std::function<void(absl::StatusOr<DoneMarks>)> done;
    void Settle() {
      if (--left > 0) return;
      if (error.ok()) {
        done(std::move(marks));
      } else {
        done(error);
      }
    }
  };
  auto read = std::make_shared<Read>();
  read->marks.status.resize(node_count);
  read->marks.seen.resize(node_count, false);
  read->done = std::move(done);
  if (node_count <= 0) {
    read->left = 1;
    client.Flush(timeout, [read](const absl::Status&) { read->Settle(); });
    return;
  }
  read->left = 2 * node_count;
  store::AsyncClient* c = &client;
  for (int r = 0; r < node_count; ++r) {
    const std::string key = keys::DoneMarkKey(round, r);
    c->Check({key}, timeout, [c, read, key, r, timeout](const absl::StatusOr<bool>& present) {
      if (!present.ok() || !*present) {
        if (!present.ok() && read->error.ok()) read->error = present.status();
        return read->Settle();
      }
      c->Get(key, timeout, [read, key, r](const absl::StatusOr<std::string>& value) {
        int status = 0;
        if (!value.ok()) {
          if (read->error.ok()) read->error = value.status();
        } else if (!absl::SimpleAtoi(*value, &status)) {
          if (read->error.ok()) {
            read->error = absl::InvalidArgumentError(
                absl::StrCat("done mark ", key, " must be an exit status, got '", *value, "'"));
          }
        } else {
          read->marks.status[r] = status;
        }
        read->Settle();
      });
    });
    c->Check({keys::DoneSeenKey(round, r)}, timeout, [read, r](const absl::StatusOr<bool>& seen) {
      if (!seen.ok()) {
        if (read->error.ok()) read->error = seen.status();
      } else {
        read->marks.seen[r] = *seen;
      }
      read->Settle();
    });
  }
}

void WriteDoneMarkAsync(store::AsyncClient& client, int64_t round, int node_rank, int exit_status,
                        absl::Duration timeout, store::AsyncClient::StatusCallback done) {
  client.Set(keys::DoneMarkKey(round, node_rank), absl::StrCat(exit_status), timeout,
             std::move(done));
}

void WriteSeenMarkAsync(store::AsyncClient& client, int64_t round, int node_rank,
                        absl::Duration timeout, store::AsyncClient::StatusCallback done) {
  client.Set(keys::DoneSeenKey(round, node_rank), "1", timeout, std::move(done));
}

RoundStoreClient::RoundStoreClient(boost::asio::any_io_executor executor, absl::Duration timeout)
    : executor_(std::move(executor)), timeout_(timeout) {}

store::AsyncClient& RoundStoreClient::For(const std::string& host, int port) {
  const std::string address = absl::StrCat(host, ":", port);
  if (client_ != nullptr && address_ == address && client_->status().ok()) return *client_;
  store::AsyncClientOptions o;
  o.host = host;
  o.port = static_cast<uint16_t>(port);
  client_ = std::make_unique<store::AsyncClient>(executor_, std::move(o));
  address_ = address;
  // Its error reaches every request made meanwhile.
  client_->Connect(timeout_, nullptr);
  return *client_;
}

void RoundStoreClient::Flush(store::AsyncClient::StatusCallback done) {
  if (client_ == nullptr) {
    boost::asio::post(executor_, [done = std::move(done)] { done(absl::OkStatus()); });
    return;
  }
  client_->Flush(timeout_, std::move(done));
}

void RoundStoreClient::Drop() {
  client_.reset();
  address_.clear();
}

}  // namespace dgt::agent
