// dgt-rendezvous replicas for tests against a real etcd (EtcdCluster): an in-process server layer
// (server::Server, as dgt-rendezvous --backend=etcd runs it) on an EtcdRunStateBackend (and, when
// it serves jobs, a fenced EtcdJobStateBackend) with an etcd::LeaderElection.
// Shared by tests/etcd/replica_test.cc and tests/etcd/jobs_replica_test.cc.
//
// Thread-compatible: drive it from the test's thread (the election calls back on its own).
#ifndef DGT_TESTS_ETCD_REPLICA_HARNESS_H_
#define DGT_TESTS_ETCD_REPLICA_HARNESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "etcd/client.h"
#include "jobs/etcd_job_state_backend.h"
#include "rendezvous/etcd_run_state_backend.h"
#include "server/server.h"
#include "tests/etcd/etcd_cluster.h"

namespace dgt::rendezvous::testing {

// Seconds of the replicas' leader lease (etcd::LeaderElectionOptions::lease_ttl_s).
inline constexpr int64_t kLeaseTtlS = 2;

// Skips the test without an etcd binary; fails it instead under CI=true. The caller returns when
// IsSkipped() or HasFailure().
void SkipWithoutEtcd();

// Client options for `cluster`: 2 s per call, 1 s per attempt.
etcd::ClientOptions ClientFor(const etcd::testing::EtcdCluster& cluster);

// One dgt-rendezvous replica. The destructor shuts its server down (the election first).
struct Replica {
  std::string id;
  std::unique_ptr<::dgt::server::Server> server;
  EtcdRunStateBackend* backend = nullptr;             // the server's
  jobs::EtcdJobStateBackend* jobs_backend = nullptr;  // the server's; null unless it serves jobs
  std::string address;                                // "127.0.0.1:<port>"

  ~Replica();
  // The rendezvous service leads (and the jobs service, when it serves jobs).
  bool leader();
};

// Starts replica `id` with `options` (the caller's settings; the etcd options and the replica id
// are filled in here) and run records under `prefix`. A non-empty `jobs_prefix` makes it serve
// jobs too, with job records there. Null (and a test failure) when a part does not start.
std::unique_ptr<Replica> StartReplica(const etcd::testing::EtcdCluster& cluster,
                                      server::ServerOptions options, const std::string& prefix,
                                      const std::string& id, const std::string& jobs_prefix = "");

// Waits up to `timeout` until exactly one of `replicas` leads; returns it (nullptr: none). With
// `two_leaders_fail`, a moment with two leaders fails the test.
Replica* WaitForOneLeader(const std::vector<Replica*>& replicas, absl::Duration timeout,
                          bool two_leaders_fail = false);

}  // namespace dgt::rendezvous::testing

#endif  // DGT_TESTS_ETCD_REPLICA_HARNESS_H_
