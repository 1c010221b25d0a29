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
  if (server) server->Shutdown(absl::Milliseconds(200));
}

bool Replica::leader() { return server->is_leader(); }

std::unique_ptr<Replica> StartReplica(const EtcdCluster& cluster, server::ServerOptions options,
                                      const std::string& prefix, const std::string& id,
                                      const std::string& jobs_prefix) {
  auto r = std::make_unique<Replica>();
  r->id = id;
  const etcd::ClientOptions client = ClientFor(cluster);
  server::EtcdOptions& e = options.etcd.emplace();
  e.endpoints = client.endpoints;
  e.call_timeout = client.call_timeout;
  e.attempt_timeout = client.attempt_timeout;
  e.prefix = prefix;
  e.lease_ttl_s = kLeaseTtlS;
  options.serve_jobs = !jobs_prefix.empty();
  if (options.serve_jobs) e.jobs_prefix = jobs_prefix;
  options.rendezvous.replica_id = id;
  auto started = server::Server::Start(std::move(options));
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return nullptr;
  r->server = *std::move(started);
  r->backend = r->server->etcd_runs();
  r->jobs_backend = r->server->etcd_jobs();
  r->address = absl::StrCat("127.0.0.1:", r->server->port());
  EXPECT_EQ(r->server->advertise_address(), r->address);
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
