#include "agent/agent.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_port.h"
#include "common/logging.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

bool IsIpLiteral(const std::string& text) {
  in6_addr buf;
  return inet_pton(AF_INET, text.c_str(), &buf) == 1 || inet_pton(AF_INET6, text.c_str(), &buf) == 1;
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

// Stop signals the agent handles; torchrun's default --signals-to-handle set.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

}  // namespace

Agent::Agent(LaunchOptions options)
    : options_(std::move(options)),
      work_(asio::make_work_guard(io_)),
      signals_(io_),
      join_timer_(io_),
      drain_timer_(io_) {}

Agent::~Agent() {
  workers_.reset();
  if (session_) session_->Close();
  if (store_) store_->Stop();
  if (embedded_rendezvous_) embedded_rendezvous_->Shutdown();
}

absl::Status Agent::Prepare() {
  if (options_.node_id.empty()) options_.node_id = DefaultNodeId();

  if (options_.rdzv_endpoint.empty()) {
    // --standalone, or one node without an endpoint: embed the rendezvous on a free port.
    auto server = rendezvous::RendezvousServer::Start(rendezvous::RendezvousServerOptions{});
    if (!server.ok()) return server.status();
    embedded_rendezvous_ = std::move(*server);
    rdzv_endpoint_ = absl::StrCat("127.0.0.1:", embedded_rendezvous_->port());
    if (options_.run_id == "none") options_.run_id = RandomRunId();
  } else {
    auto hp = ParseHostPort(options_.rdzv_endpoint, 29400, "--rdzv-endpoint");
    if (!hp.ok()) return hp.status();
    auto ip = ResolveToIp(hp->host);
    if (!ip.ok()) {
      return absl::UnavailableError(absl::StrCat("--rdzv-endpoint: ", ip.status().message()));
    }
    rdzv_endpoint_ = FormatHostPort(*ip, hp->port);
  }

  // MASTER_ADDR must be an address other nodes reach: --local-addr (resolved here), else the
  // local address of the interface that routes to the rendezvous service.
  if (!options_.local_addr.empty()) {
    if (IsIpLiteral(options_.local_addr)) {
      advertised_address_ = options_.local_addr;
    } else {
      auto ip = ResolveToIp(options_.local_addr);
      if (!ip.ok()) return absl::InvalidArgumentError(absl::StrCat("--local-addr: ",
                                                                   ip.status().message()));
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
  store_ = std::make_unique<store::Server>(store_options);
  if (auto s = store_->Start(); !s.ok()) return s;

  auto session = RendezvousSession::Open(
      rdzv_endpoint_, absl::Seconds(options_.connect_timeout_s),
      [this](const rdzv_v1::ServiceMessage& m) {
        asio::post(io_, [this, m] { OnServiceMessage(m); });
      },
      [this](const grpc::Status& status) {
        asio::post(io_, [this, status] { OnSessionClosed(status); });
      });
  if (!session.ok()) return session.status();
  session_ = std::move(*session);
  session_open_ = true;

  rdzv_v1::AgentMessage join_message;
  rdzv_v1::JoinRequest* join = join_message.mutable_join();
  join->set_run_id(options_.run_id);
  join->set_node_id(options_.node_id);
  join->set_min_nodes(options_.min_nodes);
  join->set_max_nodes(options_.max_nodes);
  join->set_nproc_per_node(options_.nproc_per_node);
  join->set_address(advertised_address_);
  join->set_store_port(store_->port());
  join->set_last_call_timeout_s(options_.last_call_timeout_s);
  if (auto s = session_->Send(join_message); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the rendezvous service at ", rdzv_endpoint_, " closed the session"));
  }
  spdlog::info("dgt-run: node {} ({}) joining run '{}' at {} ({} worker(s), --nnodes={}:{})",
               options_.node_id, advertised_address_, options_.run_id, rdzv_endpoint_,
               options_.nproc_per_node, options_.min_nodes, options_.max_nodes);
  join_timer_.expires_after(absl::ToChronoMilliseconds(absl::Seconds(options_.join_timeout_s)));
  join_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kJoining) return;
    Finish(1, absl::StrCat("rendezvous for run '", options_.run_id, "' did not complete within ",
                           options_.join_timeout_s, " s (--join-timeout): ",
                           last_progress_.joined_nodes(), " of at least ",
                           options_.min_nodes, " node(s) joined"));
  });
  return absl::OkStatus();
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
  for (int sig : kStopSignals) signals_.add(sig);
  WaitForSignals();
  if (absl::Status s = Prepare(); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  io_.run();
  return exit_status_;
}

void Agent::OnServiceMessage(const rdzv_v1::ServiceMessage& message) {
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
      if (state_ == State::kJoining) {
        Finish(1, absl::StrCat("the rendezvous service refused this node: ",
                               message.error().message()));
      } else {
        spdlog::error("dgt-run: rendezvous error: {}", message.error().message());
      }
      return;
    case rdzv_v1::ServiceMessage::kStop:
      // Elastic rounds are handled by the agent in a later change; until then a stop is fatal.
      OnRunFinished(rdzv_v1::RunFinished());
      return;
    case rdzv_v1::ServiceMessage::KIND_NOT_SET:
      return;
  }
}

void Agent::OnSessionClosed(const grpc::Status& status) {
  session_open_ = false;
  switch (state_) {
    case State::kJoining:
      Finish(1, absl::StrCat("the rendezvous session at ", rdzv_endpoint_,
                             " ended before this node was assigned: ", status.error_message()));
      return;
    case State::kRunning:
    case State::kStopping:
      spdlog::warn("dgt-run: lost the rendezvous service at {} ({}); workers keep running",
                   rdzv_endpoint_, status.error_message());
      return;
    case State::kAwaitingOutcome:
      // No run outcome will come: end with this node's own result.
      if (first_failure_) {
        Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
      } else {
        Finish(0, "");
      }
      return;
    case State::kDone:
      return;
  }
}

void Agent::OnAssignment(const rdzv_v1::Assignment& a) {
  if (state_ != State::kJoining) return;
  join_timer_.cancel();
  assignment_.run_id = a.run_id();
  assignment_.node_rank = a.node_rank();
  assignment_.node_count = a.node_count();
  assignment_.world_size = a.world_size();
  assignment_.first_global_rank = a.first_global_rank();
  assignment_.local_world_size = options_.nproc_per_node;
  assignment_.master_addr = a.master_addr();
  assignment_.master_port = a.master_port();
  assignment_.restart_count = 0;
  assignment_.max_restarts = options_.max_restarts;
  if (a.node_rank() != 0) store_->Stop();
  spdlog::info("dgt-run: run '{}' round {}: node rank {} of {}, ranks {}..{} of world size {}, "
               "MASTER_ADDR={} MASTER_PORT={}", a.run_id(), a.round(), a.node_rank(),
               a.node_count(), a.first_global_rank(),
               a.first_global_rank() + options_.nproc_per_node - 1, a.world_size(),
               a.master_addr(), a.master_port());

  std::vector<std::string> command;
  if (!options_.no_python) {
    command = {options_.python, "-u"};
    if (options_.module) command.push_back("-m");
  }
  command.insert(command.end(), options_.command.begin(), options_.command.end());

  EnvMap base = CurrentEnvironment();
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < options_.nproc_per_node; ++local) {
    WorkerSpec spec;
    spec.local_rank = local;
    spec.rank = a.first_global_rank() + local;
    spec.argv = command;
    spec.env = ToEnvStrings(BuildWorkerEnv(base, assignment_, local));
    specs.push_back(std::move(spec));
  }
  workers_ = std::make_unique<WorkerGroup>(io_, [this](const WorkerExit& e) { OnWorkerExit(e); });
  state_ = State::kRunning;
  if (absl::Status s = workers_->Start(specs); !s.ok()) {
    first_failure_ = WorkerExit{};
    first_failure_->exit_code = 127;
    spdlog::error("dgt-run: cannot start workers: {}", s.message());
    StopWorkers();
    if (workers_->alive() == 0) AfterWorkersExited();
  }
}

std::string Agent::DescribeFailure(const WorkerExit& e) const {
  std::string text = absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, " on node rank ",
                                  assignment_.node_rank, ", ", advertised_address_, ", pid ",
                                  e.pid, ") ", e.Describe());
  if (!e.stderr_tail.empty()) {
    absl::StrAppend(&text, "\n  last stderr lines of rank ", e.rank, ":\n    ",
                    absl::StrJoin(e.stderr_tail, "\n    "));
  }
  return text;
}

void Agent::OnWorkerExit(const WorkerExit& e) {
  if (!e.succeeded()) {
    if (!first_failure_ && !remote_outcome_ && stop_signal_ == 0) {
      first_failure_ = e;
      spdlog::error("dgt-run: rank {} (local rank {}) {}; stopping the other workers", e.rank,
                    e.local_rank, e.Describe());
    }
    if (state_ == State::kRunning) StopWorkers();
  }
  if (workers_->alive() == 0) AfterWorkersExited();
}

void Agent::StopWorkers() {
  state_ = State::kStopping;
  workers_->Stop(absl::Seconds(options_.stop_timeout_s));
}

void Agent::OnSignal(int sig) {
  const char* name = sigabbrev_np(sig);
  if (state_ == State::kJoining || !workers_) {
    Finish(128 + sig, absl::StrCat("stopped by SIG", name ? name : "?", " before workers started"));
    return;
  }
  if (stop_signal_ != 0) {
    spdlog::warn("dgt-run: second signal SIG{}; killing the workers now", name ? name : "?");
    workers_->KillAll();
    return;
  }
  stop_signal_ = sig;
  spdlog::warn("dgt-run: received SIG{}; forwarding it to the workers and stopping",
               name ? name : "?");
  state_ = State::kStopping;
  workers_->Signal(sig);
  workers_->Stop(absl::Seconds(options_.stop_timeout_s));
}

void Agent::AfterWorkersExited() {
  if (state_ == State::kAwaitingOutcome || state_ == State::kDone) return;
  state_ = State::kAwaitingOutcome;
  // Leftover grandchildren of the workers die with their groups; their output pipes then close.
  workers_->KillAll();
  auto report = [this] {
    drain_timer_.cancel();
    if (state_ != State::kAwaitingOutcome) return;
    if (remote_outcome_) {
      OnRunFinished(*remote_outcome_);
      return;
    }
    rdzv_v1::AgentMessage message;
    rdzv_v1::NodeReport* report = message.mutable_report();
    if (stop_signal_ != 0) {
      const char* name = sigabbrev_np(stop_signal_);
      report->set_succeeded(false);
      report->set_message(absl::StrCat("agent stopped by SIG", name ? name : "?"));
      if (session_open_) (void)session_->Send(message);
      Finish(128 + stop_signal_, absl::StrCat("stopped by SIG", name ? name : "?"));
      return;
    }
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
    } else {
      report->set_succeeded(true);
    }
    if (!session_open_ || !session_->Send(message).ok()) {
      OnSessionClosed(grpc::Status(grpc::StatusCode::UNAVAILABLE, "session closed"));
      return;
    }
    if (first_failure_) {
      Finish(first_failure_->ExitStatus(), DescribeFailure(*first_failure_));
    }
    // On success, wait for the run's outcome: node rank 0 keeps serving the store until every
    // node is done.
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
      Finish(finished.succeeded() ? 0 : 1,
             finished.succeeded() ? "" : absl::StrCat("run failed: ", finished.message()));
      return;
    case State::kRunning:
    case State::kStopping:
      if (finished.succeeded()) return;  // Cannot happen before this node reported.
      if (!remote_outcome_ && !first_failure_) {
        remote_outcome_ = finished;
        spdlog::error("dgt-run: run failed on another node: {}; stopping this node's workers",
                      finished.message());
      }
      if (state_ == State::kRunning) StopWorkers();
      return;
    case State::kAwaitingOutcome:
      if (finished.succeeded()) {
        Finish(0, "");
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

void Agent::Finish(int exit_status, const std::string& message) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  exit_status_ = exit_status;
  if (!message.empty()) {
    std::fprintf(stderr, "dgt-run: %s: %s\n", exit_status == 0 ? "done" : "error",
                 message.c_str());
  } else if (exit_status == 0) {
    spdlog::info("dgt-run: run '{}' succeeded", options_.run_id);
  }
  join_timer_.cancel();
  drain_timer_.cancel();
  signals_.cancel();
  if (workers_) workers_->KillAll();
  work_.reset();
  io_.stop();
}

}  // namespace dgt::agent
