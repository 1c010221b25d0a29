#include "agent/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/exit_codes.h"
#include "agent/log_dir.h"
#include "agent/log_line_prefix.h"
#include "agent/rendezvous_host.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/store_keys.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

bool IsIpLiteral(const std::string& text) {
  in6_addr buf;
  return inet_pton(AF_INET, text.c_str(), &buf) == 1 ||
         inet_pton(AF_INET6, text.c_str(), &buf) == 1;
}

std::string DefaultNodeId() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", ::getpid());
}

std::string RandomRunId() {
  std::random_device rd;
  return absl::StrCat("standalone-", absl::Hex(rd(), absl::kZeroPad8));
}

std::string SignalName(int sig) {
  const char* name = sigabbrev_np(sig);
  return name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", sig);
}

// Whether a Session stream that ended with `status` was refused by the service (a bad token, a
// per-peer session limit, a request it does not accept): joining again would be refused again.
// Anything else (UNAVAILABLE, CANCELLED, ...) means the service went away.
bool IsRefusal(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::UNIMPLEMENTED:
      return true;
    default:
      return false;
  }
}

// Whether `a` is the round `held` (the service's answer to a rejoin), not a new round that merely
// has the same number (a service that started the run over).
bool IsSameRound(const rdzv_v1::Assignment& a, const rdzv_v1::Assignment& held) {
  return a.run_id() == held.run_id() && a.round() == held.round() &&
         a.node_rank() == held.node_rank() && a.node_count() == held.node_count() &&
         a.world_size() == held.world_size() && a.first_global_rank() == held.first_global_rank() &&
         a.master_addr() == held.master_addr() && a.master_port() == held.master_port() &&
         a.restart_count() == held.restart_count();
}

// Signals that are forwarded without stopping the job (schedulers use them to announce a
// preemption; the workers decide what to do).
bool IsNotifySignal(int sig) { return sig == SIGUSR1 || sig == SIGUSR2; }

std::string Rfc3339Millis(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// Appends a torch 1.x TCPStore string field: u64 length (host order) and the bytes.
void AppendField(std::string* out, absl::string_view s) {
  uint64_t n = s.size();
  out->append(reinterpret_cast<const char*>(&n), sizeof n);
  out->append(s.data(), s.size());
}

// Fire-and-forget SET of one key on a TCPStore-protocol server (1.x SET: opcode 0, key, value;
// no reply), bounded by a deadline.
class StoreSetter : public std::enable_shared_from_this<StoreSetter> {
 public:
  StoreSetter(asio::io_context& io, std::string frame)
      : socket_(io), timer_(io), frame_(std::move(frame)) {}
  void Run(const std::string& host, int port) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(host, ec);
    if (ec) return;
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([self](boost::system::error_code e) {
      if (!e) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    socket_.async_connect(asio::ip::tcp::endpoint(address, static_cast<uint16_t>(port)),
                          [self](boost::system::error_code e) {
                            if (e) return self->Done(e);
                            asio::async_write(
                                self->socket_, asio::buffer(self->frame_),
                                [self](boost::system::error_code e2, size_t) { self->Done(e2); });
                          });
  }

 private:
  void Done(boost::system::error_code ec) {
    if (ec) spdlog::warn("dgt-run: cannot publish a restart in the store: {}", ec.message());
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  std::string frame_;
};

}  // namespace

Agent::Agent(LaunchOptions options)
    : options_(std::move(options)),
      work_(asio::make_work_guard(io_)),
      signals_(io_),
      join_timer_(io_),
      drain_timer_(io_),
      reconnect_timer_(io_),
      marks_timer_(io_),
      tf_timer_(io_) {}

Agent::~Agent() {
  // A connection attempt in flight ends within its (1 s) deadline; its session is closed here,
  // while the loop its callbacks post to still exists.
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_ && reconnect_result_->ok()) (**reconnect_result_)->Close();
    reconnect_result_.reset();
  }
  // Writes this node's last done mark (bounded by the store timeout) before the store goes.
  round_tasks_.reset();
  if (tf_tasks_) tf_tasks_->DropQueued();
  tf_tasks_.reset();
  workers_.reset();
  retired_.clear();
  for (int fd : tf_reservations_) ::close(fd);
  if (log_root_is_temp_ && !log_root_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(log_root_, ec);
  }
  if (session_) session_->Close();
  if (store_) store_->Stop();
  // Quietly: the agent's own last stderr line says how the run ended (docs/EXIT_CODES.md).
  if (embedded_rendezvous_) embedded_rendezvous_->Shutdown(absl::Seconds(1), /*quiet=*/true);
}

absl::Status Agent::Prepare() {
  if (options_.node_id.empty()) options_.node_id = DefaultNodeId();
  if (!options_.logs_specs.empty()) {
    // torchrun loads a Python LogsSpecs class by this name; dgt-run has no Python in-process.
    spdlog::warn(
        "dgt-run: --logs-specs={} is ignored: dgt-run's log layout is fixed (--log-dir, -r, -t)",
        options_.logs_specs);
  }
  if (options_.rdzv_backend == "static" && options_.max_nodes > 1 &&
      options_.rdzv_endpoint.empty()) {
    return PrepareStatic();
  }

  std::optional<HostPort> host_candidate;  // The endpoint, which this agent may host.
  std::optional<HostPort> endpoint;
  if (!options_.rdzv_endpoint.empty()) {
    DGT_ASSIGN_OR_RETURN(endpoint,
                         ParseHostPortOrFree(options_.rdzv_endpoint, 29400, "--rdzv-endpoint"));
  }
  if (options_.rdzv_endpoint.empty()) {
    // --standalone, or one node without an endpoint: embed the rendezvous on a free port.
    auto server = rendezvous::RendezvousServer::Start(rendezvous::RendezvousServerOptions{});
    if (!server.ok()) return server.status();
    embedded_rendezvous_ = std::move(*server);
    rdzv_endpoint_ = absl::StrCat("127.0.0.1:", embedded_rendezvous_->port());
    if (options_.run_id == "none") options_.run_id = RandomRunId();
  } else if (endpoint->port == 0) {
    // torchrun 2.x's "--rdzv-endpoint HOST:0" (one node; launch_options refuses more): the
    // rendezvous is embedded on a free port of HOST, which must be this host's.
    auto ip = ResolveToIp(endpoint->host);
    if (!ip.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-endpoint: ", ip.status().message()));
    }
    if (auto s = CheckLocalAddress(*ip); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-endpoint=", options_.rdzv_endpoint,
                                                     ": port 0 asks for a free port here, but ",
                                                     s.message()));
    }
    rendezvous::RendezvousServerOptions server_options;
    server_options.listen = FormatHostPort(*ip, 0);
    auto server = rendezvous::RendezvousServer::Start(server_options);
    if (!server.ok()) return server.status();
    embedded_rendezvous_ = std::move(*server);
    rdzv_endpoint_ = FormatHostPort(*ip, static_cast<uint16_t>(embedded_rendezvous_->port()));
    spdlog::info("dgt-run: --rdzv-endpoint={}: rendezvous on the free port {}",
                 options_.rdzv_endpoint, rdzv_endpoint_);
  } else {
    auto hp = ParseHostPort(options_.rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!hp.ok()) return hp.status();
    auto ip = ResolveToIp(hp->host);
    if (!ip.ok()) {
      // A name that does not resolve yet (a Kubernetes service's DNS record appears late) is an
      // unreachable service: retrying the node later may work.
      prepare_exit_status_ = kExitRendezvousUnavailable;
      return absl::UnavailableError(absl::StrCat("--rdzv-endpoint: ", ip.status().message()));
    }
    rdzv_endpoint_ = FormatHostPort(*ip, hp->port);
    host_candidate = HostPort{*ip, hp->port};
  }

  // MASTER_ADDR must be an address other nodes reach: --local-addr (resolved here), else the
  // local address of the interface that routes to the rendezvous service.
  if (!options_.local_addr.empty()) {
    if (IsIpLiteral(options_.local_addr)) {
      advertised_address_ = options_.local_addr;
    } else {
      auto ip = ResolveToIp(options_.local_addr);
      if (!ip.ok())
        return absl::InvalidArgumentError(absl::StrCat("--local-addr: ", ip.status().message()));
      advertised_address_ = *ip;
    }
  } else {
    auto hp = ParseHostPort(rdzv_endpoint_, 29400, "rendezvous endpoint");
    auto local = RoutedLocalAddress(hp->host);
    if (!local.ok()) return local.status();
    advertised_address_ = *local;
  }

  // The store listens before we join, so node rank 0's MASTER_PORT is ready when the round
  // closes; other nodes stop theirs once assigned.
  store::ServerOptions store_options;
  store_options.host = advertised_address_;
  if (options_.master_port_set && options_.max_nodes == 1) {
    store_options.port = static_cast<uint16_t>(options_.master_port);
  }
  store_ = std::make_unique<store::Server>(store_options);
  if (auto s = store_->Start(); !s.ok()) return s;

  rdzv_tls_ = {options_.rdzv_tls_cert, options_.rdzv_tls_key, options_.rdzv_tls_ca};
  if (!options_.rdzv_token_file.empty()) {
    auto t = rendezvous::ReadTokenFile(options_.rdzv_token_file);
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-token-file: ", t.status().message()));
    rdzv_token_ = *t;
  }
  if (host_candidate) {
    // c10d-style: the first agent of the endpoint's host serves it. After every flag is checked,
    // so that a usage error does not start a service first.
    DGT_ASSIGN_OR_RETURN(embedded_rendezvous_,
                         MaybeHostRendezvous(host_candidate->host, host_candidate->port, options_));
  }
  auto session = OpenSession(session_gen_, absl::Seconds(options_.connect_timeout_s));
  if (!session.ok()) {
    if (session.status().code() == absl::StatusCode::kDeadlineExceeded) {
      prepare_exit_status_ = kExitRendezvousUnavailable;
    } else if (session.status().code() == absl::StatusCode::kUnauthenticated) {
      prepare_exit_status_ = kExitNotAdmitted;  // TLS settings that disagree with the service.
    }
    return session.status();
  }
  session_ = std::move(*session);
  session_open_ = true;

  if (auto s = session_->Send(MakeJoin()); !s.ok()) {
    // The service already ended the stream (e.g. UNAUTHENTICATED): the session's closed callback
    // delivers its status, which is the reason to report.
    spdlog::debug("dgt-run: the join could not be sent: {}", s.message());
  }
  spdlog::info("dgt-run: node {} ({}) joining run '{}' at {} ({} worker(s), --nnodes={}:{})",
               options_.node_id, advertised_address_, options_.run_id, rdzv_endpoint_,
               options_.nproc_per_node, options_.min_nodes, options_.max_nodes);
  join_timer_.expires_after(absl::ToChronoMilliseconds(absl::Seconds(options_.join_timeout_s)));
  join_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kJoining) return;
    Finish(kExitJoinTimeout,
           absl::StrCat("rendezvous for run '", options_.run_id, "' did not complete within ",
                        options_.join_timeout_s, " s (", options_.join_timeout_flag,
                        "): ", last_progress_.joined_nodes(), " of at least ", options_.min_nodes,
                        " node(s) joined"));
  });
  return absl::OkStatus();
}

absl::Status Agent::PrepareStatic() {
  // torchrun's static backend: fixed --nnodes, --node-rank, and node rank 0's agent hosts the
  // store at --master-addr:--master-port. No rendezvous service.
  auto master = ResolveToIp(options_.master_addr);
  if (!master.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--master-addr: ", master.status().message()));
  }
  const int node_rank = std::max(options_.node_rank, 0);
  if (node_rank == 0) {
    store::ServerOptions store_options;
    // Every interface, as torch's TCPStore: the other nodes reach --master-addr.
    store_options.host = master->find(':') != std::string::npos ? "::" : "0.0.0.0";
    store_options.port = static_cast<uint16_t>(options_.master_port);
    store_ = std::make_unique<store::Server>(store_options);
    if (absl::Status s = store_->Start(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("node rank 0 cannot host the store on port ",
                                                 options_.master_port, ": ", s.message()));
    }
  }
  advertised_address_ = options_.local_addr.empty() ? *master : options_.local_addr;
  if (options_.local_addr.empty()) {
    auto local = RoutedLocalAddress(*master);
    if (local.ok()) advertised_address_ = *local;
  }
  assignment_.run_id = options_.run_id;
  assignment_.node_rank = node_rank;
  assignment_.node_count = options_.max_nodes;
  assignment_.world_size = options_.max_nodes * options_.nproc_per_node;
  assignment_.first_global_rank = node_rank * options_.nproc_per_node;
  assignment_.local_world_size = options_.nproc_per_node;
  assignment_.master_addr = *master;
  assignment_.master_port = options_.master_port;
  assignment_.max_restarts = options_.max_restarts;

  StaticCoordinator::Options co;
  co.run_id = options_.run_id;
  co.node_rank = node_rank;
  co.node_count = options_.max_nodes;
  co.master_addr = *master;
  co.master_port = options_.master_port;
  co.connect_timeout = absl::Seconds(options_.connect_timeout_s);
  co.finish_timeout = absl::Seconds(options_.join_timeout_s);
  static_ = std::make_unique<StaticCoordinator>(io_, co);
  spdlog::info("dgt-run: static rendezvous: node rank {} of {}, store at {}:{}", node_rank,
               options_.max_nodes, *master, options_.master_port);
  static_->Start(
      [this](const absl::Status& s) {
        if (state_ != State::kJoining) return;
        if (s.code() == absl::StatusCode::kAlreadyExists) {
          Finish(kExitNotAdmitted, absl::StrCat("static rendezvous: ", s.message()));
          return;
        }
        if (!s.ok()) {
          Finish(kExitRendezvousUnavailable,
                 absl::StrCat("static rendezvous: ", s.message(),
                              " (is node rank 0 running? see --rdzv-connect-timeout)"));
          return;
        }
        spdlog::info(
            "dgt-run: run '{}': node rank {} of {}, ranks {}..{} of world size {}, "
            "MASTER_ADDR={} MASTER_PORT={}",
            assignment_.run_id, assignment_.node_rank, assignment_.node_count,
            assignment_.first_global_rank,
            assignment_.first_global_rank + options_.nproc_per_node - 1, assignment_.world_size,
            assignment_.master_addr, assignment_.master_port);
        BeginRun();
      },
      [this](int exit_status, const std::string& message) {
        if (state_ == State::kDone) return;
        rdzv_v1::RunFinished finished;
        finished.set_succeeded(false);
        finished.set_message(message);
        finished.mutable_failure()->set_exit_code(exit_status);
        if (state_ == State::kAwaitingOutcome) {
          // This node's workers are done and its Report is pending: its callback reports this
          // (node rank 0 learns there that another node did not succeed).
          if (!remote_outcome_) remote_outcome_ = finished;
          return;
        }
        OnRunFinished(finished);
      });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RendezvousSession>> Agent::OpenSession(uint64_t gen,
                                                                      absl::Duration timeout) {
  return RendezvousSession::Open(
      rdzv_endpoint_, timeout, rendezvous::ClientOptions::WithCredentials(rdzv_tls_, rdzv_token_),
      [this, gen](const rdzv_v1::ServiceMessage& m) {
        asio::post(io_, [this, gen, m] {
          if (gen == session_gen_) OnServiceMessage(m);
        });
      },
      [this, gen](const grpc::Status& status) {
        asio::post(io_, [this, gen, status] {
          if (gen == session_gen_) OnSessionClosed(status);
        });
      });
}

rdzv_v1::AgentMessage Agent::MakeJoin() const {
  rdzv_v1::AgentMessage join_message;
  rdzv_v1::JoinRequest* join = join_message.mutable_join();
  join->set_run_id(options_.run_id);
  join->set_node_id(options_.node_id);
  join->set_min_nodes(options_.min_nodes);
  join->set_max_nodes(options_.max_nodes);
  join->set_nproc_per_node(options_.nproc_per_node);
  join->set_address(advertised_address_);
  join->set_store_port(store_ ? store_->port() : 0);
  join->set_last_call_timeout_s(options_.last_call_timeout_s);
  join->set_join_timeout_s(options_.join_timeout_s);
  // Group restarts are rounds decided by the rendezvous, for one node or many.
  join->set_max_restarts(options_.restart_policy == RestartPolicy::kGroup ? options_.max_restarts
                                                                          : 0);
  if (auto rejoin = RejoinAssignment()) *join->mutable_rejoin() = *rejoin;
  return join_message;
}

std::optional<rdzv_v1::Assignment> Agent::RejoinAssignment() const {
  if (round_ < 0) return std::nullopt;
  switch (state_) {
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kAwaitingOutcome:
      return current_assignment_;
    case State::kRerounding:
      // The round the service moved to (its workers start once the old ones are gone).
      return pending_assignment_ ? *pending_assignment_ : current_assignment_;
    case State::kJoining:
    case State::kWaitingForRound:  // Stopped by the service: no round to go back to.
    case State::kDone:
      return std::nullopt;
  }
  return std::nullopt;
}

void Agent::StartReconnect(const grpc::Status& status) {
  if (!reconnect_deadline_) {
    reconnect_deadline_ = absl::Now() + absl::Seconds(options_.reconnect_timeout_s);
    reconnect_backoff_ = absl::Milliseconds(100);
    spdlog::warn(
        "dgt-run: lost the rendezvous service at {} ({}); {}reconnecting for up to {} s "
        "(--rdzv-conf read_timeout)",
        rdzv_endpoint_, status.error_message(),
        workers_ && workers_->alive() > 0 ? "workers keep running; " : "",
        options_.reconnect_timeout_s);
  }
  // Running workers without a restart left: another node's failure (its done mark) stops them
  // even while the service is away.
  if (state_ == State::kAwaitingOutcome || (state_ == State::kRunning && !GroupRestartLeft())) {
    PollMarks();
  }
  ScheduleReconnect();
}

void Agent::ScheduleReconnect() {
  if (!reconnect_deadline_ || state_ == State::kDone) return;
  if (absl::Now() >= *reconnect_deadline_) {
    OnReconnectWindowOver();
    return;
  }
  // Jittered (half to all of the backoff) so that the nodes of a big job do not all reconnect
  // to a restarted service at the same instant.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  const absl::Duration delay = reconnect_backoff_ * jitter(rng);
  reconnect_backoff_ = std::min(reconnect_backoff_ * 2, absl::Seconds(5));
  reconnect_timer_.expires_after(absl::ToChronoMilliseconds(delay));
  reconnect_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) TryReconnect();
  });
}

void Agent::TryReconnect() {
  if (state_ == State::kDone || !reconnect_deadline_) return;
  // The previous attempt posted its result already (attempts are started from that result).
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  const absl::Duration left = *reconnect_deadline_ - absl::Now();
  if (left <= absl::ZeroDuration()) {
    OnReconnectWindowOver();
    return;
  }
  // Connecting blocks (up to the attempt's deadline): off the loop, which keeps serving the
  // workers.
  const absl::Duration attempt = std::min(left, absl::Seconds(1));
  const uint64_t gen = ++session_gen_;
  session_open_ = false;
  reconnect_thread_ = std::thread([this, gen, attempt] {
    auto session = OpenSession(gen, attempt);
    {
      dgt::MutexLock lock(&reconnect_mu_);
      reconnect_result_ = std::move(session);
    }
    asio::post(io_, [this, gen] { OnReconnectAttempt(gen); });
  });
}

void Agent::OnReconnectAttempt(uint64_t gen) {
  absl::StatusOr<std::unique_ptr<RendezvousSession>> result =
      absl::UnknownError("no connection attempt");
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_) result = std::move(*reconnect_result_);
    reconnect_result_.reset();
  }
  if (state_ == State::kDone || gen != session_gen_ || !reconnect_deadline_) {
    if (result.ok()) (*result)->Close();
    return;
  }
  if (!result.ok()) {
    spdlog::debug("dgt-run: reconnecting: {}", result.status().message());
    ScheduleReconnect();
    return;
  }
  if (session_) session_->Close();  // The broken one; its end was delivered already.
  session_ = std::move(*result);
  session_open_ = true;
  rdzv_v1::AgentMessage join = MakeJoin();
  rejoin_round_.reset();
  if (join.join().has_rejoin()) rejoin_round_ = join.join().rejoin().round();
  spdlog::info("dgt-run: reconnected to the rendezvous service at {}; {}", rdzv_endpoint_,
               rejoin_round_
                   ? absl::StrCat("rejoining run '", options_.run_id, "' at round ", *rejoin_round_)
                   : absl::StrCat("joining run '", options_.run_id, "' again"));
  // A failed send means the stream ended already: its closed callback continues the reconnect.
  (void)session_->Send(join);
}

void Agent::ServiceBack() {
  if (!reconnect_deadline_) return;
  reconnect_deadline_.reset();
  reconnect_timer_.cancel();
  marks_timer_.cancel();
}

void Agent::OnRejoined() {
  rejoin_round_.reset();
  ServiceBack();
  spdlog::info("dgt-run: back in run '{}' at round {} (node rank {}); the workers kept running",
               options_.run_id, round_, assignment_.node_rank);
  // The report may have gone to a service that died with it, or never left this node.
  if (state_ == State::kAwaitingOutcome && last_report_ && session_open_ && !linger_) {
    (void)session_->Send(*last_report_);
  }
}

void Agent::OnReconnectWindowOver() {
  reconnect_timer_.cancel();
  const std::string lost = absl::StrCat(
      "lost the rendezvous service at ", rdzv_endpoint_, " and could not reach it again within ",
      options_.reconnect_timeout_s, " s (--rdzv-conf read_timeout)");
  switch (state_) {
    case State::kJoining:
    case State::kWaitingForRound:
      Finish(kExitRendezvousUnavailable, lost);
      return;
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kRerounding:
      LeaveRun(kExitRendezvousUnavailable, lost);
      return;
    case State::kAwaitingOutcome:
      if (linger_) return;
      if (last_marks_ && last_marks_->AllDone() && last_marks_->FirstWorkerFailure() >= 0 &&
          !first_failure_) {
        const int failed = last_marks_->FirstWorkerFailure();
        // The failed workers' status, as with the service (the root cause's exit code).
        FinishLinger(*last_marks_->status[failed],
                     absl::StrCat("run '", options_.run_id, "' failed: the workers of node rank ",
                                  failed, " ended with exit status ", *last_marks_->status[failed],
                                  " (done marks in the round's store; ", lost, ")"));
      } else if (first_failure_) {
        FinishLinger(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
      } else {
        // Never "succeeded" for a run whose outcome this node does not know.
        FinishLinger(kExitRendezvousUnavailable,
                     absl::StrCat(lost, "; this node's workers succeeded, but the outcome of run '",
                                  options_.run_id, "' is unknown"));
      }
      return;
    case State::kDone:
      return;
  }
}

void Agent::MarkDone(int exit_status) {
  if (round_ < 0 || assignment_.master_port <= 0) return;
  if (!round_tasks_) {
    round_tasks_ =
        std::make_unique<RoundStoreTasks>(FailurePublisher::ClientConnector(), absl::Seconds(1));
  }
  const int64_t round = round_;
  const int node_rank = assignment_.node_rank;
  round_tasks_->Run(assignment_.master_addr, assignment_.master_port,
                    [round, node_rank, exit_status](absl::StatusOr<store::Store*> store) {
                      absl::Status s = store.ok()
                                           ? WriteDoneMark(**store, round, node_rank, exit_status)
                                           : store.status();
                      if (!s.ok())
                        spdlog::debug("dgt-run: cannot write the done mark: {}", s.message());
                      return s.ok();
                    });
}

void Agent::PollMarks() {
  if (marks_polling_ || state_ == State::kDone || round_ < 0 || assignment_.master_port <= 0) {
    return;
  }
  if (!round_tasks_) {
    round_tasks_ =
        std::make_unique<RoundStoreTasks>(FailurePublisher::ClientConnector(), absl::Seconds(1));
  }
  marks_polling_ = true;
  const int64_t round = round_;
  const int node_count = assignment_.node_count;
  round_tasks_->Run(assignment_.master_addr, assignment_.master_port,
                    [this, round, node_count](absl::StatusOr<store::Store*> store) {
                      absl::StatusOr<DoneMarks> marks =
                          store.ok() ? ReadDoneMarks(**store, round, node_count)
                                     : absl::StatusOr<DoneMarks>(store.status());
                      asio::post(io_, [this, marks] { OnMarks(marks); });
                      return marks.ok();
                    });
}

void Agent::OnMarks(const absl::StatusOr<DoneMarks>& marks) {
  marks_polling_ = false;
  if (state_ == State::kDone) return;
  if (marks.ok()) {
    last_marks_ = *marks;
  } else {
    spdlog::debug("dgt-run: cannot read the done marks: {}", marks.status().message());
  }
  if (linger_) {
    const bool done = last_marks_ && last_marks_->AllDone() &&
                      (!linger_for_seen_ || last_marks_->AllSeenExcept(assignment_.node_rank));
    if (done || absl::Now() >= linger_deadline_) {
      const auto [status, message] = *linger_;
      Finish(status, message);
      return;
    }
  } else if (state_ == State::kAwaitingOutcome && ServiceLost()) {
    if (last_marks_ && last_marks_->AllSucceeded()) {
      FinishFromMarks(kExitSuccess, absl::StrCat("every node of run '", options_.run_id,
                                                 "' succeeded, as the done marks in the round's "
                                                 "store say (the rendezvous service at ",
                                                 rdzv_endpoint_, " is unreachable)"));
      return;
    }
    // Every node is done and one failed: with no group restart left the service would end the
    // run as failed, so the nodes need not wait out the reconnect window for it. (With a restart
    // left, a service coming back would start one: wait for it.)
    if (last_marks_ && last_marks_->AllDone() && !GroupRestartLeft() &&
        (first_failure_ || last_marks_->FirstWorkerFailure() >= 0)) {
      int status = 0;
      std::string message;
      if (first_failure_) {
        // This node's own failure is the one it knows best (its time, its rank).
        status = first_failure_->ExitStatus();
        message = DescribeFailure(*first_failure_);
      } else {
        const int failed = last_marks_->FirstWorkerFailure();
        status = *last_marks_->status[failed];
        message = absl::StrCat("run '", options_.run_id, "' failed: the workers of node rank ",
                               failed, " ended with exit status ", status);
      }
      absl::StrAppend(&message, " (done marks in the round's store; the rendezvous service at ",
                      rdzv_endpoint_, " is unreachable)");
      FinishFromMarks(status, message);
      return;
    }
  } else if (state_ == State::kRunning && ServiceLost() && !GroupRestartLeft()) {
    const int failed = last_marks_ ? last_marks_->FirstWorkerFailure() : -1;
    if (failed >= 0 && failed != assignment_.node_rank) {
      marks_failure_ = failed;
      spdlog::error(
          "dgt-run: the workers of node rank {} ended with exit status {} (done marks in the "
          "round's store; the rendezvous service is unreachable); stopping this node's workers",
          failed, *last_marks_->status[failed]);
      StopWorkers();
      return;
    }
  } else {
    return;  // The service is back (or this node is not waiting for an outcome).
  }
  marks_timer_.expires_after(std::chrono::milliseconds(250));
  marks_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) PollMarks();
  });
}

bool Agent::GroupRestartLeft() const {
  return options_.restart_policy == RestartPolicy::kGroup &&
         assignment_.restart_count < options_.max_restarts;
}

void Agent::FinishFromMarks(int exit_status, const std::string& message) {
  if (assignment_.node_rank == 0) {
    FinishLinger(exit_status, message, /*wait_for_seen=*/true);
    return;
  }
  // Node rank 0 keeps its store until every node has seen the outcome.
  const int64_t round = round_;
  const int node_rank = assignment_.node_rank;
  round_tasks_->Run(assignment_.master_addr, assignment_.master_port,
                    [round, node_rank](absl::StatusOr<store::Store*> store) {
                      return store.ok() && WriteSeenMark(**store, round, node_rank).ok();
                    });
  Finish(exit_status, message);
}

void Agent::FinishLinger(int exit_status, const std::string& message, bool wait_for_seen) {
  if (state_ == State::kDone || linger_) return;
  // With the service there, the other nodes hear from it (a new round has a new store): only
  // without it do they still depend on this node's store.
  if (!round_store_ || assignment_.node_count <= 1 || round_ < 0 || !ServiceLost()) {
    Finish(exit_status, message);
    return;
  }
  linger_ = {exit_status, message};
  linger_for_seen_ = wait_for_seen;
  linger_deadline_ = absl::Now() + absl::Seconds(options_.reconnect_timeout_s);
  state_ = State::kAwaitingOutcome;
  spdlog::info(
      "dgt-run: node rank 0 keeps the round's store until every node's workers are done (at "
      "most {} s)",
      options_.reconnect_timeout_s);
  PollMarks();
}

void Agent::WaitForSignals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    WaitForSignals();
  });
}

int Agent::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread starts (gRPC, the store): the watchdog is forked from here.
  if (absl::Status s = watchdog_.Start(); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: cannot start the process-group watchdog: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  // A --log-dir that cannot hold logs is a usage error now, not a failure after the round formed.
  if (!options_.log_dir.empty()) {
    if (absl::Status s = CheckLogDir(options_.log_dir); !s.ok()) {
      std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
      return kExitUsage;
    }
  }
  // Signals are taken over only once Prepare() is done: it blocks (connecting to the rendezvous
  // service, up to --rdzv-connect-timeout) before the event loop runs, and a SIGTERM or Ctrl-C
  // then must end dgt-run at once (the default action; nothing was started yet), not be queued.
  if (absl::Status s = Prepare(); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
    // A flag whose value is wrong (--local-addr, --master-addr, --rdzv-token-file) is a usage
    // error, exit 2 like the parser's; an unreachable rendezvous service 69; anything else (a
    // port in use, ...) 1.
    if (s.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
    return prepare_exit_status_;
  }
  for (int sig : options_.signals_to_handle) signals_.add(sig);
  WaitForSignals();
  io_.run();
  return exit_status_;
}

void Agent::OnServiceMessage(const rdzv_v1::ServiceMessage& message) {
  // A fresh join after reconnecting is answered: the service is back. (A rejoin's answer is its
  // Assignment, OnRejoined.)
  if (ServiceLost() && !rejoin_round_ && !message.has_error()) ServiceBack();
  switch (message.kind_case()) {
    case rdzv_v1::ServiceMessage::kProgress:
      last_progress_ = message.progress();
      spdlog::info("dgt-run: run '{}': {} node(s) joined (min {}, max {})", options_.run_id,
                   message.progress().joined_nodes(), message.progress().min_nodes(),
                   message.progress().max_nodes());
      return;
    case rdzv_v1::ServiceMessage::kAssignment:
      OnAssignment(message.assignment());
      return;
    case rdzv_v1::ServiceMessage::kFinished:
      OnRunFinished(message.finished());
      return;
    case rdzv_v1::ServiceMessage::kError:
      // The service closes the stream after an Error: this node is not (or no longer) part of
      // the run, and its workers must not go on running ranks the run may give to another node.
      if (state_ == State::kJoining) {
        Finish(kExitNotAdmitted, absl::StrCat("the rendezvous service refused this node: ",
                                              message.error().message()));
      } else if (rejoin_round_) {
        // The run went on without this node while it was away (or the service cannot take its
        // round back): a new agent may join it again, so not "not admitted".
        rejoin_round_.reset();
        reconnect_deadline_.reset();
        reconnect_timer_.cancel();
        LeaveRun(kExitRendezvousUnavailable,
                 absl::StrCat("lost the rendezvous service at ", rdzv_endpoint_,
                              " and could not rejoin run '", options_.run_id,
                              "': ", message.error().message()));
      } else {
        LeaveRun(kExitNotAdmitted,
                 absl::StrCat("the rendezvous service ended the part of node '", options_.node_id,
                              "' in run '", options_.run_id, "': ", message.error().message()));
      }
      return;
    case rdzv_v1::ServiceMessage::kStop:
      OnStopWorkers(message.stop());
      return;
    case rdzv_v1::ServiceMessage::KIND_NOT_SET:
      return;
  }
}

bool Agent::HostedByAnotherNode() const {
  return !rdzv_host_node_id_.empty() && rdzv_host_node_id_ != options_.node_id;
}

std::string Agent::HostLostMessage(const grpc::Status& status) const {
  return absl::StrCat("lost the rendezvous service at ", rdzv_endpoint_, " hosted by node '",
                      rdzv_host_node_id_, "' (c10d-style), so that node is gone",
                      status.error_message().empty() ? "" : ": ", status.error_message());
}

void Agent::OnSessionClosed(const grpc::Status& status) {
  session_open_ = false;
  // Stopping for an outside signal: the service is not needed any more (the other nodes, or the
  // agent hosting it, may be going away for the same signal), and the end is 128+N.
  if (stop_signal_ != 0) return;
  switch (state_) {
    case State::kJoining:
      if (IsRefusal(status)) {
        Finish(kExitNotAdmitted,
               absl::StrCat("the rendezvous session at ", rdzv_endpoint_,
                            " ended before this node was assigned: ", status.error_message()));
        return;
      }
      StartReconnect(status);  // The join timeout still bounds the wait for a round.
      return;
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kRerounding:
      // After a RunFinished (or a refusal) the service ends the session itself: nothing was lost.
      if (remote_outcome_) return;
      if (HostedByAnotherNode()) {
        // c10d-style hosting: the service died with its node (whose agent also served the
        // store as node rank 0, or ran workers of this job), so the job cannot complete.
        LeaveRun(kExitRendezvousUnavailable, HostLostMessage(status));
        return;
      }
      StartReconnect(status);  // The workers keep running meanwhile.
      return;
    case State::kWaitingForRound:
      if (HostedByAnotherNode()) {
        Finish(kExitRendezvousUnavailable, HostLostMessage(status));
        return;
      }
      StartReconnect(status);
      return;
    case State::kAwaitingOutcome:
      if (linger_) return;  // Decided; node rank 0 only keeps its store a while.
      if (HostedByAnotherNode()) {
        if (first_failure_) {
          Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
        } else {
          Finish(kExitRendezvousUnavailable, HostLostMessage(status));
        }
        return;
      }
      // The run's outcome is not known yet: reconnect (and meanwhile read the done marks).
      StartReconnect(status);
      return;
    case State::kDone:
      return;
  }
}

void Agent::LeaveRun(int exit_status, const std::string& message) {
  if (state_ == State::kDone) return;
  if (stop_signal_ != 0) {
    // An outside signal stops this node already; its status (128+N) is the one to report.
    spdlog::info("dgt-run: {}; this node is stopping anyway ({})", message,
                 SignalName(stop_signal_));
    return;
  }
  const bool workers_running = workers_ && (workers_->alive() > 0 || pending_restarts_ > 0) &&
                               (state_ == State::kRunning || state_ == State::kRestarting ||
                                state_ == State::kStopping || state_ == State::kRerounding);
  if (!workers_running) {
    FinishLinger(exit_status, message);
    return;
  }
  leave_ = {exit_status, message};
  // A failed outcome stops restarts and new rounds on this node while its workers stop.
  rdzv_v1::RunFinished left;
  left.set_succeeded(false);
  left.set_message(message);
  if (!remote_outcome_) remote_outcome_ = left;
  pending_assignment_.reset();
  spdlog::error("dgt-run: {}; stopping this node's workers", message);
  if (state_ == State::kRunning) {
    StopWorkers();
  } else {
    // kRestarting: no restart now; kRerounding: no next round (the workers are stopping).
    state_ = State::kStopping;
  }
}

void Agent::OnAssignment(const rdzv_v1::Assignment& a) {
  if (rejoin_round_ && IsSameRound(a, RejoinAssignment().value_or(rdzv_v1::Assignment()))) {
    OnRejoined();  // The service took this node back into its round: nothing restarts.
    return;
  }
  if (StoppingForSignal("a new round", a.reason())) return;
  switch (state_) {
    case State::kJoining:
      join_timer_.cancel();
      ApplyAssignment(a);
      return;
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kRerounding:
      // A new round (a node left or came, or a restart after a failure): stop this round's
      // workers; the new round starts once they are gone. Failures seen while they stop belong
      // to the old round.
      spdlog::warn("dgt-run: run '{}' moves to round {} ({}); stopping this node's workers",
                   options_.run_id, a.round(), a.reason());
      pending_assignment_ = a;
      first_failure_.reset();
      failures_.clear();
      if (state_ != State::kRerounding && state_ != State::kStopping) {
        workers_->Stop(absl::Seconds(options_.stop_timeout_s));
      }
      state_ = State::kRerounding;
      if (workers_->alive() == 0) {
        pending_assignment_.reset();
        workers_->KillAll();
        ApplyAssignment(a);
      }
      return;
    case State::kWaitingForRound:
    case State::kAwaitingOutcome:
      join_timer_.cancel();
      drain_timer_.cancel();
      first_failure_.reset();
      failures_.clear();
      ApplyAssignment(a);
      return;
    case State::kDone:
      return;
  }
}

void Agent::ApplyAssignment(const rdzv_v1::Assignment& a) {
  const bool first_round = round_ < 0;
  round_ = a.round();
  current_assignment_ = a;
  assignment_.run_id = a.run_id();
  assignment_.node_rank = a.node_rank();
  assignment_.node_count = a.node_count();
  assignment_.world_size = a.world_size();
  assignment_.first_global_rank = a.first_global_rank();
  assignment_.local_world_size = options_.nproc_per_node;
  assignment_.master_addr = a.master_addr();
  assignment_.master_port = a.master_port();
  assignment_.restart_count = a.restart_count();
  rdzv_host_node_id_ = a.host_node_id();
  assignment_.max_restarts = options_.max_restarts;
  // The previous round's store (if this node served it) has no readers left.
  if (round_store_) {
    round_store_->Stop();
    round_store_.reset();
  }
  if (a.node_rank() == 0 && store_ && a.master_port() == store_->port()) {
    // This node's standby store serves the round; open the next standby so that a later round
    // starts on an empty store too.
    round_store_ = std::move(store_);
    store::ServerOptions next;
    next.host = advertised_address_;
    store_ = std::make_unique<store::Server>(next);
    if (absl::Status st = store_->Start(); !st.ok()) {
      spdlog::error("dgt-run: cannot open the next store: {}", st.message());
      store_.reset();
    } else if (session_open_) {
      rdzv_v1::AgentMessage ready;
      ready.mutable_store_ready()->set_store_port(store_->port());
      (void)session_->Send(ready);
    }
  }
  if (network_env_master_ != a.master_addr()) {
    // What NCCL needs to find InfiniBand (or to stay off it), as `dgt doctor` shows it.
    worker::RealVerbsApi verbs;
    worker::RealRouteApi route;
    worker::NetworkEnvOptions net_options;
    net_options.master_addr = a.master_addr();
    worker::NetworkReport report = worker::DeriveNetworkEnv(verbs, route, net_options);
    network_env_ = report.env;
    network_env_master_ = a.master_addr();
    for (const std::string& reason : report.reasons) spdlog::debug("dgt-run: network: {}", reason);
    std::string exported;
    for (const auto& [key, value] : network_env_) absl::StrAppend(&exported, " ", key, "=", value);
    spdlog::info("dgt-run: network discovery: {} RDMA device(s); exporting{}",
                 report.devices.size(), exported.empty() ? " nothing new" : exported);
  }
  spdlog::info(
      "dgt-run: run '{}' round {} ({}): node rank {} of {}, ranks {}..{} of world size "
      "{}, MASTER_ADDR={} MASTER_PORT={}, restart count {}",
      a.run_id(), a.round(), a.reason(), a.node_rank(), a.node_count(), a.first_global_rank(),
      a.first_global_rank() + options_.nproc_per_node - 1, a.world_size(), a.master_addr(),
      a.master_port(), a.restart_count());
  if (first_round) {
    BeginRun();
  } else {
    ResetRestartTracker();
    StartRound(a.restart_count());
  }
}

bool Agent::StoppingForSignal(std::string_view what, std::string_view reason) const {
  if (stop_signal_ == 0 || state_ == State::kDone) return false;
  // A signal from outside (scancel, a pod deletion) ends this agent with 128+N once its workers
  // are gone, as torchrun: nothing the service says afterwards (the other nodes, signalled too,
  // are lost) puts it back into waiting for a round.
  spdlog::info("dgt-run: ignoring {} from the rendezvous ({}): this node is stopping ({})", what,
               reason, SignalName(stop_signal_));
  return true;
}

void Agent::OnStopWorkers(const rdzv_v1::StopWorkers& stop) {
  if (state_ == State::kDone || state_ == State::kJoining) return;
  if (StoppingForSignal("a stop of this node's workers", stop.reason())) return;
  spdlog::warn("dgt-run: the rendezvous stopped this node's workers: {}", stop.reason());
  first_failure_.reset();
  failures_.clear();
  if (workers_ && workers_->alive() > 0 && state_ != State::kRerounding) {
    state_ = State::kRerounding;  // Stop; wait for the next assignment once they are gone.
    workers_->Stop(absl::Seconds(options_.stop_timeout_s));
  } else if (!workers_ || workers_->alive() == 0) {
    state_ = State::kWaitingForRound;
  }
  join_timer_.expires_after(absl::ToChronoMilliseconds(absl::Seconds(options_.join_timeout_s)));
  join_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kWaitingForRound) return;
    Finish(kExitJoinTimeout,
           absl::StrCat("run '", options_.run_id, "' got no new round within ",
                        options_.join_timeout_s, " s after its workers were stopped"));
  });
}

void Agent::ResetRestartTracker() {
  RestartTracker::Options restart_options;
  restart_options.policy = options_.restart_policy;
  restart_options.max_restarts = options_.max_restarts;
  restart_options.node_count = assignment_.node_count;
  restart_options.shrink = options_.restart_policy == RestartPolicy::kRank &&
                           options_.recovery_mode == RecoveryMode::kShrink;
  restart_options.backend = static_ ? RestartBackend::kStatic : RestartBackend::kRendezvous;
  restarts_ = std::make_unique<RestartTracker>(restart_options, &clock_);
}

void Agent::BeginRun() {
  ResetRestartTracker();

  // Logs that -r/-t send to files are the user's: kept, also under a temporary directory (as
  // torchrun does), and named at start. Without them the temporary directory only holds error
  // files and goes away with the agent (the watchdog removes it after a kill -9).
  bool streams_to_files =
      !options_.duplicate_stdout_filters.empty() || !options_.duplicate_stderr_filters.empty();
  for (int local = 0; local < options_.nproc_per_node; ++local) {
    streams_to_files |= (options_.redirects.For(local) | options_.tee.For(local)) != 0;
  }
  for (const bool is_stderr : {false, true}) {
    if ((is_stderr ? options_.duplicate_stderr_filters : options_.duplicate_stdout_filters)
            .empty()) {
      continue;
    }
    bool teed = false;
    for (int local = 0; local < options_.nproc_per_node; ++local) {
      teed |= (options_.tee.For(local) & (is_stderr ? 2 : 1)) != 0 &&
              (options_.local_ranks_filter.empty() || options_.local_ranks_filter.count(local));
    }
    if (!teed) {
      spdlog::warn(
          "dgt-run: --duplicate-{}-filters duplicates tee'd lines (-t/--tee), as torchrun 2.13 "
          "does, but no local rank shown on the console tees {}: filtered_{}.log stays empty",
          is_stderr ? "stderr" : "stdout", is_stderr ? "stderr" : "stdout",
          is_stderr ? "stderr" : "stdout");
    }
  }
  if (options_.log_dir.empty()) {
    absl::StatusOr<std::string> dir = CreateTempLogDir();
    if (!dir.ok()) {
      if (streams_to_files) {
        Finish(kExitLauncherError,
               absl::StrCat("-r/-t: cannot create a log directory: ", dir.status().message()));
        return;
      }
      spdlog::warn("dgt-run: no error files for the workers: {}", dir.status().message());
    } else if (streams_to_files) {
      log_root_ = *dir;
      spdlog::info("dgt-run: worker logs in {} (no --log-dir: a temporary directory, kept)",
                   log_root_);
    } else {
      log_root_ = *dir;
      log_root_is_temp_ = true;
      if (absl::Status s = watchdog_.RemoveOnExit(log_root_); !s.ok()) {
        spdlog::warn("dgt-run: the temporary log directory {} may outlive a killed agent: {}",
                     log_root_, s.message());
      }
    }
  } else {
    // A directory of this launch's own: relaunching with the same --log-dir and run id must
    // neither overwrite nor mix the earlier run's logs.
    absl::StatusOr<std::string> dir = CreateRunLogDir(options_.log_dir, options_.run_id);
    if (!dir.ok()) {
      Finish(kExitLauncherError, absl::StrCat("--log-dir: ", dir.status().message()));
      return;
    }
    log_root_ = *dir;
    spdlog::info("dgt-run: worker logs and error files of run '{}' in {}", options_.run_id,
                 log_root_);
  }
  if (options_.distribution == Distribution::kTensorflow) {
    if (absl::Status s = ReserveTfPorts(); !s.ok()) {
      Finish(1, absl::StrCat("cannot reserve TF_CONFIG ports: ", s.message()));
      return;
    }
  }
  StartRound(assignment_.restart_count);
}

absl::Status Agent::ReserveTfPorts() {
  // Bound (not listening) sockets hold the ports until the workers start, so the addresses in
  // TF_CONFIG stay free.
  for (int local = 0; local < options_.nproc_per_node; ++local) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, advertised_address_.c_str(), &addr.sin_addr) != 1) {
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError("socket failed");
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot bind a port on ", advertised_address_));
    }
    tf_reservations_.push_back(fd);
    tf_local_addresses_.push_back(absl::StrCat(advertised_address_, ":", ntohs(addr.sin_port)));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerSpec> Agent::MakeSpec(int local_rank, int attempt) {
  WorkerSpec spec;
  spec.local_rank = local_rank;
  spec.rank = assignment_.first_global_rank + local_rank;
  spec.attempt = attempt;
  if (!options_.no_python) {
    spec.argv = {options_.python, "-u"};
    if (options_.module) spec.argv.emplace_back("-m");
    if (options_.run_path) {
      spec.argv.emplace_back("-c");
      spec.argv.emplace_back(
          "import runpy, sys; sys.argv = sys.argv[1:]; "
          "runpy.run_path(sys.argv[0], run_name='__main__')");
    }
  }
  spec.argv.insert(spec.argv.end(), options_.command.begin(), options_.command.end());
  if (options_.pass_local_rank_arg) spec.argv.push_back(absl::StrCat("--local_rank=", local_rank));

  WorkerEnvExtras extras;
  extras.role = options_.role;
  extras.distribution = options_.distribution;
  extras.virtual_local_rank = options_.virtual_local_rank;
  extras.signals_to_handle = options_.signals_to_handle_text;
  if (!log_root_.empty()) {
    std::filesystem::path dir = std::filesystem::path(log_root_) /
                                absl::StrCat("attempt_", attempt) / absl::StrCat(local_rank);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create log directory ", dir.string(), ": ", ec.message()));
    }
    extras.error_file = (dir / "error.json").string();
    std::filesystem::remove(extras.error_file, ec);  // A stale file would be taken for this one.
    const int redirect = options_.redirects.For(local_rank);
    const int tee = options_.tee.For(local_rank);
    if ((redirect | tee) & 1) spec.stdout_file = (dir / "stdout.log").string();
    if ((redirect | tee) & 2) spec.stderr_file = (dir / "stderr.log").string();
  }
  const int redirect = options_.redirects.For(local_rank);
  const int tee = options_.tee.For(local_rank);
  const bool shown =
      options_.local_ranks_filter.empty() || options_.local_ranks_filter.count(local_rank) > 0;
  spec.stdout_console = shown && (!(redirect & 1) || (tee & 1));
  spec.stderr_console = shown && (!(redirect & 2) || (tee & 2));
  spec.prefix =
      LogLinePrefix(options_.log_line_prefix_template, options_.role, spec.rank, local_rank);
  // torchrun 2.13 duplicates the tee'd streams of the ranks shown on the console (its filtered
  // log tails the same files as the console does).
  for (const bool is_stderr : {false, true}) {
    const std::vector<std::string>& filters =
        is_stderr ? options_.duplicate_stderr_filters : options_.duplicate_stdout_filters;
    if (filters.empty() || log_root_.empty()) continue;
    std::shared_ptr<FilteredLog>& log = filtered_logs_[{attempt, is_stderr}];
    if (log == nullptr) {
      const std::filesystem::path path =
          std::filesystem::path(log_root_) / absl::StrCat("attempt_", attempt) /
          (is_stderr ? "filtered_stderr.log" : "filtered_stdout.log");
      DGT_ASSIGN_OR_RETURN(log, FilteredLog::Open(path.string(), filters));
    }
    if (shown && (tee & (is_stderr ? 2 : 1)) != 0) {
      (is_stderr ? spec.stderr_filtered : spec.stdout_filtered) = log;
    }
  }
  if (options_.distribution == Distribution::kTensorflow) {
    extras.tf_config =
        BuildTfConfig(tf_addresses_, options_.parameter_server_count, options_.tf_chief, spec.rank);
  }
  NodeAssignment a = assignment_;
  a.restart_count = attempt;
  EnvMap env = BuildWorkerEnv(CurrentEnvironment(), a, local_rank, extras);
  for (const auto& [key, value] : network_env_) env.try_emplace(key, value);
  if (options_.restart_policy == RestartPolicy::kRank) {
    // What the agent does when a rank dies, for trainers using dgt::worker::ElasticGroup.
    env["DGT_RECOVERY_MODE"] =
        options_.recovery_mode == RecoveryMode::kShrink ? "shrink" : "replace";
  }
  spec.env = ToEnvStrings(env);
  return spec;
}

void Agent::StartRound(int restart_count) {
  restart_count_ = restart_count;
  failures_.clear();
  recovered_failures_.clear();
  if (workers_) retired_.push_back(std::move(workers_));
  workers_ = std::make_unique<WorkerGroup>(
      io_, [this](const WorkerExit& e) { OnWorkerExit(e); },
      [this](pid_t pgid) { watchdog_.Register(pgid); },
      [this](pid_t pgid) { watchdog_.Unregister(pgid); });
  state_ = State::kRunning;
  spawning_ = true;
  if (options_.distribution == Distribution::kTensorflow) {
    if (assignment_.node_count > 1) {
      StartTfExchange(workers_.get(), restart_count);
      return;
    }
    tf_addresses_ = tf_local_addresses_;
  }
  SpawnRound(workers_.get(), restart_count);
}

void Agent::SpawnRound(WorkerGroup* group, int restart_count) {
  // The TF_CONFIG addresses are known (tf_addresses_): the workers bind these ports now. Later
  // rounds use the same ports, free again once this round's workers are gone.
  for (int fd : tf_reservations_) ::close(fd);
  tf_reservations_.clear();
  SpawnFrom(group, 0, restart_count);
}

void Agent::StartTfExchange(WorkerGroup* group, int restart_count) {
  if (!tf_tasks_) {
    tf_tasks_ =
        std::make_unique<RoundStoreTasks>(FailurePublisher::ClientConnector(), absl::Seconds(1));
  }
  tf_addresses_.clear();
  tf_deadline_ = absl::Now() + absl::Seconds(options_.join_timeout_s);
  spdlog::info(
      "dgt-run: publishing this node's TensorFlow addresses {} for round {} in the round's store "
      "at {}:{}",
      absl::StrJoin(tf_local_addresses_, ","), std::max<int64_t>(round_, 0),
      assignment_.master_addr, assignment_.master_port);
  PollTfExchange(group, restart_count);
}

void Agent::PollTfExchange(WorkerGroup* group, int restart_count) {
  if (workers_.get() != group || state_ == State::kDone) return;  // A later round took over.
  if (state_ != State::kRunning) {
    SpawnFrom(group, 0, restart_count);  // Stopping: starts nothing, ends the round's spawn.
    return;
  }
  // The static backend has one round and no round number.
  const int64_t round = std::max<int64_t>(round_, 0);
  const int node_rank = assignment_.node_rank;
  const int node_count = assignment_.node_count;
  const TfRoleConfig roles{options_.parameter_server_count, options_.tf_chief,
                           options_.worker_count, options_.nproc_per_node};
  tf_tasks_->Run(assignment_.master_addr, assignment_.master_port,
                 [this, group, restart_count, round, node_rank, node_count, roles,
                  own = tf_local_addresses_](absl::StatusOr<store::Store*> store) {
                   absl::StatusOr<TfExchangeStep> step =
                       store.ok()
                           ? ExchangeTfAddresses(**store, round, node_rank, node_count, roles, own)
                           : absl::StatusOr<TfExchangeStep>(store.status());
                   asio::post(io_, [this, group, restart_count, step] {
                     OnTfExchange(group, restart_count, step);
                   });
                   // A bad value or different roles are another node's, not a broken
                   // connection.
                   return step.ok() || step.status().code() == absl::StatusCode::kInvalidArgument ||
                          step.status().code() == absl::StatusCode::kFailedPrecondition;
                 });
}

void Agent::OnTfExchange(WorkerGroup* group, int restart_count,
                         const absl::StatusOr<TfExchangeStep>& step) {
  if (workers_.get() != group || state_ == State::kDone) return;
  if (state_ != State::kRunning) {
    SpawnFrom(group, 0, restart_count);
    return;
  }
  if (step.ok() && step->missing.empty()) {
    tf_addresses_ = step->addresses;
    spdlog::info("dgt-run: TensorFlow cluster of round {}: {}", std::max<int64_t>(round_, 0),
                 absl::StrJoin(tf_addresses_, ","));
    SpawnRound(group, restart_count);
    return;
  }
  if (!step.ok() && step.status().code() == absl::StatusCode::kInvalidArgument) {
    spawning_ = false;
    Finish(1, absl::StrCat("cannot build TF_CONFIG: ", step.status().message()));
    return;
  }
  if (!step.ok() && step.status().code() == absl::StatusCode::kFailedPrecondition) {
    // Nodes given different role flags: this node is not admitted to the others' cluster.
    spawning_ = false;
    std::string message(step.status().message());
    if (assignment_.node_rank != 0) {
      Finish(kExitNotAdmitted, message);
      return;
    }
    // Node rank 0 serves the round's store: it stays 1 s more, so that the other nodes (who poll
    // every 100 ms) read the roles that differ and refuse too, rather than find the store gone.
    tf_timer_.expires_after(std::chrono::seconds(1));
    tf_timer_.async_wait([this, message](boost::system::error_code ec) {
      if (!ec && state_ != State::kDone) Finish(kExitNotAdmitted, message);
    });
    return;
  }
  if (absl::Now() >= tf_deadline_) {
    spawning_ = false;
    Finish(kExitJoinTimeout,
           step.ok()
               ? absl::StrCat("TF_CONFIG: node rank(s) ", absl::StrJoin(step->missing, ", "),
                              " did not publish their TensorFlow addresses in the round's "
                              "store at ",
                              assignment_.master_addr, ":", assignment_.master_port, " within ",
                              options_.join_timeout_s, " s (", options_.join_timeout_flag,
                              "): is every node started with --distribution tensorflow?")
               : absl::StrCat("TF_CONFIG: cannot exchange the TensorFlow addresses within ",
                              options_.join_timeout_s, " s (", options_.join_timeout_flag,
                              "): ", step.status().message()));
    return;
  }
  if (!step.ok()) {
    spdlog::debug("dgt-run: TensorFlow address exchange: {}", step.status().message());
  }
  tf_timer_.expires_after(std::chrono::milliseconds(100));
  tf_timer_.async_wait([this, group, restart_count](boost::system::error_code ec) {
    if (!ec) PollTfExchange(group, restart_count);
  });
}

void Agent::SpawnFrom(WorkerGroup* group, int first, int restart_count) {
  // Workers started per turn of the loop: a few ms of fork/exec each, so a SIGTERM (or a worker
  // that failed at once) waits at most about a batch, not for thousands of spawns.
  constexpr int kSpawnBatch = 32;
  if (workers_.get() != group || state_ == State::kDone) return;  // A later round took over.
  if (state_ != State::kRunning) {
    // Stopping (a signal, a failure, a new round): the rest is not started.
    SpawnDone(restart_count);
    return;
  }
  const int end = std::min(first + kSpawnBatch, options_.nproc_per_node);
  for (int local = first; local < end; ++local) {
    absl::StatusOr<WorkerSpec> spec = MakeSpec(local, restart_count);
    absl::Status status = spec.ok() ? workers_->StartOne(*spec).status() : spec.status();
    if (!status.ok()) {
      spawning_ = false;
      workers_->KillAll();  // The ones already started; the group's destructor reaps them.
      Finish(127, absl::StrCat("cannot start workers: ", status.message()));
      return;
    }
  }
  if (end < options_.nproc_per_node) {
    asio::post(io_, [this, group, end, restart_count] { SpawnFrom(group, end, restart_count); });
    return;
  }
  SpawnDone(restart_count);
}

void Agent::SpawnDone(int restart_count) {
  spawning_ = false;
  if (state_ == State::kRunning) {
    if (restart_count > 0) {
      spdlog::info("dgt-run: restarted {} worker(s) with TORCHELASTIC_RESTART_COUNT={}",
                   options_.nproc_per_node, restart_count);
    }
    if (options_.restart_policy == RestartPolicy::kRank) {
      // Connect now: a failure is then published without paying for a connection.
      EnsurePublisher();
      publisher_->Prepare(assignment_.master_addr, assignment_.master_port);
      // >>> standby hook (issue 13): warm standbys for this round's rank restarts (RestartRank).
      if (absl::Status s = workers_->StartStandbys(options_.standby_workers); !s.ok()) {
        spdlog::warn("dgt-run: --standby-workers: {}", s.message());
      }
      // <<< standby hook
    }
  }
  // Every worker started in earlier batches may have exited while later ones were started (their
  // exits waited for this). Not once the round is over otherwise (waiting for a round, done).
  const bool round_active = state_ == State::kRunning || state_ == State::kStopping ||
                            state_ == State::kRestarting || state_ == State::kRerounding;
  if (round_active && workers_->alive() == 0 && pending_restarts_ == 0) OnAllWorkersExited();
}

absl::Time Agent::RestartRank(const WorkerExit& e, int attempt) {
  auto spec = MakeSpec(e.local_rank, attempt);
  // >>> standby hook (issue 13): a ready standby takes the rank, else a fresh process.
  absl::StatusOr<pid_t> pid =
      spec.ok() ? workers_->StartReplacement(*spec) : absl::StatusOr<pid_t>(spec.status());
  // <<< standby hook
  if (!pid.ok()) {
    spdlog::error("dgt-run: cannot restart rank {}: {}", e.rank, pid.status().message());
    first_failure_ = e;
    failures_.push_back(RecordFailure(e));
    StopWorkers();
    return absl::InfinitePast();
  }
  const absl::Time started = absl::Now();
  spdlog::info(
      "dgt-run: restarted rank {} (local rank {}) as pid {} with "
      "TORCHELASTIC_RESTART_COUNT={} ({} of --max-restarts={})",
      e.rank, e.local_rank, *pid, attempt, restarts_->restarts(), options_.max_restarts);
  PublishRestart(e.rank, attempt);
  return started;
}

void Agent::EnsurePublisher() {
  if (!publisher_) {
    publisher_ = std::make_unique<FailurePublisher>(FailurePublisher::Options{},
                                                    FailurePublisher::ClientConnector());
  }
}

void Agent::PublishFailure(const WorkerExit& e, bool restart, int attempt) {
  EnsurePublisher();
  if (restart) ++pending_restarts_;
  WorkerGroup* group = workers_.get();
  const absl::Time start = absl::Now();
  publisher_->Publish(
      assignment_.master_addr, assignment_.master_port, e.rank,
      absl::StrCat("rank ", e.rank, " ", e.Describe()),
      [this, e, restart, attempt, group, start](const absl::StatusOr<int>& generation) {
        const absl::Time published = absl::Now();
        asio::post(io_, [this, e, restart, attempt, group, start, published, generation] {
          if (generation.ok()) {
            spdlog::info(
                "dgt-run: published the failure of rank {}: recovery generation {} ({} ms)", e.rank,
                *generation, absl::ToInt64Milliseconds(absl::Now() - start));
          } else {
            // Survivors still notice through their communicators, and a replacement opens the
            // generation itself.
            spdlog::warn("dgt-run: cannot publish the failure of rank {}: {}", e.rank,
                         generation.status().message());
          }
          if (!restart) return;
          --pending_restarts_;
          if (state_ == State::kRunning && workers_.get() == group && !remote_outcome_ &&
              stop_signal_ == 0) {
            const absl::Time started = RestartRank(e, attempt);
            if (started != absl::InfinitePast()) {
              // Wall-clock nanoseconds, to line up with the trainers' EVENT lines.
              spdlog::info(
                  "dgt-run: recovery timeline of rank {}: exit_seen_ns={} publish_start_ns={} "
                  "published_ns={} replacement_started_ns={}",
                  e.rank, absl::ToUnixNanos(e.time), absl::ToUnixNanos(start),
                  absl::ToUnixNanos(published), absl::ToUnixNanos(started));
            }
          }
          if (state_ != State::kDone && workers_ && workers_->alive() == 0 &&
              pending_restarts_ == 0 && !spawning_) {
            OnAllWorkersExited();
          }
        });
      });
}

void Agent::PublishRestart(int rank, int generation) {
  // Clients put '/' in front of user keys, so a torch TCPStore client reads this as
  // store.get("dgt/restart/<rank>").
  std::string frame(1, '\0');  // 1.x SET.
  AppendField(&frame, keys::RestartWireKey(rank));
  AppendField(&frame, absl::StrCat(generation));
  auto setter = std::make_shared<StoreSetter>(io_, std::move(frame));
  setter->Run(assignment_.master_addr, assignment_.master_port);
}

std::string Agent::DescribeFailure(const WorkerExit& e) const {
  return absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, " on node rank ",
                      assignment_.node_rank, ", ", advertised_address_, ", pid ", e.pid, ") ",
                      e.Describe());
}

Agent::Failure Agent::RecordFailure(const WorkerExit& e) const {
  Failure f;
  f.exit = e;
  if (!log_root_.empty()) {
    f.error_file = (std::filesystem::path(log_root_) / absl::StrCat("attempt_", e.attempt) /
                    absl::StrCat(e.local_rank) / "error.json")
                       .string();
    f.error = ReadTorchErrorFile(f.error_file);
  }
  return f;
}

std::string Agent::Summary() const {
  if (failures_.empty()) return "";
  auto describe = [this](const Failure& f, bool full) {
    const WorkerExit& e = f.exit;
    std::string exit = e.signal != 0
                           ? absl::StrCat("signal ", e.signal, " (", SignalName(e.signal), ")")
                           : absl::StrCat("exit code ", e.exit_code);
    std::string text = absl::StrCat("  rank ", e.rank, " (local rank ", e.local_rank, "), host ",
                                    advertised_address_, " (node rank ", assignment_.node_rank,
                                    "), pid ", e.pid, ", attempt ", e.attempt, "\n", "    ", exit,
                                    " at ", Rfc3339Millis(e.time), "\n");
    if (f.error) {
      absl::StrAppend(&text, "    error file: ", f.error_file, "\n",
                      "    message: ", f.error->message, "\n");
      if (full && !f.error->traceback.empty()) {
        std::string tb = f.error->traceback;
        while (!tb.empty() && tb.back() == '\n') tb.pop_back();
        absl::StrAppend(&text, "    traceback:\n      ",
                        absl::StrJoin(absl::StrSplit(tb, '\n'), "\n      "), "\n");
      }
    } else if (full && !e.stderr_tail.empty()) {
      absl::StrAppend(&text, "    error file: <none written>; last stderr lines:\n      ",
                      absl::StrJoin(e.stderr_tail, "\n      "), "\n");
    }
    return text;
  };
  std::string text = absl::StrCat("dgt-run: run '", options_.run_id, "' failed\n",
                                  "Root cause (first failure):\n", describe(failures_[0], true));
  if (failures_.size() > 1) {
    absl::StrAppend(&text, "Other failures:\n");
    for (size_t i = 1; i < failures_.size(); ++i) {
      absl::StrAppend(&text, describe(failures_[i], false));
    }
  }
  if (!recovered_failures_.empty()) {
    absl::StrAppend(&text, "Restarted in place before that (--restart-policy rank):\n");
    bool peer_failed_after = false;  // Not just the restarted rank failing again.
    for (const Failure& f : recovered_failures_) {
      absl::StrAppend(&text, describe(f, false));
      peer_failed_after |= f.exit.rank != failures_[0].exit.rank;
    }
    if (peer_failed_after) {
      absl::StrAppend(&text,
                      "  note: a worker that cannot rebuild its communicator around a replaced "
                      "peer (torch.distributed process groups cannot) fails when one is "
                      "restarted; use --restart-policy group for such trainers, or "
                      "dgt::worker::ElasticGroup (docs/RECOVERY.md)\n");
    }
  }
  return text;
}

void Agent::OnWorkerExit(const WorkerExit& e) {
  if (!e.succeeded()) {
    // Failures observed before this node started stopping on its own (not ones it caused).
    const bool own_failure = state_ == State::kRunning && !remote_outcome_ && stop_signal_ == 0;
    if (own_failure) {
      RestartTracker::Decision d = restarts_->OnFailure(e.rank, e.attempt);
      failures_.push_back(RecordFailure(e));
      switch (d.action) {
        case RestartTracker::Action::kRestartRank:
          spdlog::warn("dgt-run: rank {} (local rank {}) {}; restarting it", e.rank, e.local_rank,
                       e.Describe());
          // Recovered: not a failure of the run, but the summary names it if a later one is.
          recovered_failures_.push_back(std::move(failures_.back()));
          failures_.pop_back();
          // Publishes, then restarts (on a failed start it stops the others).
          PublishFailure(e, /*restart=*/true, d.restart_count);
          break;
        case RestartTracker::Action::kDropRank:
          spdlog::warn(
              "dgt-run: rank {} (local rank {}) {}; continuing without it "
              "(--recovery-mode=shrink, {} of --max-restarts={})",
              e.rank, e.local_rank, e.Describe(), restarts_->restarts(), options_.max_restarts);
          failures_.pop_back();  // Tolerated: not part of a failure summary.
          PublishFailure(e, /*restart=*/false, d.restart_count);
          break;
        case RestartTracker::Action::kRestartGroup:
          // Static backend, one node: no rendezvous, the local node restarts alone.
          spdlog::warn(
              "dgt-run: rank {} (local rank {}) {}; restarting every worker "
              "(restart {} of --max-restarts={})",
              e.rank, e.local_rank, e.Describe(), restarts_->restarts(), options_.max_restarts);
          state_ = State::kRestarting;
          next_restart_count_ = d.restart_count;
          workers_->Stop(absl::Seconds(options_.stop_timeout_s));
          break;
        case RestartTracker::Action::kReportToRendezvous:
          // Group restarts are new rendezvous rounds for every node: stop this node's
          // workers and report; the service answers with a restart round or the run's end.
          first_failure_ = e;
          spdlog::error(
              "dgt-run: rank {} (local rank {}) {}; stopping the other workers "
              "and reporting to the rendezvous",
              e.rank, e.local_rank, e.Describe());
          StopWorkers();
          break;
        case RestartTracker::Action::kFail:
          first_failure_ = e;
          spdlog::error("dgt-run: rank {} (local rank {}) {}; {}; stopping the other workers",
                        e.rank, e.local_rank, e.Describe(), d.reason);
          StopWorkers();
          break;
        case RestartTracker::Action::kIgnore:
          break;
      }
    } else {
      if (first_failure_ && e.signal != SIGTERM && e.signal != SIGKILL) {
        failures_.push_back(RecordFailure(e));  // Failed on its own while the others stopped.
      }
      if (state_ == State::kRunning) StopWorkers();
    }
  }
  if (workers_->alive() > 0 || pending_restarts_ > 0 || spawning_) return;
  OnAllWorkersExited();
}

void Agent::OnAllWorkersExited() {
  workers_->StopStandbys();  // standby hook (issue 13): standbys end with the round.
  if (state_ == State::kRerounding) {
    workers_->KillAll();
    if (pending_assignment_) {
      rdzv_v1::Assignment a = *pending_assignment_;
      pending_assignment_.reset();
      ApplyAssignment(a);
    } else {
      state_ = State::kWaitingForRound;  // Stopped by the service; the next round will come.
    }
    return;
  }
  if (state_ == State::kRestarting) {
    workers_->KillAll();
    StartRound(next_restart_count_);
    return;
  }
  AfterWorkersExited();
}

void Agent::StopWorkers() {
  state_ = State::kStopping;
  workers_->Stop(absl::Seconds(options_.stop_timeout_s));
}

void Agent::OnSignal(int sig) {
  const std::string name = SignalName(sig);
  if (IsNotifySignal(sig)) {
    if (workers_ &&
        (state_ == State::kRunning || state_ == State::kRestarting || state_ == State::kStopping)) {
      spdlog::info("dgt-run: received {}; forwarding it to the workers", name);
      workers_->Signal(sig);
    }
    return;
  }
  if (state_ == State::kJoining || !workers_ || state_ == State::kWaitingForRound) {
    Finish(128 + sig, absl::StrCat("stopped by ", name, " before workers started"));
    return;
  }
  if (state_ == State::kDone) return;
  if (state_ == State::kAwaitingOutcome) {
    // This node's workers are gone already; only the rest of the run was awaited. A scheduler's
    // cancel (scancel, Azure ML) must not wait for other nodes or the finish timeout.
    Finish(128 + sig, absl::StrCat("stopped by ", name,
                                   " after this node's workers exited, before the run's outcome "
                                   "was known"));
    return;
  }
  if (stop_signal_ != 0) {
    spdlog::warn("dgt-run: second signal {}; killing the workers now", name);
    workers_->KillAll();
    return;
  }
  stop_signal_ = sig;
  if (static_) static_->Interrupt();  // Node rank 0 stops waiting for the other nodes.
  spdlog::warn(
      "dgt-run: received {}; forwarding it to the workers and stopping (SIGKILL after "
      "{} s)",
      name, options_.stop_timeout_s);
  state_ = State::kStopping;
  // The workers get the signal itself, then SIGKILL after --stop-timeout (torchrun forwards
  // the signal it received as the death signal).
  workers_->Stop(absl::Seconds(options_.stop_timeout_s), sig);
}

void Agent::AfterWorkersExited() {
  if (state_ == State::kAwaitingOutcome || state_ == State::kDone) return;
  state_ = State::kAwaitingOutcome;
  // Leftover grandchildren of the workers die with their groups; their output pipes then close.
  workers_->KillAll();
  auto report = [this] {
    drain_timer_.cancel();
    if (state_ != State::kAwaitingOutcome) return;
    if (static_) {
      const int own = stop_signal_ != 0 ? 128 + stop_signal_
                                        : (first_failure_ ? first_failure_->ExitStatus() : 0);
      std::string what = first_failure_ ? DescribeFailure(*first_failure_)
                                        : absl::StrCat("stopped by ", SignalName(stop_signal_));
      auto outcome = [this](const absl::Status& others) {
        if (stop_signal_ != 0) {
          Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
        } else if (first_failure_) {
          Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
        } else if (remote_outcome_) {
          OnRunFinished(*remote_outcome_);
        } else if (!others.ok()) {
          Finish(1, absl::StrCat("static rendezvous: ", others.message()));
        } else if (assignment_.node_rank != 0) {
          // Node rank 0 (the store host) learns and reports the run's outcome, not this node.
          Finish(0, absl::StrCat("this node's workers succeeded (node rank ", assignment_.node_rank,
                                 "); node rank 0 reports the run's outcome"));
        } else {
          Finish(0, "");
        }
      };
      if (stop_signal_ != 0) {
        // The others fail naming this node and the signal, not as if they had been signalled.
        static_->ReportStopped(SignalName(stop_signal_), std::move(outcome));
      } else {
        static_->Report(own, what, std::move(outcome));
      }
      return;
    }
    if (stop_signal_ != 0) {
      // No report: the session ends with this agent, and the service treats the node as lost
      // (the others go on in a new round if enough nodes remain). A signal from outside decides
      // this node's status over whatever the service said while its workers stopped.
      Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
      return;
    }
    if (leave_) {
      MarkDone(leave_->first);
      FinishLinger(leave_->first, leave_->second);
      return;
    }
    if (marks_failure_ && !first_failure_ && !remote_outcome_) {
      // Stopped for another node's failure: this node's workers did not fail. Its mark says 0,
      // so that the marks name the failed node; the outcome then comes from the marks (or from
      // the service, back: it has the failed node's report).
      MarkDone(kExitSuccess);
      PollMarks();
      return;
    }
    if (remote_outcome_) {
      OnRunFinished(*remote_outcome_);
      return;
    }
    rdzv_v1::AgentMessage message;
    rdzv_v1::NodeReport* report = message.mutable_report();
    report->set_round(round_);
    if (first_failure_) {
      report->set_succeeded(false);
      report->set_message(absl::StrCat("rank ", first_failure_->rank, " (local rank ",
                                       first_failure_->local_rank, ") ",
                                       first_failure_->Describe()));
      rdzv_v1::WorkerFailure* f = report->mutable_failure();
      f->set_rank(first_failure_->rank);
      f->set_local_rank(first_failure_->local_rank);
      f->set_exit_code(first_failure_->exit_code);
      f->set_signal(first_failure_->signal);
      f->set_time_unix_s(absl::ToDoubleSeconds(first_failure_->time - absl::UnixEpoch()));
    } else {
      report->set_succeeded(true);
    }
    // The done mark lets node rank 0 keep the round's store until every node is done, and the
    // nodes learn the outcome, even when the service is gone.
    MarkDone(first_failure_ ? first_failure_->ExitStatus() : kExitSuccess);
    last_report_ = message;
    if (ServiceLost()) {
      PollMarks();  // The report goes out after the rejoin.
      return;
    }
    // A failed send means the stream ended: its closed callback starts reconnecting.
    if (session_open_) (void)session_->Send(message);
    // Wait for the service's answer: the run's end (node rank 0 keeps serving the store until
    // every node is done), or a new round (a restart after a failure).
  };
  // Bound the wait for output: a worker's descendant that left its process group may hold the
  // pipes open forever.
  drain_timer_.expires_after(std::chrono::seconds(2));
  drain_timer_.async_wait([report](boost::system::error_code ec) {
    if (!ec) report();
  });
  workers_->OnDrained(report);
}

void Agent::OnRunFinished(const rdzv_v1::RunFinished& finished) {
  switch (state_) {
    case State::kJoining:
      // This node never ran a worker of the run: whatever its outcome, it is not this node's
      // (torchrun: RendezvousClosedError). Services that tell waiting nodes so send an Error.
      Finish(kExitNotAdmitted,
             absl::StrCat("run '", options_.run_id, "' ended (",
                          finished.succeeded() ? "succeeded" : "failed", ": ", finished.message(),
                          ") before node '", options_.node_id, "' was admitted to it"));
      return;
    case State::kWaitingForRound:
      Finish(finished.succeeded() ? 0 : 1,
             finished.succeeded() ? "" : absl::StrCat("run failed: ", finished.message()));
      return;
    case State::kRunning:
    case State::kRestarting:
    case State::kStopping:
    case State::kRerounding:
      if (finished.succeeded()) return;  // Cannot happen before this node reported.
      pending_assignment_.reset();
      if (!remote_outcome_ && !first_failure_) {
        remote_outcome_ = finished;
        spdlog::error("dgt-run: run failed on another node: {}; stopping this node's workers",
                      finished.message());
      }
      if (state_ == State::kRunning) StopWorkers();
      if (state_ == State::kRestarting) state_ = State::kStopping;  // No restart now.
      return;
    case State::kAwaitingOutcome:
      if (stop_signal_ != 0) {
        Finish(128 + stop_signal_, absl::StrCat("stopped by ", SignalName(stop_signal_)));
      } else if (finished.succeeded()) {
        Finish(0, "");
      } else if (first_failure_ && finished.has_failure() &&
                 finished.failure().node_id() != options_.node_id) {
        // Another node failed first: that is the run's root cause; this node's failure followed.
        spdlog::warn("dgt-run: this node's {} followed the root cause on another node",
                     DescribeFailure(*first_failure_));
        failures_.clear();
        first_failure_.reset();
        OnRunFinished(finished);
      } else if (first_failure_) {
        Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
      } else {
        int code = finished.failure().signal() != 0 ? 128 + finished.failure().signal()
                                                    : finished.failure().exit_code();
        Finish(code != 0 ? code : 1, absl::StrCat("run failed: ", finished.message()));
      }
      return;
    case State::kDone:
      return;
  }
}

void Agent::KeepTempLogRootForSummary(std::string* summary) {
  if (!log_root_is_temp_ || log_root_.empty()) return;
  bool names_a_file = false;
  for (const auto* list : {&failures_, &recovered_failures_}) {
    for (const Failure& f : *list) names_a_file |= f.error.has_value();
  }
  if (!names_a_file) return;
  // The summary names error files in the temporary log directory: removing it at exit would
  // leave the user paths that no longer exist.
  log_root_is_temp_ = false;
  if (absl::Status s = watchdog_.KeepOnExit(); !s.ok()) {
    spdlog::warn("dgt-run: the watchdog may still remove {}: {}", log_root_, s.message());
  }
  absl::StrAppend(summary, "kept: ", log_root_,
                  " (the temporary log directory, for the error file(s) named above)\n");
}

void Agent::Finish(int exit_status, const std::string& message) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  exit_status_ = exit_status;
  std::string summary;
  if (exit_status != 0 && !failures_.empty() && first_failure_) {
    summary = Summary();
    KeepTempLogRootForSummary(&summary);
  }
  if (options_.log_format == LogFormat::kJson) {
    // One JSON record, so that log pipelines reading stderr keep parsing.
    if (!message.empty()) {
      std::string text =
          absl::StrCat(summary, "dgt-run: ", exit_status == 0 ? "done" : "error", ": ", message);
      if (exit_status == 0) {
        spdlog::info("{}", text);
      } else {
        spdlog::error("{}", text);
      }
    } else if (exit_status == 0) {
      spdlog::info("dgt-run: run '{}' succeeded", options_.run_id);
    }
  } else if (!message.empty()) {
    std::fputs(summary.c_str(), stderr);
    std::fprintf(stderr, "dgt-run: %s: %s\n", exit_status == 0 ? "done" : "error", message.c_str());
  } else if (exit_status == 0) {
    spdlog::info("dgt-run: run '{}' succeeded", options_.run_id);
  }
  // With the service there, every node hears the outcome from it: marks still queued would only
  // make this agent wait for a store that may be gone already.
  if (round_tasks_ && !ServiceLost() && !linger_) round_tasks_->DropQueued();
  join_timer_.cancel();
  drain_timer_.cancel();
  reconnect_timer_.cancel();
  marks_timer_.cancel();
  tf_timer_.cancel();
  if (tf_tasks_) tf_tasks_->DropQueued();
  signals_.cancel();
  if (workers_) workers_->KillAll();
  work_.reset();
  io_.stop();
}

}  // namespace dgt::agent
