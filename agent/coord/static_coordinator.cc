#include "agent/coord/static_coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/coord/static_coordinator_internal.h"
#include "agent/exit_codes.h"
#include "common/logging.h"
#include "common/store_keys.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;
using static_coordinator_internal::kReconnectBackstop;
using static_coordinator_internal::kRequestTimeout;
using static_coordinator_internal::kStoppedPeerGrace;
using static_coordinator_internal::StoppedBySignal;

}  // namespace

StaticCoordinator::StaticCoordinator(asio::io_context& io, Options options)
    : io_(io),
      options_(std::move(options)),
      finish_timer_(io),
      reconnect_timer_(io),
      heartbeat_timer_(io),
      stopped_peer_timer_(io) {}

StaticCoordinator::~StaticCoordinator() {
  // Closing the clients runs their pending callbacks (Cancelled): none may reach the owner.
  closing_ = true;
  pending_done_ = nullptr;
  reconnect_timer_.cancel();
  heartbeat_timer_.cancel();
  stopped_peer_timer_.cancel();
  if (monitor_) monitor_->Close();
  if (watch_) watch_->Close();
  if (control_) control_->Close();
  if (probe_) probe_->Close();
}

std::unique_ptr<store::AsyncClient> StaticCoordinator::NewClient() {
  store::AsyncClientOptions o;
  o.host = options_.master_addr;
  o.port = static_cast<uint16_t>(options_.master_port);
  // torch 1.x frames, keys named as torch clients name them: any TCPStore server will do.
  o.protocol = store::Protocol::kV1;
  o.key_prefix = "/";
  return std::make_unique<store::AsyncClient>(io_.get_executor(), std::move(o));
}

std::string StaticCoordinator::ClaimToken() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", ::getpid(), ":", absl::ToUnixNanos(absl::Now()));
}

void StaticCoordinator::Start(const std::function<void(absl::Status)>& connected,
                              const FailureCallback& on_failure) {
  watch_ = NewClient();
  control_ = NewClient();
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
    Watch(watch_.get());
  });
  control_->Connect(options_.connect_timeout, [this, both](const absl::Status& s) {
    // Node rank 0 tells a node that never came from one that came but did not finish.
    if (!s.ok() || options_.node_rank == 0) {
      if (s.ok()) {
        control_->Set(keys::StaticJoinedKey(options_.run_id, options_.node_rank), "1",
                      kRequestTimeout);
      }
      both(s);
      return;
    }
    // Claims this node rank: a second agent given the same --node-rank (or one restarted while
    // the run goes on) would otherwise run the same ranks twice, unnoticed.
    const std::string key = keys::StaticJoinedKey(options_.run_id, options_.node_rank);
    const std::string token = ClaimToken();
    control_->CompareSet(
        key, "", token, kRequestTimeout, [this, both, token](absl::StatusOr<std::string> held) {
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
  monitor_ = NewClient();
  monitor_->Connect(options_.connect_timeout, [this, both](const absl::Status& s) {
    both(s);
    if (s.ok()) CheckPeers(1);
  });
}

void StaticCoordinator::Heartbeat() {
  if (closing_) return;
  control_->Set(keys::StaticAliveKey(options_.run_id, options_.node_rank), absl::StrCat(++beats_),
                kRequestTimeout);
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
  monitor_->Check({alive}, kRequestTimeout, [this, next, alive](absl::StatusOr<bool> seen) {
    if (!seen.ok() || closing_) return;
    if (!*seen) {
      // Not joined yet (or never: the finish timeout names it).
      CheckPeers(next + 1);
      return;
    }
    monitor_->Get(alive, kRequestTimeout, [this, next](absl::StatusOr<std::string> v) {
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
      monitor_->Check({keys::StaticDoneKey(options_.run_id, next)}, kRequestTimeout,
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
                absl::StrCat(kExitRendezvousUnavailable, " ", message), kRequestTimeout);
  on_failure_(kExitRendezvousUnavailable, message, false);
  // A pending Report no longer waits for the others: the run has failed.
  monitor_->Flush(kRequestTimeout, [this](const absl::Status&) {
    if (!closing_) Complete(absl::OkStatus());
  });
}

void StaticCoordinator::Watch(store::AsyncClient* conn) {
  // For as long as the run lasts: the connection's end or this coordinator's ends it.
  conn->Wait(
      {keys::StaticFailedKey(options_.run_id)}, absl::InfiniteDuration(),
      [this, conn](const absl::Status& ws) {
        if (closing_) return;
        if (!ws.ok()) {
          OnWatchLost(std::string(ws.message()));
          return;
        }
        // Node rank 0 waiting for the others reads every node's status itself (naming the
        // node).
        if (options_.node_rank == 0 && (pending_done_ || peer_lost_)) return;
        conn->Get(
            keys::StaticFailedKey(options_.run_id), kRequestTimeout,
            [this](absl::StatusOr<std::string> v) {
              if (closing_) return;
              int status = 1;
              std::string message = "a worker failed on another node";
              if (v.ok()) {
                size_t space = v->find(' ');
                if (absl::SimpleAtoi(v->substr(0, space), &status) && space != std::string::npos) {
                  message = v->substr(space + 1);
                }
              }
              if (!StoppedBySignal(message)) {
                on_failure_(status, message, false);
                return;
              }
              // Another node was stopped by an outside signal: a scheduler's cancel (scancel, a
              // pod deletion) reaches this node within moments too, and its own signal, heard
              // first, decides its status (143, not 1).
              stopped_peer_timer_.expires_after(absl::ToChronoMilliseconds(kStoppedPeerGrace));
              stopped_peer_timer_.async_wait(
                  Guarded([this, status, message](boost::system::error_code ec) {
                    if (ec || closing_) return;
                    on_failure_(status, message, true);
                  }));
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
  // Replacing watch_ closes the broken one (its callbacks see watch_ moved on).
  watch_ = NewClient();
  store::AsyncClient* raw = watch_.get();
  raw->Connect(std::max(deadline - absl::Now(), absl::ZeroDuration()), [this, raw, broke, deadline](
                                                                           const absl::Status& s) {
    if (closing_ || lost_ || watch_.get() != raw) return;
    if (!s.ok()) {
      reconnect_timer_.cancel();
      Lost(absl::StrCat(broke, " and could not be reached again within ",
                        absl::FormatDuration(options_.reconnect_timeout), ": ", s.message()));
      return;
    }
    // The same store still holds this node's joined key; one node rank 0 started afresh does
    // not.
    raw->Check({keys::StaticJoinedKey(options_.run_id, options_.node_rank)}, kRequestTimeout,
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
                 Watch(raw);
               });
  });
}

void StaticCoordinator::Lost(const std::string& detail) {
  if (lost_) return;
  lost_ = true;
  on_failure_(kExitRendezvousUnavailable,
              absl::StrCat("lost node rank 0 (store host ", options_.master_addr, ":",
                           options_.master_port, "): ", detail),
              false);
}

}  // namespace dgt::agent
