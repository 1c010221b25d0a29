#include "agent/static_coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/exit_codes.h"
#include "common/logging.h"
#include "common/store_keys.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

// torch 1.x TCPStore opcodes (REFERENCE.md §4).
constexpr char kSet = 0;
constexpr char kCompareSet = 1;
constexpr char kGet = 2;
constexpr char kCheck = 4;
constexpr char kWait = 5;

// How long node rank 0 may take to find out which nodes are missing, after the finish timeout.
constexpr absl::Duration kProbeTimeout = absl::Seconds(5);

// Beyond reconnect_timeout: how long a reconnect to node rank 0's store may hang.
constexpr absl::Duration kReconnectBackstop = absl::Seconds(2);

// "node rank 1" / "node ranks 1, 2".
std::string NodeRanks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "node rank " : "node ranks ", absl::StrJoin(ranks, ", "));
}

void AppendU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void AppendField(std::string* out, const std::string& s) {
  AppendU64(out, s.size());
  out->append(s);
}

}  // namespace

StoreConnection::StoreConnection(asio::io_context& io, std::string host, int port)
    : io_(io), host_(std::move(host)), port_(port), socket_(io), retry_timer_(io) {}

void StoreConnection::Connect(absl::Duration timeout, std::function<void(absl::Status)> done) {
  deadline_ = absl::Now() + timeout;
  on_connected_ = std::move(done);
  TryConnect();
}

void StoreConnection::TryConnect() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host_, ec);
  if (ec) {
    on_connected_(absl::InvalidArgumentError(absl::StrCat("not an IP address: ", host_)));
    return;
  }
  auto self = shared_from_this();
  socket_.async_connect(
      asio::ip::tcp::endpoint(address, static_cast<uint16_t>(port_)),
      [self](boost::system::error_code e) {
        if (self->closed_) return;
        if (!e) {
          boost::system::error_code ignored;
          self->socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
          self->on_connected_(absl::OkStatus());
          return;
        }
        if (e == asio::error::operation_aborted) return;
        boost::system::error_code ignored;
        self->socket_.close(ignored);
        if (absl::Now() >= self->deadline_) {
          self->on_connected_(absl::DeadlineExceededError(absl::StrCat(
              "cannot reach the store at ", self->host_, ":", self->port_, ": ", e.message())));
          return;
        }
        // Node rank 0 may start later than this node: retry until the deadline.
        self->retry_timer_.expires_after(std::chrono::milliseconds(100));
        self->retry_timer_.async_wait([self](boost::system::error_code te) {
          if (!te && !self->closed_) self->TryConnect();
        });
      });
}

void StoreConnection::Write(std::string frame) {
  // A failed connection drops what would follow: a further write on it may never complete, and
  // a Flush must not wait for it (a node rank > 0 keeps beating after node rank 0 is gone).
  if (broken_) return;
  queue_.push_back(std::move(frame));
  if (!writing_) WriteNext();
}

void StoreConnection::Flush(std::function<void()> done) {
  if (!writing_ && queue_.empty()) {
    asio::post(io_, [self = shared_from_this(), done = std::move(done)] {
      if (!self->closed_) done();
    });
    return;
  }
  on_flushed_.push_back(std::move(done));
}

void StoreConnection::WriteNext() {
  if (queue_.empty()) {
    writing_ = false;
    auto callbacks = std::move(on_flushed_);
    on_flushed_.clear();
    for (auto& cb : callbacks) cb();
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  auto frame = std::make_shared<std::string>(std::move(queue_.front()));
  queue_.erase(queue_.begin());
  asio::async_write(socket_, asio::buffer(*frame),
                    [self, frame](boost::system::error_code ec, size_t) {
                      if (self->closed_) return;
                      if (ec) {
                        self->broken_ = true;
                        self->queue_.clear();  // WriteNext then reports the flush.
                      }
                      self->WriteNext();
                    });
}

void StoreConnection::Set(const std::string& key, const std::string& value) {
  std::string frame(1, kSet);
  AppendField(&frame, "/" + key);
  AppendField(&frame, value);
  Write(std::move(frame));
}

void StoreConnection::KeysRequest(char opcode, const std::vector<std::string>& keys,
                                  std::function<void(absl::StatusOr<uint8_t>)> done) {
  std::string frame(1, opcode);
  AppendU64(&frame, keys.size());
  for (const std::string& k : keys) AppendField(&frame, "/" + k);
  Write(std::move(frame));
  auto self = shared_from_this();
  asio::async_read(
      socket_, asio::buffer(reply_.data(), 1),
      [self, done = std::move(done)](boost::system::error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) {
          done(absl::UnavailableError(absl::StrCat("store connection: ", ec.message())));
          return;
        }
        done(static_cast<uint8_t>(self->reply_[0]));
      });
}

void StoreConnection::Wait(const std::vector<std::string>& keys,
                           std::function<void(absl::Status)> done) {
  KeysRequest(kWait, keys, [done = std::move(done)](const absl::StatusOr<uint8_t>& reply) {
    done(reply.status());  // STOP_WAITING.
  });
}

void StoreConnection::Check(const std::vector<std::string>& keys,
                            std::function<void(absl::StatusOr<bool>)> done) {
  KeysRequest(kCheck, keys, [done = std::move(done)](const absl::StatusOr<uint8_t>& reply) {
    if (!reply.ok()) {
      done(reply.status());
      return;
    }
    done(*reply == 0);  // READY 0, NOT_READY 1.
  });
}

void StoreConnection::Get(const std::string& key,
                          std::function<void(absl::StatusOr<std::string>)> done) {
  std::string frame(1, kGet);
  AppendField(&frame, "/" + key);
  Write(std::move(frame));
  ReadValue(std::move(done));
}

void StoreConnection::CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired,
                                 std::function<void(absl::StatusOr<std::string>)> done) {
  std::string frame(1, kCompareSet);
  AppendField(&frame, "/" + key);
  AppendField(&frame, expected);
  AppendField(&frame, desired);
  Write(std::move(frame));
  ReadValue(std::move(done));
}

void StoreConnection::ReadValue(std::function<void(absl::StatusOr<std::string>)> done) {
  auto self = shared_from_this();
  asio::async_read(
      socket_, asio::buffer(reply_.data(), 8),
      [self, done = std::move(done)](boost::system::error_code ec, size_t) mutable {
        if (self->closed_) return;
        if (ec) {
          done(absl::UnavailableError(absl::StrCat("store connection: ", ec.message())));
          return;
        }
        uint64_t n = 0;
        std::memcpy(&n, self->reply_.data(), sizeof n);
        if (n > (1u << 20)) {
          done(absl::DataLossError("store value too large"));
          return;
        }
        self->value_.assign(n, '\0');
        asio::async_read(
            self->socket_, asio::buffer(self->value_),
            [self, done = std::move(done)](boost::system::error_code e, size_t) {
              if (self->closed_) return;
              if (e) {
                done(absl::UnavailableError(absl::StrCat("store connection: ", e.message())));
                return;
              }
              done(self->value_);
            });
      });
}

void StoreConnection::Close() {
  // No callback of this connection runs after Close(): its owner may be gone by the time the
  // aborted operations complete (a StaticCoordinator destroyed while a WAIT was pending).
  closed_ = true;
  on_connected_ = nullptr;
  on_flushed_.clear();
  boost::system::error_code ignored;
  retry_timer_.cancel();
  socket_.close(ignored);
}

StaticCoordinator::StaticCoordinator(asio::io_context& io, Options options)
    : io_(io),
      options_(std::move(options)),
      finish_timer_(io),
      reconnect_timer_(io),
      heartbeat_timer_(io) {}

StaticCoordinator::~StaticCoordinator() {
  closing_ = true;
  reconnect_timer_.cancel();
  heartbeat_timer_.cancel();
  if (monitor_) monitor_->Close();
  if (watch_) watch_->Close();
  if (control_) control_->Close();
  if (probe_) probe_->Close();
}

std::string StaticCoordinator::ClaimToken() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", ::getpid(), ":", absl::ToUnixNanos(absl::Now()));
}

void StaticCoordinator::Start(const std::function<void(absl::Status)>& connected,
                              const FailureCallback& on_failure) {
  watch_ = std::make_shared<StoreConnection>(io_, options_.master_addr, options_.master_port);
  control_ = std::make_shared<StoreConnection>(io_, options_.master_addr, options_.master_port);
  const bool monitors = options_.node_rank == 0 && options_.node_count > 1;
  auto pending = std::make_shared<int>(monitors ? 3 : 2);
  auto first_error = std::make_shared<absl::Status>();
  auto both = [pending, first_error, connected](const absl::Status& s) {
    if (!s.ok() && first_error->ok()) *first_error = s;
    if (--*pending == 0) connected(*first_error);
  };
  on_failure_ = on_failure;
  watch_->Connect(options_.connect_timeout, [this, both](const absl::Status& s) {
    both(s);
    if (!s.ok()) return;
    Watch(watch_);
  });
  control_->Connect(options_.connect_timeout, [this, both](const absl::Status& s) {
    // Node rank 0 tells a node that never came from one that came but did not finish.
    if (!s.ok() || options_.node_rank == 0) {
      if (s.ok()) control_->Set(keys::StaticJoinedKey(options_.run_id, options_.node_rank), "1");
      both(s);
      return;
    }
    // Claims this node rank: a second agent given the same --node-rank (or one restarted while
    // the run goes on) would otherwise run the same ranks twice, unnoticed.
    const std::string key = keys::StaticJoinedKey(options_.run_id, options_.node_rank);
    const std::string token = ClaimToken();
    control_->CompareSet(key, "", token, [this, both, token](absl::StatusOr<std::string> held) {
      if (!held.ok()) {
        both(held.status());
        return;
      }
      if (*held != token) {
        both(absl::AlreadyExistsError(
            absl::StrCat("node rank ", options_.node_rank, " of run '", options_.run_id,
                         "' is already held by another agent (", *held,
                         "); two agents with one --node-rank would run the same ranks twice")));
        return;
      }
      Heartbeat();
      both(absl::OkStatus());
    });
  });
  if (!monitors) return;
  peers_.assign(options_.node_count, Peer{});
  monitor_ = std::make_shared<StoreConnection>(io_, options_.master_addr, options_.master_port);
  monitor_->Connect(options_.connect_timeout, [this, both](const absl::Status& s) {
    both(s);
    if (s.ok()) CheckPeers(1);
  });
}

void StaticCoordinator::Heartbeat() {
  if (closing_) return;
  control_->Set(keys::StaticAliveKey(options_.run_id, options_.node_rank), absl::StrCat(++beats_));
  heartbeat_timer_.expires_after(absl::ToChronoMilliseconds(options_.heartbeat_period));
  heartbeat_timer_.async_wait(Guarded([this](boost::system::error_code ec) {
    if (!ec) Heartbeat();
  }));
}

void StaticCoordinator::CheckPeers(int next) {
  if (closing_ || peer_lost_) return;
  while (next < options_.node_count && peers_[next].done) ++next;
  if (next >= options_.node_count) {
    // One pass over the peers done: the next one after a period (no busy polling).
    heartbeat_timer_.expires_after(absl::ToChronoMilliseconds(options_.heartbeat_period));
    heartbeat_timer_.async_wait(Guarded([this](boost::system::error_code ec) {
      if (!ec) CheckPeers(1);
    }));
    return;
  }
  // Errors: the monitor's connection to this node's own store broke, which happens only when
  // this agent ends; nothing left to watch.
  const std::string alive = keys::StaticAliveKey(options_.run_id, next);
  monitor_->Check({alive}, [this, next, alive](absl::StatusOr<bool> seen) {
    if (!seen.ok() || closing_) return;
    if (!*seen) {
      // Not joined yet (or never: the finish timeout names it).
      CheckPeers(next + 1);
      return;
    }
    monitor_->Get(alive, [this, next](absl::StatusOr<std::string> v) {
      if (!v.ok() || closing_) return;
      Peer& peer = peers_[next];
      const absl::Time now = absl::Now();
      if (*v != peer.last) {
        peer.last = *v;
        peer.changed = now;
        CheckPeers(next + 1);
        return;
      }
      if (now - peer.changed < options_.peer_lost_after) {
        CheckPeers(next + 1);
        return;
      }
      // Silent for long enough: an agent that reported done stops beating when it exits.
      monitor_->Check({keys::StaticDoneKey(options_.run_id, next)},
                      [this, next](absl::StatusOr<bool> d) {
                        if (!d.ok() || closing_) return;
                        if (*d) {
                          peers_[next].done = true;
                          CheckPeers(next + 1);
                          return;
                        }
                        PeerLost(next);
                      });
    });
  });
}

void StaticCoordinator::PeerLost(int rank) {
  if (peer_lost_) return;
  peer_lost_ = true;
  const std::string message =
      absl::StrCat("lost node rank ", rank,
                   " (its agent stopped updating its liveness key in node rank 0's "
                   "store for ",
                   absl::FormatDuration(options_.peer_lost_after),
                   ": it was killed or cannot reach node rank 0)");
  spdlog::error("dgt-run: {}", message);
  // Every other node stops its workers too. On the monitor: the control connection may have a
  // WAIT outstanding.
  monitor_->Set(keys::StaticFailedKey(options_.run_id),
                absl::StrCat(kExitRendezvousUnavailable, " ", message));
  on_failure_(kExitRendezvousUnavailable, message);
  // A pending Report no longer waits for the others: the run has failed.
  monitor_->Flush([this] { Complete(absl::OkStatus()); });
}

void StaticCoordinator::Watch(const std::shared_ptr<StoreConnection>& conn) {
  conn->Wait({keys::StaticFailedKey(options_.run_id)}, [this, conn](const absl::Status& ws) {
    if (!ws.ok()) {
      OnWatchLost(std::string(ws.message()));
      return;
    }
    // Node rank 0 waiting for the others reads every node's status itself (naming the node).
    if (options_.node_rank == 0 && (pending_done_ || peer_lost_)) return;
    conn->Get(keys::StaticFailedKey(options_.run_id), [this](absl::StatusOr<std::string> v) {
      int status = 1;
      std::string message = "a worker failed on another node";
      if (v.ok()) {
        size_t space = v->find(' ');
        if (absl::SimpleAtoi(v->substr(0, space), &status) && space != std::string::npos) {
          message = v->substr(space + 1);
        }
      }
      on_failure_(status, message);
    });
  });
}

void StaticCoordinator::OnWatchLost(const std::string& why) {
  // Node rank 0's own store goes away only when node rank 0 itself ends.
  if (closing_ || lost_ || options_.node_rank == 0) return;
  spdlog::warn(
      "dgt-run: lost the connection to node rank 0's store at {}:{} ({}); trying to reconnect "
      "for {}",
      options_.master_addr, options_.master_port, why,
      absl::FormatDuration(options_.reconnect_timeout));
  const std::string broke = absl::StrCat("its store closed the connection (", why, ")");
  // Connect() gives up on refused connections after reconnect_timeout; this backstop also bounds
  // a connect or a check that hangs (a host that stopped answering).
  reconnect_timer_.expires_after(
      absl::ToChronoMilliseconds(options_.reconnect_timeout + kReconnectBackstop));
  reconnect_timer_.async_wait(Guarded([this, broke](boost::system::error_code ec) {
    if (ec || closing_ || lost_) return;
    if (watch_) watch_->Close();
    Lost(absl::StrCat(broke, " and did not answer again within ",
                      absl::FormatDuration(options_.reconnect_timeout + kReconnectBackstop)));
  }));
  Reconnect(broke, absl::Now() + options_.reconnect_timeout);
}

void StaticCoordinator::Reconnect(const std::string& broke, absl::Time deadline) {
  auto conn = std::make_shared<StoreConnection>(io_, options_.master_addr, options_.master_port);
  watch_ = conn;
  // The callbacks are stored in `conn` itself: they hold a plain pointer (compared with watch_,
  // which owns it), not a shared_ptr, or the connection would own itself and never be freed.
  StoreConnection* raw = conn.get();
  conn->Connect(
      std::max(deadline - absl::Now(), absl::ZeroDuration()),
      [this, raw, broke, deadline](const absl::Status& s) {
        if (closing_ || lost_ || watch_.get() != raw) return;
        if (!s.ok()) {
          reconnect_timer_.cancel();
          Lost(absl::StrCat(broke, " and could not be reached again within ",
                            absl::FormatDuration(options_.reconnect_timeout), ": ", s.message()));
          return;
        }
        // The same store still holds this node's joined key; one node rank 0 started afresh does
        // not.
        raw->Check({keys::StaticJoinedKey(options_.run_id, options_.node_rank)},
                   [this, raw, broke, deadline](absl::StatusOr<bool> same) {
                     if (closing_ || lost_ || watch_.get() != raw) return;
                     if (!same.ok() && absl::Now() < deadline) {
                       // A dying node rank 0's listener can still accept, then reset what it
                       // accepted: as a refused connection, try again until the deadline.
                       Reconnect(broke, deadline);
                       return;
                     }
                     reconnect_timer_.cancel();
                     if (!same.ok()) {
                       Lost(absl::StrCat(broke, "; after reconnecting: ", same.status().message()));
                       return;
                     }
                     if (!*same) {
                       Lost(absl::StrCat(broke, "; the store reached again does not know run '",
                                         options_.run_id, "' (node rank 0 started again?)"));
                       return;
                     }
                     spdlog::info("dgt-run: reconnected to node rank 0's store at {}:{}",
                                  options_.master_addr, options_.master_port);
                     Watch(watch_);
                   });
      });
}

void StaticCoordinator::Lost(const std::string& detail) {
  if (lost_) return;
  lost_ = true;
  on_failure_(kExitRendezvousUnavailable,
              absl::StrCat("lost node rank 0 (store host ", options_.master_addr, ":",
                           options_.master_port, "): ", detail));
}

void StaticCoordinator::Report(int exit_status, const std::string& message,
                               std::function<void(absl::Status)> done) {
  Publish(exit_status != 0 ? absl::StrCat(exit_status, " ", message) : "",
          absl::StrCat(exit_status), std::move(done));
}

void StaticCoordinator::ReportStopped(const std::string& signal_name,
                                      std::function<void(absl::Status)> done) {
  Publish(absl::StrCat(kExitLauncherError, " node rank ", options_.node_rank, " was stopped by ",
                       signal_name),
          absl::StrCat(kExitLauncherError), std::move(done));
}

void StaticCoordinator::Publish(const std::string& failed, const std::string& done_value,
                                std::function<void(absl::Status)> done) {
  if (!failed.empty()) control_->Set(keys::StaticFailedKey(options_.run_id), failed);
  control_->Set(keys::StaticDoneKey(options_.run_id, options_.node_rank), done_value);
  if (options_.node_rank != 0 || interrupted_ || peer_lost_) {
    control_->Flush([done = std::move(done)] { done(absl::OkStatus()); });
    return;
  }
  pending_done_ = std::move(done);
  std::vector<std::string> done_keys;
  done_keys.reserve(options_.node_count);
  for (int n = 0; n < options_.node_count; ++n) {
    done_keys.push_back(keys::StaticDoneKey(options_.run_id, n));
  }
  finish_timer_.expires_after(absl::ToChronoMilliseconds(options_.finish_timeout));
  finish_timer_.async_wait(Guarded([this](boost::system::error_code ec) {
    if (ec || !pending_done_) return;
    DescribeMissing();
  }));
  control_->Wait(done_keys, [this](const absl::Status& s) {
    if (!s.ok()) return;  // The connection ended (closing): the timer or Interrupt decides.
    CheckOthersSucceeded(0);
  });
}

void StaticCoordinator::CheckOthersSucceeded(int next) {
  if (!pending_done_) return;
  if (next == options_.node_rank) ++next;  // This node's own status is the agent's.
  if (next >= options_.node_count) {
    Complete(absl::OkStatus());
    return;
  }
  // Every done key exists (the WAIT said so): GET is safe on a 1.x server.
  control_->Get(keys::StaticDoneKey(options_.run_id, next), [this,
                                                             next](absl::StatusOr<std::string> v) {
    if (!pending_done_) return;
    int status = 0;
    if (!v.ok()) {
      Complete(absl::UnavailableError(
          absl::StrCat("cannot read node rank ", next, "'s exit status: ", v.status().message())));
      return;
    }
    if (!absl::SimpleAtoi(*v, &status) || status == 0) {
      CheckOthersSucceeded(next + 1);
      return;
    }
    if (status < 0 || status > 255) status = 1;
    const std::string what =
        absl::StrCat("node rank ", next, " did not succeed (exit status ", *v, ")");
    // Its failure message: the failed key was set before its done key, on the same connection.
    control_->Check({keys::StaticFailedKey(options_.run_id)}, [this, status,
                                                               what](absl::StatusOr<bool> has) {
      if (!pending_done_) return;
      if (!has.ok() || !*has) {
        on_failure_(status, what);
        Complete(absl::OkStatus());
        return;
      }
      control_->Get(keys::StaticFailedKey(options_.run_id),
                    [this, status, what](absl::StatusOr<std::string> f) {
                      if (!pending_done_) return;
                      std::string message = what;
                      if (f.ok()) {
                        size_t space = f->find(' ');
                        if (space != std::string::npos) {
                          absl::StrAppend(&message, "; reported failure: ", f->substr(space + 1));
                        }
                      }
                      on_failure_(status, message);
                      Complete(absl::OkStatus());
                    });
    });
  });
}

void StaticCoordinator::Interrupt() {
  interrupted_ = true;
  if (!pending_done_ || !control_) return;
  // This node's own done/failed keys go out first; then nobody is waited for.
  control_->Flush(
      [this] { Complete(absl::CancelledError("stopped waiting for the other nodes (signal)")); });
}

void StaticCoordinator::Complete(absl::Status status) {
  if (!pending_done_) return;
  finish_timer_.cancel();
  auto done = std::move(pending_done_);
  pending_done_ = nullptr;
  if (probe_) probe_->Close();
  done(std::move(status));
}

void StaticCoordinator::DescribeMissing() {
  const std::string within =
      absl::StrCat(" within the finish timeout of ", absl::FormatDuration(options_.finish_timeout),
                   " (--join-timeout)");
  // Bounded: the probe gets kProbeTimeout, then the run fails with the general message.
  finish_timer_.expires_after(absl::ToChronoMilliseconds(kProbeTimeout));
  finish_timer_.async_wait(Guarded([this, within](boost::system::error_code ec) {
    if (ec) return;
    Complete(absl::DeadlineExceededError(absl::StrCat("not every node reported", within)));
  }));
  struct Probe {
    int next = 0;
    std::vector<int> never_joined;
    std::vector<int> not_reported;
  };
  auto probe = std::make_shared<Probe>();
  probe_ = std::make_shared<StoreConnection>(io_, options_.master_addr, options_.master_port);
  auto step = std::make_shared<std::function<void()>>();
  // `step` holds itself only through the callbacks it hands out, so the chain ends with them.
  std::weak_ptr<std::function<void()>> weak_step = step;
  *step = [this, probe, within, weak_step] {
    auto self = weak_step.lock();
    if (!self || !pending_done_) return;
    if (probe->next == options_.node_count) {
      std::vector<std::string> parts;
      if (!probe->never_joined.empty()) {
        parts.push_back(absl::StrCat(NodeRanks(probe->never_joined), " never joined"));
      }
      if (!probe->not_reported.empty()) {
        parts.push_back(absl::StrCat(NodeRanks(probe->not_reported), " joined but did not finish"));
      }
      if (parts.empty()) parts.emplace_back("not every node reported");
      Complete(absl::DeadlineExceededError(absl::StrCat(absl::StrJoin(parts, "; "), within)));
      return;
    }
    const int n = probe->next++;
    probe_->Check({keys::StaticDoneKey(options_.run_id, n)}, [this, probe, n,
                                                              self](absl::StatusOr<bool> reported) {
      if (!reported.ok()) return;  // The probe's deadline decides.
      if (*reported) {
        (*self)();
        return;
      }
      probe_->Check({keys::StaticJoinedKey(options_.run_id, n)},
                    [probe, n, self](absl::StatusOr<bool> joined) {
                      if (!joined.ok()) return;
                      (*joined ? probe->not_reported : probe->never_joined).push_back(n);
                      (*self)();
                    });
    });
  };
  probe_->Connect(kProbeTimeout, [step](const absl::Status& s) {
    if (s.ok()) (*step)();
  });
}

}  // namespace dgt::agent
