// Server: dgt-rendezvous composed. It owns the run and job state backends (in memory, or etcd
// with --backend=etcd), the rendezvous service (rendezvous/service.h) and the jobs service
// (jobs/jobs_service.h) on one gRPC port with the health service (grpc_server.h), the metrics
// endpoint, and with replicas the leader election (etcd/leader_election.h) whose term fences both
// backends' writes. The two services know nothing of each other: the jobs service reads runs
// through a callback and follows the rendezvous' leadership through
// rendezvous::LeadershipFollower, both wired here.
//
// Thread-safety: Start, the accessors and Shutdown from one thread; the services are thread-safe.
#ifndef DGT_SERVER_SERVER_H_
#define DGT_SERVER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "jobs/jobs_service.h"
#include "rendezvous/metrics_http.h"
#include "rendezvous/service.h"

namespace dgt::rendezvous {
class EtcdRunStateBackend;
}  // namespace dgt::rendezvous
namespace dgt::jobs {
class EtcdJobStateBackend;
}  // namespace dgt::jobs
namespace dgt::etcd {
class LeaderElection;
}  // namespace dgt::etcd

namespace dgt::server {

// --backend=etcd: the state in etcd, shared by replicas that elect one leader.
struct EtcdOptions {
  // Members' client HOST:PORTs (--etcd-endpoints); at least one.
  std::vector<std::string> endpoints;
  // Per etcd call, all attempts together, and per attempt (etcd::ClientOptions).
  absl::Duration call_timeout = absl::Seconds(5);
  absl::Duration attempt_timeout = absl::Seconds(2);
  // Key prefixes of the runs and of the jobs, each ending in '/', neither a prefix of the other
  // (--etcd-prefix, --etcd-jobs-prefix). The leader key is etcd::LeaderKeyFor(prefix).
  std::string prefix = "/dgt/runs/";
  std::string jobs_prefix = "/dgt/jobs/";
  // HOST:PORT agents reach this replica at, told by standbys (--advertise-address). Empty: the
  // --listen host (the host name for a wildcard address) and the bound port.
  std::string advertise_address;
  // TTL of the leader's lease, in seconds (--leader-lease-s, >= 1).
  int64_t lease_ttl_s = 2;
  // The most bytes of one etcd Txn (--etcd-max-request-bytes): etcd's --max-request-bytes, whose
  // default is 1.5 MiB.
  int64_t max_request_bytes = int64_t{3} << 19;
};

struct ServerOptions {
  // The rendezvous service's options (rendezvous/service.h): listen, rounds, keepalive, TLS,
  // token, metrics_listen, max_sessions_per_peer, replica_id. The server fills rounds.backend,
  // elected and on_step_down; an empty replica_id with etcd becomes HOSTNAME:PORT once bound.
  rendezvous::RendezvousServerOptions rendezvous;
  // Serve the jobs service (dgt.jobs.v1.Jobs) on the same port (dgt-rendezvous always does).
  bool serve_jobs = true;
  // The jobs service's options. The server fills agent_token (rendezvous.token), run_status,
  // backend, elected, replica_id and on_fenced; an empty scheduler.rdzv_endpoint becomes the
  // bound address (the host name for a wildcard --listen).
  jobs::JobsServiceOptions jobs;
  // Set: --backend=etcd with replicas; unset: the state in memory, always the leader.
  std::optional<EtcdOptions> etcd;
};

class Server {
 public:
  // Opens the backends, starts the services, the gRPC server and the metrics endpoint, then
  // (with etcd) the election. Errors: the backends' (UNAVAILABLE when etcd does not answer),
  // Unavailable when an address cannot be bound, InvalidArgument for bad TLS files or a
  // malformed address.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  // Shutdown().
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  rendezvous::RendezvousService* rendezvous() const { return rendezvous_.get(); }
  // Null without ServerOptions::serve_jobs.
  jobs::JobsService* jobs() const { return jobs_.get(); }
  // The etcd backends; null in memory (and the jobs one without serve_jobs).
  rendezvous::EtcdRunStateBackend* etcd_runs() const { return etcd_runs_; }
  jobs::EtcdJobStateBackend* etcd_jobs() const { return etcd_jobs_; }
  // With etcd: this replica's id and the address standbys name for it.
  const std::string& replica_id() const { return replica_id_; }
  const std::string& advertise_address() const { return advertise_address_; }
  // The rendezvous service leads, and the jobs service too when served.
  bool is_leader() const;

  // A leader gives its leader key up first (a standby takes over at once); then the metrics
  // endpoint, the jobs service and the rendezvous service stop, and the gRPC server waits up to
  // `grace` for in-flight calls. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

 private:
  class JobsFollower;
  Server();
  absl::Status StartElection(const ServerOptions& options);

  // Declared in the order they are made; Shutdown stops them in reverse.
  std::unique_ptr<rendezvous::RunStateBackend> run_backend_;
  std::unique_ptr<jobs::JobStateBackend> job_backend_;
  rendezvous::EtcdRunStateBackend* etcd_runs_ = nullptr;
  jobs::EtcdJobStateBackend* etcd_jobs_ = nullptr;
  std::unique_ptr<rendezvous::RendezvousService> rendezvous_;
  std::unique_ptr<jobs::JobsService> jobs_;
  std::unique_ptr<JobsFollower> follower_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<rendezvous::MetricsHttpServer> metrics_;
  // Set once the election runs; the services' step-down callbacks resign through it.
  std::atomic<etcd::LeaderElection*> election_ptr_{nullptr};
  // shared_ptr: its deleter is made where the election is (with etcd), so the type may stay
  // incomplete here.
  std::shared_ptr<etcd::LeaderElection> election_;
  std::string replica_id_;
  std::string advertise_address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace dgt::server

#endif  // DGT_SERVER_SERVER_H_
