#include "server/server.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "rendezvous/credentials.h"
#include "server/grpc_server.h"
#ifdef DGT_WITH_ETCD_BACKEND
#include "etcd/client.h"
#include "etcd/leader_election.h"
#include "jobs/etcd_job_state_backend.h"
#include "rendezvous/etcd_run_state_backend.h"
#endif

namespace dgt::server {
namespace {

// This machine's host name ("localhost" if it has none).
std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

bool IsWildcard(const std::string& host) { return host == "0.0.0.0" || host == "::"; }

}  // namespace

// The jobs service follows the rendezvous service's leadership.
class Server::JobsFollower final : public rendezvous::LeadershipFollower {
 public:
  explicit JobsFollower(jobs::JobsService* jobs) : jobs_(jobs) {}
  absl::Status TakeOver() override { return jobs_->TakeOver(); }
  void StepDown(const std::string& message) override { jobs_->StepDown(message); }
  void SetLeader(const std::string& address) override { jobs_->SetLeader(address); }

 private:
  jobs::JobsService* const jobs_;
};

Server::Server() = default;

Server::~Server() { Shutdown(); }

bool Server::is_leader() const {
  return rendezvous_->is_leader() && (jobs_ == nullptr || jobs_->is_leader());
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server());
  rendezvous::RendezvousServerOptions& rdzv = options.rendezvous;
  if (options.etcd) {
#ifdef DGT_WITH_ETCD_BACKEND
    const EtcdOptions& e = *options.etcd;
    etcd::ClientOptions client;
    client.endpoints = e.endpoints;
    client.call_timeout = e.call_timeout;
    client.attempt_timeout = e.attempt_timeout;
    rendezvous::EtcdRunStateBackend::Options runs;
    runs.client = client;
    runs.prefix = e.prefix;
    runs.leader_key = etcd::LeaderKeyFor(e.prefix);
    runs.max_request_bytes = e.max_request_bytes;
    auto opened = rendezvous::EtcdRunStateBackend::Open(runs);
    if (!opened.ok()) return opened.status();
    server->etcd_runs_ = opened->get();
    server->run_backend_ = *std::move(opened);
    rdzv.rounds.backend = server->run_backend_.get();
    rdzv.elected = true;
    Server* raw = server.get();
    rdzv.on_step_down = [raw](const absl::Status& why) {
      if (etcd::LeaderElection* election = raw->election_ptr_.load()) election->Resign(why);
    };
    if (options.serve_jobs) {
      jobs::EtcdJobStateBackend::Options job_records;
      job_records.client = client;
      job_records.prefix = e.jobs_prefix;
      job_records.leader_key = runs.leader_key;
      auto jobs_opened = jobs::EtcdJobStateBackend::Open(job_records);
      if (!jobs_opened.ok()) return jobs_opened.status();
      server->etcd_jobs_ = jobs_opened->get();
      server->job_backend_ = *std::move(jobs_opened);
      options.jobs.backend = server->job_backend_.get();
    }
    spdlog::info("dgt-rendezvous: run state in etcd at {} under {}",
                 absl::StrJoin(e.endpoints, ","), e.prefix);
#else
    return absl::InvalidArgumentError(
        "--backend=etcd: this dgt-rendezvous was built without etcd (install etcd's protos: "
        "scripts/install-deps.sh, then reconfigure)");
#endif
  }

  auto listen = ResolveListenAddress(rdzv.listen);
  if (!listen.ok()) return listen.status();
  auto credentials = rendezvous::MakeServerCredentials(rdzv.tls);
  if (!credentials.ok()) return credentials.status();
  server->rendezvous_ = std::make_unique<rendezvous::RendezvousService>(
      rdzv.rounds, rdzv.token, rdzv.max_sessions_per_peer, rdzv.elected, rdzv.replica_id,
      rdzv.on_step_down);
  GrpcServerOptions grpc_options;
  grpc_options.services.push_back(server->rendezvous_.get());
  if (options.serve_jobs) {
    jobs::JobsServiceOptions jobs_options = options.jobs;
    jobs_options.agent_token = rdzv.token;
    rendezvous::RendezvousService* runs = server->rendezvous_.get();
    jobs_options.run_status = [runs](const std::string& id) { return runs->RunStatusOf(id); };
    jobs_options.elected = rdzv.elected;
    jobs_options.replica_id = rdzv.replica_id;
    jobs_options.on_fenced = rdzv.on_step_down;
    auto jobs = jobs::JobsService::Create(std::move(jobs_options));
    if (!jobs.ok()) return jobs.status();
    server->jobs_ = *std::move(jobs);
    server->follower_ = std::make_unique<JobsFollower>(server->jobs_.get());
    server->rendezvous_->set_follower(server->follower_.get());
    grpc_options.services.push_back(server->jobs_.get());
  }
  grpc_options.listen = *listen;
  grpc_options.credentials = *credentials;
  grpc_options.keepalive_time_ms = rdzv.keepalive.keepalive_time_ms;
  grpc_options.keepalive_timeout_ms = rdzv.keepalive.keepalive_timeout_ms;
  auto grpc_server = StartGrpcServer(grpc_options, &server->port_);
  if (!grpc_server.ok()) return grpc_server.status();
  server->grpc_server_ = *std::move(grpc_server);
  if (server->jobs_) {
    std::string endpoint = options.jobs.scheduler.rdzv_endpoint;
    if (endpoint.empty()) {
      auto hp = ParseListenAddress(*listen, "--listen");
      std::string host = hp.ok() ? hp->host : "127.0.0.1";
      if (IsWildcard(host)) host = HostName();
      endpoint = FormatHostPort(host, static_cast<uint16_t>(server->port_));
    }
    server->jobs_->set_rdzv_endpoint(endpoint);
  }
  if (!rdzv.metrics_listen.empty()) {
    auto hp = ParseListenAddress(rdzv.metrics_listen, "--metrics-listen");
    if (!hp.ok()) return hp.status();
    rendezvous::RendezvousService* service = server->rendezvous_.get();
    server->metrics_ = std::make_unique<rendezvous::MetricsHttpServer>(
        [service] { return service->RenderMetrics(); });
    if (absl::Status s = server->metrics_->Start(hp->host, hp->port); !s.ok()) return s;
  }
  if (options.etcd) {
    if (absl::Status s = server->StartElection(options); !s.ok()) return s;
  }
  return server;
}

absl::Status Server::StartElection(const ServerOptions& options) {
#ifdef DGT_WITH_ETCD_BACKEND
  const EtcdOptions& e = *options.etcd;
  // The defaults take the bound port (--listen may say port 0) and, for a wildcard address, the
  // host name, which other machines can reach (as the jobs service's --advertise-endpoint).
  const std::string host_name = HostName();
  replica_id_ = options.rendezvous.replica_id;
  if (replica_id_.empty()) {
    replica_id_ = absl::StrCat(host_name, ":", port_);
    rendezvous_->SetReplicaId(replica_id_);
    if (jobs_ != nullptr) jobs_->SetReplicaId(replica_id_);
  }
  advertise_address_ = e.advertise_address;
  if (advertise_address_.empty()) {
    auto listen = ParseListenAddress(options.rendezvous.listen, "--listen");
    std::string host = listen.ok() ? listen->host : "127.0.0.1";
    if (host.empty() || IsWildcard(host)) host = host_name;
    advertise_address_ = FormatHostPort(host, port_);
  }
  etcd::LeaderElectionOptions election;
  election.client.endpoints = e.endpoints;
  election.client.call_timeout = e.call_timeout;
  election.client.attempt_timeout = e.attempt_timeout;
  election.key = etcd::LeaderKeyFor(e.prefix);
  election.replica_id = replica_id_;
  election.address = advertise_address_;
  election.lease_ttl_s = e.lease_ttl_s;
  rendezvous::RendezvousService* service = rendezvous_.get();
  rendezvous::EtcdRunStateBackend* runs = etcd_runs_;
  jobs::EtcdJobStateBackend* job_records = etcd_jobs_;
  election.on_won = [service, runs, job_records](int64_t term) {
    runs->SetLeaderFence(term);
    if (job_records != nullptr) job_records->SetLeaderFence(term);
    service->TakeOver();
  };
  election.on_lost = [service, runs, job_records](const absl::Status& why) {
    service->StepDown(why);
    runs->SetLeaderFence(0);
    if (job_records != nullptr) job_records->SetLeaderFence(0);
  };
  election.on_leader = [service](const etcd::LeaderInfo& leader) {
    service->SetLeader(leader.replica, leader.address);
  };
  auto started = etcd::LeaderElection::Start(std::move(election));
  if (!started.ok()) return started.status();
  election_ = *std::move(started);
  election_ptr_.store(election_.get());
  spdlog::info("dgt-rendezvous: replica {} (agents reach it at {}) campaigns for {} (lease {} s)",
               replica_id_, advertise_address_, etcd::LeaderKeyFor(e.prefix), e.lease_ttl_s);
  return absl::OkStatus();
#else
  return absl::InvalidArgumentError("--backend=etcd: this dgt-rendezvous was built without etcd");
#endif
}

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
#ifdef DGT_WITH_ETCD_BACKEND
  if (election_) {
    // A leader gives its key up first, so that a standby takes over at once.
    election_ptr_.store(nullptr);
    election_->Stop();
  }
#endif
  if (metrics_) metrics_->Stop();
  if (jobs_) {
    if (rendezvous_) rendezvous_->set_follower(nullptr);
    jobs_->Stop();
  }
  if (rendezvous_) rendezvous_->Stop();
  if (grpc_server_) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
    grpc_server_->Wait();
  }
}

}  // namespace dgt::server
