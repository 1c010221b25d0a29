#include "etcd/leader_election.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"

namespace dgt::etcd {

std::string LeaderKeyFor(absl::string_view prefix) {
  if (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  return absl::StrCat(prefix, ".leader");
}

std::string EncodeLeaderInfo(const LeaderInfo& info) {
  return nlohmann::json{{"replica", info.replica}, {"address", info.address}}.dump();
}

LeaderInfo DecodeLeaderInfo(absl::string_view value) {
  nlohmann::json j = nlohmann::json::parse(value.begin(), value.end(), nullptr,
                                           /*allow_exceptions=*/false);
  LeaderInfo info;
  if (!j.is_object() || !j.contains("replica") || !j["replica"].is_string()) return info;
  info.replica = j["replica"].get<std::string>();
  if (j.contains("address") && j["address"].is_string()) {
    info.address = j["address"].get<std::string>();
  }
  return info;
}

LeaderElection::LeaderElection(LeaderElectionOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Start(
    LeaderElectionOptions options) {
  if (options.key.empty()) return absl::InvalidArgumentError("replica election: empty leader key");
  if (options.replica_id.empty()) {
    return absl::InvalidArgumentError("--replica-id: must not be empty");
  }
  if (options.lease_ttl_s < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--leader-lease-s: must be >= 1, got ", options.lease_ttl_s));
  }
  std::unique_ptr<LeaderElection> election(new LeaderElection(std::move(options)));
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(election->options_.client);
  if (!client.ok()) return client.status();
  election->client_ = *std::move(client);
  election->thread_ = std::thread([e = election.get()] { e->Loop(); });
  return election;
}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void LeaderElection::Resign(const absl::Status& why) {
  MutexLock lock(&mu_);
  if (!leader_ || woken_) return;
  wake_ = why;
  woken_ = true;
  cv_.SignalAll();
}

bool LeaderElection::is_leader() const {
  MutexLock lock(&mu_);
  return leader_;
}

int64_t LeaderElection::terms_won() const {
  MutexLock lock(&mu_);
  return terms_won_;
}

bool LeaderElection::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (!stopping_ && !woken_) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return stopping_;
}

void LeaderElection::Loop() {
  // Pause after a failed campaign (etcd unreachable): doubling from 100 ms to one lease TTL.
  absl::Duration backoff = absl::Milliseconds(100);
  int64_t warned_same_id = 0;  // The leader key's create revision last warned about.
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      woken_ = false;
      wake_ = absl::OkStatus();
    }
    if (stale_lease_ != 0) {
      // The last term's key, if etcd still has it, goes now rather than after its TTL.
      absl::Status revoked = client_->LeaseRevoke(stale_lease_);
      if (revoked.ok() || absl::IsNotFound(revoked)) stale_lease_ = 0;
    }
    absl::StatusOr<Lease> lease = client_->LeaseGrant(options_.lease_ttl_s);
    absl::StatusOr<TxnResult> txn = absl::UnknownError("no lease");
    if (!lease.ok()) {
      txn = lease.status();
    } else {
      txn = client_->Txn(
          {Compare::CreateRevisionIs(options_.key, 0)},
          {Op::Put(options_.key, EncodeLeaderInfo({options_.replica_id, options_.address}),
                   lease->id)},
          {Op::Get(options_.key)});
    }
    if (!txn.ok()) {
      spdlog::warn("rendezvous: replica {} cannot campaign for {}: {}", options_.replica_id,
                   options_.key, txn.status().ToString());
      if (options_.on_leader) options_.on_leader(LeaderInfo{});
      if (WaitFor(backoff)) return;
      backoff = std::min(backoff * 2, absl::Seconds(options_.lease_ttl_s));
      continue;
    }
    backoff = absl::Milliseconds(100);
    if (txn->succeeded) {
      Lead(lease->id, txn->revision);
      continue;
    }
    // A standby: the lease granted for the claim ends on its own (nothing is attached to it).
    LeaderInfo leader;
    int64_t holder = 0;
    if (!txn->results.empty() && !txn->results[0].kvs.empty()) {
      leader = DecodeLeaderInfo(txn->results[0].kvs[0].value);
      holder = txn->results[0].kvs[0].create_revision;
    }
    if (leader.replica == options_.replica_id && holder != warned_same_id) {
      // Another process campaigns under this id (its lease, not this one's): both would answer
      // as "replica ID", and an operator could not tell them apart.
      warned_same_id = holder;
      spdlog::warn(
          "rendezvous: replica {}: the leader key {} names this replica's id, under another "
          "lease (leader address {}): another replica runs with the same --replica-id; give each "
          "replica its own",
          options_.replica_id, options_.key, leader.address.empty() ? "unknown" : leader.address);
    }
    if (options_.on_leader) options_.on_leader(leader);
    absl::StatusOr<std::unique_ptr<Watcher>> watch =
        client_->Watch(options_.key, /*prefix=*/false, txn->revision + 1,
                       [this, holder](const std::vector<Event>& events) {
                         for (const Event& e : events) {
                           if (e.type == Event::Type::kDelete || e.kv.create_revision != holder) {
                             MutexLock lock(&mu_);
                             woken_ = true;
                             cv_.SignalAll();
                           }
                         }
                       });
    // Claims again when the key goes, and at least every TTL (a watch that broke for good).
    if (WaitFor(absl::Seconds(options_.lease_ttl_s))) return;
  }
}

void LeaderElection::Lead(int64_t lease, int64_t term) {
  absl::StatusOr<std::unique_ptr<LeaseKeeper>> keeper =
      client_->KeepAlive(lease, options_.lease_ttl_s, [this](const absl::Status& lost) {
        MutexLock lock(&mu_);
        if (woken_) return;
        wake_ = absl::UnavailableError(
            absl::StrCat("its etcd lease of ", options_.key, " ended: ", lost.message()));
        woken_ = true;
        cv_.SignalAll();
      });
  absl::StatusOr<std::unique_ptr<Watcher>> watch = client_->Watch(
      options_.key, /*prefix=*/false, term + 1, [this, term](const std::vector<Event>& events) {
        for (const Event& e : events) {
          if (e.type == Event::Type::kPut && e.kv.create_revision == term) continue;
          MutexLock lock(&mu_);
          if (woken_) return;
          wake_ = absl::UnavailableError(
              absl::StrCat("the leader key ", options_.key,
                           e.type == Event::Type::kDelete ? " was deleted" : " was replaced"));
          woken_ = true;
          cv_.SignalAll();
        }
      });
  bool stopping = false;
  {
    MutexLock lock(&mu_);
    if (!keeper.ok() || !watch.ok()) {
      woken_ = true;
      wake_ = !keeper.ok() ? keeper.status() : watch.status();
    }
    leader_ = true;
    ++terms_won_;
  }
  spdlog::info("rendezvous: replica {} is the leader ({} created at revision {})",
               options_.replica_id, options_.key, term);
  if (options_.on_won) options_.on_won(term);
  absl::Status why;
  {
    MutexLock lock(&mu_);
    while (!stopping_ && !woken_) cv_.Wait(&mu_);
    stopping = stopping_;
    why = woken_ ? wake_ : absl::CancelledError("the replica is stopping");
    leader_ = false;
  }
  // The service says it (RendezvousService::StepDown, with the sessions it ends): once.
  spdlog::debug("rendezvous: replica {} lost its leadership: {}", options_.replica_id,
                std::string(why.message()));
  if (options_.on_lost) options_.on_lost(why);
  if (watch.ok()) watch->reset();
  if (keeper.ok()) keeper->reset();
  // Give the key up now (a standby takes over without waiting for the TTL); when etcd does not
  // answer, the next campaign tries again.
  absl::Status revoked = client_->LeaseRevoke(lease);
  if (!revoked.ok() && !absl::IsNotFound(revoked) && !stopping) stale_lease_ = lease;
}

}  // namespace dgt::etcd
