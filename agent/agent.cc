#include "agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "agent/exit_codes.h"
#include "agent/node_setup.h"
#include "agent/workers/log_dir.h"
#include "common/logging.h"

namespace dgt::agent {

namespace {

namespace asio = boost::asio;

// Connecting to the round's store, and each request to it (done marks, TensorFlow addresses).
constexpr absl::Duration kRoundStoreTimeout = absl::Seconds(1);

spdlog::level::level_enum SpdlogLevel(actions::Level level) {
  switch (level) {
    case actions::Level::kDebug:
      return spdlog::level::debug;
    case actions::Level::kInfo:
      return spdlog::level::info;
    case actions::Level::kWarn:
      return spdlog::level::warn;
    case actions::Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

}  // namespace

Agent::Agent(LaunchOptions options, AgentEnv env)
    : options_(std::move(options)),
      env_(std::move(env)),
      work_(asio::make_work_guard(io_)),
      signals_(io_),
      lifecycle_timer_(io_),
      workers_(io_, options_, env_, assignment_, kRoundStoreTimeout,
               [this](const LifecycleActions& a) { Execute(a); }) {}

Agent::~Agent() {
  if (health_) health_->Stop();
  // Terminate flushed the last done mark; what is left is cancelled now, while the members its
  // callbacks use exist (they see the lifecycle done and return).
  workers_.StopExchange();
  if (rdzv_) rdzv_->Shutdown();
  workers_.Shutdown();
  if (store_) store_->Stop();
}

void Agent::WaitForSignals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    Execute(lifecycle_->OnSignal(sig, workers_.has_group()));
    WaitForSignals();
  });
}

int Agent::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread starts (gRPC, the store): the watchdog is forked from here.
  if (absl::Status s = workers_.StartWatchdog(); !s.ok()) {
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
  // A node that fails a health check does not join.
  if (std::optional<std::string> unhealthy = CheckHealthBeforeJoin()) {
    // (Without --node-id, the default "<hostname>:<pid>" is only chosen at the join.)
    const std::string who = options_.node_id.empty()
                                ? std::string("this node")
                                : absl::StrCat("node '", options_.node_id, "'");
    std::fprintf(stderr, "dgt-run: error: %s; %s does not join run '%s'\n", unhealthy->c_str(),
                 who.c_str(), options_.run_id.c_str());
    return kExitNodeUnhealthy;
  }
  // Signals are taken over only once Prepare() is done: it blocks (connecting to the rendezvous
  // service, up to --rdzv-connect-timeout) before the event loop runs, and a SIGTERM or Ctrl-C
  // then must end dgt-run at once (the default action; nothing was started yet), not be queued.
  int prepare_exit_status = 1;
  if (absl::Status s = Prepare(&prepare_exit_status); !s.ok()) {
    std::fprintf(stderr, "dgt-run: error: %s\n", std::string(s.message()).c_str());
    // A flag whose value is wrong (--local-addr, --master-addr, --rdzv-token-file) is a usage
    // error, exit 2 like the parser's; an unreachable rendezvous service 69; anything else (a
    // port in use, ...) 1.
    if (s.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
    return prepare_exit_status;
  }
  for (int sig : options_.signals_to_handle) signals_.add(sig);
  WaitForSignals();
  health_->Start();
  io_.run();
  return exit_status_;
}

std::optional<std::string> Agent::CheckHealthBeforeJoin() {
  HealthMonitor::Options ho;
  ho.interval = absl::Seconds(options_.health.interval_s);
  ho.check_timeout = absl::Seconds(options_.health.check_timeout_s);
  ho.track_group = [this](pid_t pgid, bool running) { workers_.WatchGroup(pgid, running); };
  health_ = std::make_unique<HealthMonitor>(io_, ho, [this](const std::string& message) {
    if (lifecycle_) Execute(lifecycle_->OnHealthFailed(message, workers_.has_group()));
  });
  health_fs_ = SystemHealthFs();
  char cwd[4096];
  const std::string work_dir = ::getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "";
  health_->AddChecksFor(options_.health, options_.log_dir, work_dir, health_fs_.get());
  return health_->RunOnce();
}

absl::Status Agent::Prepare(int* exit_status) {
  absl::StatusOr<NodeSetup> setup = PrepareNode(options_, env_, exit_status);
  if (!setup.ok()) return setup.status();
  advertised_address_ = std::move(setup->advertised_address);
  store_ = std::move(setup->store);
  auto sink = [this](const LifecycleActions& a) { Execute(a); };
  if (setup->static_backend) {
    const StaticCoordinator::Options& co = *setup->static_backend;
    assignment_ = setup->assignment;
    CreateLifecycle(RestartBackend::kStatic, "");
    auto backend = std::make_unique<StaticBackend>(io_, co, lifecycle_.get(), sink);
    StaticBackend* started = backend.get();
    coordinator_ = std::move(backend);
    spdlog::info("dgt-run: static rendezvous: node rank {} of {}, store at {}:{}", co.node_rank,
                 co.node_count, co.master_addr, co.master_port);
    started->Start();
    return absl::OkStatus();
  }
  RendezvousCoordinator::Node node;
  node.round = &round_;
  node.assignment = &assignment_;
  node.advertised_address = &advertised_address_;
  node.alive = [this] { return workers_.alive(); };
  node.store_port = [this] { return store_ ? static_cast<int>(store_->port()) : 0; };
  node.waiting_as_spare = [this] {
    if (round_ < 0) workers_.PrepareSpare();
  };
  auto coordinator = std::make_unique<RendezvousCoordinator>(
      io_, options_, env_.clock, std::move(*setup->rendezvous), std::move(node), sink);
  rdzv_ = coordinator.get();
  coordinator_ = std::move(coordinator);
  CreateLifecycle(RestartBackend::kRendezvous, rdzv_->EndpointsText());
  if (absl::Status s = rdzv_->Open(exit_status); !s.ok()) return s;
  spdlog::info("dgt-run: node {} ({}) joining run '{}' at {} ({} worker(s), --nnodes={}:{})",
               options_.node_id, advertised_address_, options_.run_id, rdzv_->endpoint(),
               options_.nproc_per_node, options_.min_nodes, options_.max_nodes);
  // The round must come within the join timeout (exit 75).
  lifecycle_->OnJoinSent(env_.clock->Now());
  ArmLifecycleTimer();
  return absl::OkStatus();
}

void Agent::CreateLifecycle(RestartBackend backend, const std::string& endpoints) {
  NodeLifecycle::Options o;
  o.run_id = options_.run_id;
  o.node_id = options_.node_id;
  o.rdzv_endpoint = endpoints;
  o.advertised_address = advertised_address_;
  o.min_nodes = options_.min_nodes;
  o.nproc_per_node = options_.nproc_per_node;
  o.join_timeout_s = options_.join_timeout_s;
  o.join_timeout_flag = options_.join_timeout_flag;
  o.reconnect_timeout_s = options_.reconnect_timeout_s;
  o.stop_timeout_s = options_.stop_timeout_s;
  o.restart_policy = options_.restart_policy;
  o.max_restarts = options_.max_restarts;
  o.shrink = options_.restart_policy == RestartPolicy::kRank &&
             options_.recovery_mode == RecoveryMode::kShrink;
  o.backend = backend;
  lifecycle_ = std::make_unique<NodeLifecycle>(std::move(o), env_.clock);
  workers_.Bind(lifecycle_.get());
  if (rdzv_) rdzv_->Bind(lifecycle_.get());
}

void Agent::Execute(const LifecycleActions& actions) {
  for (const LifecycleAction& a : actions) Carry(a);
  ArmLifecycleTimer();
}

void Agent::Carry(const LifecycleAction& action) {
  std::visit([this](const auto& a) { CarryOne(a); }, action);
}

template <typename A>
void Agent::CarryOne(const A& a) {
  if constexpr (std::is_same_v<A, actions::Log>) {
    spdlog::log(SpdlogLevel(a.level), "dgt-run: {}", a.text);
  } else if constexpr (std::is_same_v<A, actions::StartRound>) {
    workers_.StartRound(a.restart_count, round_, a.replacing);
  } else if constexpr (std::is_same_v<A, actions::ApplyAssignment>) {
    ApplyHeld(a);
  } else if constexpr (std::is_same_v<A, actions::StopWorkers>) {
    workers_.Stop(a.signal);
  } else if constexpr (std::is_same_v<A, actions::KillWorkers>) {
    workers_.KillAll();
  } else if constexpr (std::is_same_v<A, actions::ForwardSignal>) {
    workers_.Signal(a.signal);
  } else if constexpr (std::is_same_v<A, actions::RecordFailure>) {
    workers_.RecordFailure(a.exit, a.recovered, a.root_cause);
  } else if constexpr (std::is_same_v<A, actions::ClearFailures>) {
    workers_.ClearFailures();
  } else if constexpr (std::is_same_v<A, actions::PublishFailure>) {
    workers_.PublishFailure(a.exit, a.restart, a.restart_count);
  } else if constexpr (std::is_same_v<A, actions::LeaveSession>) {
    if (rdzv_) rdzv_->Leave();
  } else if constexpr (std::is_same_v<A, actions::InterruptCoordinator>) {
    coordinator_->Interrupt();  // Node rank 0 stops waiting for the other nodes.
  } else if constexpr (std::is_same_v<A, actions::WatchDrain>) {
    workers_.OnDrained([this] { Execute(lifecycle_->OnDrained()); });
  } else if constexpr (std::is_same_v<A, actions::Report>) {
    coordinator_->Report(a);
  } else if constexpr (std::is_same_v<A, actions::MarkDone>) {
    rdzv_->MarkDone(a.exit_status);
  } else if constexpr (std::is_same_v<A, actions::PollMarks>) {
    rdzv_->PollMarks();
  } else if constexpr (std::is_same_v<A, actions::PollMarksLater>) {
    rdzv_->PollMarksLater();
  } else if constexpr (std::is_same_v<A, actions::FinishFromMarks>) {
    rdzv_->FinishFromMarks(a.exit_status, a.text);
  } else if constexpr (std::is_same_v<A, actions::Linger>) {
    if (rdzv_) {
      rdzv_->FinishLinger(a.exit_status, a.text);
    } else if (state() != NodeState::kDone && !lifecycle_->lingering()) {
      Finish(a.exit_status, a.text);  // No store outlives the static backend's node.
    }
  } else if constexpr (std::is_same_v<A, actions::Reconnect>) {
    rdzv_->Reconnect();
  } else {
    static_assert(std::is_same_v<A, actions::Finish>, "an action the Agent does not carry out");
    Terminate(a.exit_status, a.text);
  }
}

void Agent::ArmLifecycleTimer() {
  std::optional<absl::Time> next = lifecycle_->NextDeadline();
  if (!next || state() == NodeState::kDone) {
    lifecycle_timer_.cancel();
    return;
  }
  const absl::Duration wait = std::max(*next - env_.clock->Now(), absl::ZeroDuration());
  lifecycle_timer_.expires_after(absl::ToChronoNanoseconds(wait));
  lifecycle_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) Execute(lifecycle_->OnTick(env_.clock->Now()));
  });
}

void Agent::BeginRun(const std::string& reason, bool in_place) {
  if (absl::Status s = workers_.SetUpLogs(); !s.ok()) {
    Finish(kExitLauncherError, std::string(s.message()));
    return;
  }
  if (options_.distribution == Distribution::kTensorflow) {
    if (absl::Status s = workers_.ReserveTfPorts(advertised_address_); !s.ok()) {
      Finish(1, absl::StrCat("cannot reserve TF_CONFIG ports: ", s.message()));
      return;
    }
  }
  Execute(lifecycle_->OnRoundApplied(CurrentRound(reason, in_place)));
}

void Agent::ApplyAssignment(const rdzv_v1::Assignment& a) {
  const bool first_round = round_ < 0;
  round_ = a.round();
  assignment_.run_id = a.run_id();
  assignment_.node_rank = a.node_rank();
  assignment_.node_count = a.node_count();
  assignment_.world_size = a.world_size();
  assignment_.first_global_rank = a.first_global_rank();
  assignment_.local_world_size = options_.nproc_per_node;
  assignment_.master_addr = a.master_addr();
  assignment_.master_port = a.master_port();
  assignment_.restart_count = a.restart_count();
  assignment_.max_restarts = options_.max_restarts;
  // The previous round's store (if this node served it) has no readers left.
  rdzv_->ReleaseRoundStore();
  std::unique_ptr<store::Server> round_store;
  int next_store_port = 0;
  if (a.node_rank() == 0 && store_ && a.master_port() == store_->port()) {
    // This node's standby store serves the round; open the next standby so that a later round
    // starts on an empty store too.
    round_store = std::move(store_);
    store::ServerOptions next;
    next.host = advertised_address_;
    store_ = env_.store_host(next);
    if (absl::Status st = store_->Start(); !st.ok()) {
      spdlog::error("dgt-run: cannot open the next store: {}", st.message());
      store_.reset();
    } else {
      next_store_port = store_->port();
    }
  }
  rdzv_->OnApplied(a, std::move(round_store), next_store_port);
  workers_.UpdateNetworkEnv(a.master_addr());
  spdlog::info(
      "dgt-run: run '{}' round {} ({}): node rank {} of {}, ranks {}..{} of world size "
      "{}, MASTER_ADDR={} MASTER_PORT={}, restart count {}",
      a.run_id(), a.round(), a.reason(), a.node_rank(), a.node_count(), a.first_global_rank(),
      a.first_global_rank() + options_.nproc_per_node - 1, a.world_size(), a.master_addr(),
      a.master_port(), a.restart_count());
  if (first_round) {
    BeginRun(a.reason(), a.in_place());
  } else {
    Execute(lifecycle_->OnRoundApplied(CurrentRound(a.reason(), a.in_place())));
  }
}

void Agent::KeepRound(const rdzv_v1::Assignment& a) {
  // The same node rank, ranks and store: the workers, the round's store (node rank 0) and the
  // next store already announced all stay.
  round_ = a.round();
  rdzv_->OnApplied(a, nullptr, 0);
  spdlog::info(
      "dgt-run: run '{}' round {} ({}): node rank {} of {}, ranks {}..{} of world size {}; the "
      "workers go on",
      a.run_id(), a.round(), a.reason(), a.node_rank(), a.node_count(), a.first_global_rank(),
      a.first_global_rank() + options_.nproc_per_node - 1, a.world_size());
}

void Agent::Finish(int exit_status, const std::string& message) {
  Execute(lifecycle_->Finish(exit_status, message));
}

RoundAssignment Agent::CurrentRound(const std::string& reason, bool in_place) const {
  RoundAssignment r;
  r.round = round_;
  r.restart_count = assignment_.restart_count;
  r.node_rank = assignment_.node_rank;
  r.node_count = assignment_.node_count;
  r.reason = reason;
  r.in_place = in_place;
  return r;
}

void Agent::ApplyHeld(const actions::ApplyAssignment& a) {
  if (a.assignment && a.keep_workers) {
    KeepRound(rdzv_->held());
    return;
  }
  if (a.assignment) {
    ApplyAssignment(rdzv_->held());
    return;
  }
  // The static backend's one round (every node is there).
  spdlog::info(
      "dgt-run: run '{}': node rank {} of {}, ranks {}..{} of world size {}, "
      "MASTER_ADDR={} MASTER_PORT={}",
      assignment_.run_id, assignment_.node_rank, assignment_.node_count,
      assignment_.first_global_rank, assignment_.first_global_rank + options_.nproc_per_node - 1,
      assignment_.world_size, assignment_.master_addr, assignment_.master_port);
  BeginRun("static");
}

void Agent::Terminate(int exit_status, const std::string& message) {
  exit_status_ = exit_status;
  std::string summary;
  if (exit_status != 0 && lifecycle_->first_failure()) {
    summary = workers_.TakeSummary(advertised_address_);
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
  if (rdzv_) rdzv_->Retire();
  if (health_) health_->Stop();
  lifecycle_timer_.cancel();
  workers_.StopExchange();
  signals_.cancel();
  workers_.KillAll();
  FlushAndStop();
}

void Agent::FlushAndStop() {
  auto stop = [this] {
    work_.reset();
    io_.stop();
  };
  if (rdzv_) {
    rdzv_->FlushThen(stop);
  } else {
    asio::post(io_, stop);  // After what the loop holds now, as a flush with nothing to write.
  }
}

}  // namespace dgt::agent
