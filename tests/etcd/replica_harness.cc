#include "tests/etcd/replica_harness.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dgt::rendezvous::testing {

using etcd::testing::EtcdCluster;

void SkipWithoutEtcd() {
  if (!EtcdCluster::FindEtcd().empty()) return;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    FAIL() << "no etcd binary under CI=true; scripts/install-deps.sh installs etcd-server";
  }
  GTEST_SKIP() << "no etcd binary ($DGT_ETCD_BIN, PATH, /usr/bin/etcd)";
}

etcd::ClientOptions ClientFor(const EtcdCluster& cluster) {
  etcd::ClientOptions o;
  o.endpoints = cluster.endpoints();
  o.call_timeout = absl::Seconds(2);
  o.attempt_timeout = absl::Seconds(1);
  return o;
}

Replica::~Replica() {
  election_ptr.store(nullptr);
  election.reset();
  if (server) server->Shutdown(absl::Milliseconds(200));
}

bool Replica::leader() {
  return server->service()->is_leader() && (jobs_backend == nullptr || server->jobs()->is_leader());
}

std::unique_ptr<Replica> StartReplica(const EtcdCluster& cluster, RendezvousServerOptions options,
                                      const std::string& prefix, const std::string& id,
                                      const std::string& jobs_prefix) {
  auto r = std::make_unique<Replica>();
  r->id = id;
  EtcdRunStateBackend::Options b;
  b.client = ClientFor(cluster);
  b.prefix = prefix;
  b.leader_key = LeaderKeyFor(b.prefix);
  auto backend = EtcdRunStateBackend::Open(b);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  r->backend = *std::move(backend);
  if (!jobs_prefix.empty()) {
    jobs::EtcdJobStateBackend::Options j;
    j.client = ClientFor(cluster);
    j.prefix = jobs_prefix;
    j.leader_key = b.leader_key;
    auto jobs_backend = jobs::EtcdJobStateBackend::Open(j);
    EXPECT_TRUE(jobs_backend.ok()) << jobs_backend.status();
    if (!jobs_backend.ok()) return nullptr;
    r->jobs_backend = *std::move(jobs_backend);
    options.serve_jobs = true;
    options.jobs.backend = r->jobs_backend.get();
  }

  options.rounds.backend = r->backend.get();
  options.elected = true;
  options.replica_id = id;
  Replica* raw = r.get();
  options.on_step_down = [raw](const absl::Status& why) {
    if (auto* e = raw->election_ptr.load()) e->Resign(why);
  };
  auto server = RendezvousServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  r->server = *std::move(server);
  r->address = absl::StrCat("127.0.0.1:", r->server->port());
  ReplicaElectionOptions e;
  e.client = ClientFor(cluster);
  e.key = b.leader_key;
  e.replica_id = id;
  e.address = r->address;
  e.lease_ttl_s = kLeaseTtlS;
  RendezvousService* service = r->server->service();
  EtcdRunStateBackend* fence = r->backend.get();
  jobs::EtcdJobStateBackend* jobs_fence = r->jobs_backend.get();
  e.on_won = [service, fence, jobs_fence](int64_t term) {
    fence->SetLeaderFence(term);
    if (jobs_fence != nullptr) jobs_fence->SetLeaderFence(term);
    service->TakeOver();
  };
  e.on_lost = [service, fence, jobs_fence](const absl::Status& why) {
    service->StepDown(why);
    fence->SetLeaderFence(0);
    if (jobs_fence != nullptr) jobs_fence->SetLeaderFence(0);
  };
  e.on_leader = [service](const LeaderInfo& l) { service->SetLeader(l.replica, l.address); };
  auto election = ReplicaElection::Start(std::move(e));
  EXPECT_TRUE(election.ok()) << election.status();
  if (!election.ok()) return nullptr;
  r->election = *std::move(election);
  r->election_ptr.store(r->election.get());
  return r;
}

Replica* WaitForOneLeader(const std::vector<Replica*>& replicas, absl::Duration timeout,
                          bool two_leaders_fail) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    Replica* leader = nullptr;
    int leaders = 0;
    for (Replica* r : replicas) {
      if (r->leader()) {
        leader = r;
        ++leaders;
      }
    }
    if (leaders == 1) return leader;
    if (two_leaders_fail) {
      EXPECT_LE(leaders, 1) << "two replicas lead at once";
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return nullptr;
}

}  // namespace dgt::rendezvous::testing
