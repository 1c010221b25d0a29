#include "agent/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/coord/rendezvous_host.h"
#include "agent/exit_codes.h"
#include "agent/workers/log_dir.h"
#include "agent/workers/log_line_prefix.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/store_keys.h"
#include "dgt/worker/net_discovery.h"

namespace dgt::agent {

namespace {

namespace asio = boost::asio;

// Connecting to the round's store, and each request to it (done marks, TensorFlow addresses).
constexpr absl::Duration kRoundStoreTimeout = absl::Seconds(1);

}  // namespace

Agent::Agent(LaunchOptions options, AgentEnv env)
    : options_(std::move(options)),
      env_(std::move(env)),
      work_(asio::make_work_guard(io_)),
      signals_(io_),
      lifecycle_timer_(io_),
      reconnect_timer_(io_),
      session_policy_(SessionPolicy::Options()),
      marks_(io_, kRoundStoreTimeout),
      workers_(io_, options_, env_, assignment_, kRoundStoreTimeout,
               [this](const LifecycleActions& a) { Execute(a); }) {}

Agent::~Agent() {
  // Terminate flushed the last done mark; what is left is cancelled now, while the members its
  // callbacks use exist (they see the lifecycle done and return).
  marks_.Drop();
  workers_.StopExchange();
  // A connection attempt in flight ends within its (1 s) deadline; its session is closed here,
  // while the loop its callbacks post to still exists.
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  {
    dgt::MutexLock lock(&reconnect_mu_);
    if (reconnect_result_ && reconnect_result_->ok()) (**reconnect_result_)->Close();
    reconnect_result_.reset();
  }
  workers_.Shutdown();
  if (session_) session_->Close();
  if (store_) store_->Stop();
  // Quietly: the agent's own last stderr line says how the run ended (docs/EXIT_CODES.md).
  if (embedded_rendezvous_) embedded_rendezvous_->Shutdown(absl::Seconds(1), /*quiet=*/true);
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

void Agent::CreateLifecycle(RestartBackend backend) {
  NodeLifecycle::Options o;
  o.run_id = options_.run_id;
  o.node_id = options_.node_id;
  o.rdzv_endpoint = EndpointsText();
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
    switch (a.level) {
      case actions::Level::kDebug:
        spdlog::debug("dgt-run: {}", a.text);
        break;
      case actions::Level::kInfo:
        spdlog::info("dgt-run: {}", a.text);
        break;
      case actions::Level::kWarn:
        spdlog::warn("dgt-run: {}", a.text);
        break;
      case actions::Level::kError:
        spdlog::error("dgt-run: {}", a.text);
        break;
    }
  } else if constexpr (std::is_same_v<A, actions::StartRound>) {
    workers_.StartRound(a.restart_count, round_);
  } else if constexpr (std::is_same_v<A, actions::ApplyAssignment>) {
    ApplyHeld(a);
  } else if constexpr (std::is_same_v<A, actions::StopWorkers>) {
    workers_.Stop(a.signal);
  } else if constexpr (std::is_same_v<A, actions::KillWorkers>) {
    workers_.KillAll();
  } else if constexpr (std::is_same_v<A, actions::ForwardSignal>) {
    workers_.Signal(a.signal);
  } else if constexpr (std::is_same_v<A, actions::RecordFailure>) {
    workers_.RecordFailure(a.exit, a.recovered);
  } else if constexpr (std::is_same_v<A, actions::ClearFailures>) {
    workers_.ClearFailures();
  } else if constexpr (std::is_same_v<A, actions::PublishFailure>) {
    workers_.PublishFailure(a.exit, a.restart, a.restart_count);
  } else if constexpr (std::is_same_v<A, actions::InterruptCoordinator>) {
    coordinator_->Interrupt();  // Node rank 0 stops waiting for the other nodes.
  } else if constexpr (std::is_same_v<A, actions::WatchDrain>) {
    workers_.OnDrained([this] { Execute(lifecycle_->OnDrained()); });
  } else if constexpr (std::is_same_v<A, actions::Report>) {
    coordinator_->Report(a);
  } else if constexpr (std::is_same_v<A, actions::MarkDone>) {
    MarkDone(a.exit_status);
  } else if constexpr (std::is_same_v<A, actions::PollMarks>) {
    PollMarks();
  } else if constexpr (std::is_same_v<A, actions::PollMarksLater>) {
    marks_.PollLater([this] { PollMarks(); });
  } else if constexpr (std::is_same_v<A, actions::FinishFromMarks>) {
    FinishFromMarks(a.exit_status, a.text);
  } else if constexpr (std::is_same_v<A, actions::Linger>) {
    FinishLinger(a.exit_status, a.text);
  } else if constexpr (std::is_same_v<A, actions::Reconnect>) {
    StartReconnect(closed_status_);
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

void Agent::Finish(int exit_status, const std::string& message) {
  Execute(lifecycle_->Finish(exit_status, message));
}

void Agent::LeaveRun(int exit_status, const std::string& message) {
  Execute(lifecycle_->LeaveRun(exit_status, message, Alive()));
}

RoundAssignment Agent::CurrentRound(const std::string& reason) const {
  RoundAssignment r;
  r.round = round_;
  r.restart_count = assignment_.restart_count;
  r.node_rank = assignment_.node_rank;
  r.node_count = assignment_.node_count;
  r.reason = reason;
  return r;
}

void Agent::ApplyHeld(const actions::ApplyAssignment& a) {
  if (a.assignment) {
    ApplyAssignment(*held_assignment_);
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

void Agent::ReportToService(const actions::Report& a) {
  rdzv_v1::AgentMessage message;
  rdzv_v1::NodeReport* report = message.mutable_report();
  report->set_round(round_);
  if (a.failure) {
    const WorkerExit& e = *a.failure;
    report->set_succeeded(false);
    report->set_message(
        absl::StrCat("rank ", e.rank, " (local rank ", e.local_rank, ") ", e.Describe()));
    rdzv_v1::WorkerFailure* f = report->mutable_failure();
    f->set_rank(e.rank);
    f->set_local_rank(e.local_rank);
    f->set_exit_code(e.exit_code);
    f->set_signal(e.signal);
    f->set_time_unix_s(absl::ToDoubleSeconds(e.time - absl::UnixEpoch()));
  } else {
    report->set_succeeded(true);
  }
  // The done mark lets node rank 0 keep the round's store until every node is done, and the
  // nodes learn the outcome, even when the service is gone.
  MarkDone(a.exit_status);
  last_report_ = message;
  if (ServiceLost()) {
    PollMarks();  // The report goes out after the rejoin.
    return;
  }
  // A failed send means the stream ended: its closed callback starts reconnecting.
  if (session_policy_.open()) (void)session_->Send(message);
  // Wait for the service's answer: the run's end (node rank 0 keeps serving the store until
  // every node is done), or a new round (a restart after a failure).
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
  // With the service there, every node hears the outcome from it: marks still pending would only
  // make this agent wait for a store that may be gone already.
  if (!ServiceLost() && !lifecycle_->lingering()) marks_.Drop();
  lifecycle_timer_.cancel();
  reconnect_timer_.cancel();
  marks_.CancelPollLater();
  workers_.StopExchange();
  signals_.cancel();
  session_policy_.Retire();  // The session's late callbacks are dropped.
  workers_.KillAll();
  FlushAndStop();
}

void Agent::FlushAndStop() {
  marks_.FlushThen([this] {
    marks_.CancelFlush();
    work_.reset();
    io_.stop();
  });
}

}  // namespace dgt::agent
