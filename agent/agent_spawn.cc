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
#include "agent/agent.h"
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

namespace asio = boost::asio;

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
    extras.tf_config = BuildTfConfig(tf_.addresses(), options_.parameter_server_count,
                                     options_.tf_chief, spec.rank);
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
  failures_.clear();
  recovered_failures_.clear();
  if (workers_) retired_.push_back(std::move(workers_));
  workers_ = std::make_unique<WorkerGroup>(
      io_, [this](const WorkerExit& e) { OnWorkerExit(e); },
      [this](pid_t pgid) { watchdog_.Register(pgid); },
      [this](pid_t pgid) { watchdog_.Unregister(pgid); }, env_.launcher);
  if (options_.distribution == Distribution::kTensorflow) {
    if (assignment_.node_count > 1) {
      StartTfExchange(workers_.get(), restart_count);
      return;
    }
    tf_.UseLocalAddresses();
  }
  SpawnRound(workers_.get(), restart_count);
}

void Agent::SpawnRound(WorkerGroup* group, int restart_count) {
  // The TF_CONFIG addresses are known: the workers bind these ports now.
  tf_.ReleasePorts();
  SpawnFrom(group, 0, restart_count);
}

void Agent::StartTfExchange(WorkerGroup* group, int restart_count) {
  TfExchange::Callbacks callbacks;
  callbacks.gate = [this, group] {
    if (workers_.get() != group || state() == NodeState::kDone) return TfExchange::Gate::kGone;
    return state() == NodeState::kRunning ? TfExchange::Gate::kGo : TfExchange::Gate::kStopping;
  };
  callbacks.on_ready = [this, group, restart_count] { SpawnRound(group, restart_count); };
  callbacks.on_stopping = [this, group, restart_count] { SpawnFrom(group, 0, restart_count); };
  callbacks.on_finish = [this](int exit_status, const std::string& message) {
    Finish(exit_status, message);
  };
  // The static backend has one round and no round number.
  tf_.Start(std::max<int64_t>(round_, 0), assignment_.node_rank, assignment_.node_count,
            assignment_.master_addr, assignment_.master_port, std::move(callbacks));
}

void Agent::SpawnFrom(WorkerGroup* group, int first, int restart_count) {
  // Workers started per turn of the loop: a few ms of fork/exec each, so a SIGTERM (or a worker
  // that failed at once) waits at most about a batch, not for thousands of spawns.
  constexpr int kSpawnBatch = 32;
  if (workers_.get() != group || state() == NodeState::kDone) return;  // A later round took over.
  if (state() != NodeState::kRunning) {
    // Stopping (a signal, a failure, a new round): the rest is not started.
    SpawnDone(restart_count);
    return;
  }
  const int end = std::min(first + kSpawnBatch, options_.nproc_per_node);
  for (int local = first; local < end; ++local) {
    absl::StatusOr<WorkerSpec> spec = MakeSpec(local, restart_count);
    absl::Status status = spec.ok() ? workers_->StartOne(*spec).status() : spec.status();
    if (!status.ok()) {
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
  if (state() == NodeState::kRunning) {
    if (restart_count > 0) {
      spdlog::info("dgt-run: restarted {} worker(s) with TORCHELASTIC_RESTART_COUNT={}",
                   options_.nproc_per_node, restart_count);
    }
    if (options_.restart_policy == RestartPolicy::kRank) {
      // Connect now: a failure is then published without paying for a connection.
      EnsurePublisher();
      publisher_->Prepare(assignment_.master_addr, assignment_.master_port);
      // Warm standbys for this round's rank restarts (RestartRank; docs/RECOVERY.md).
      if (absl::Status s = workers_->StartStandbys(options_.standby_workers); !s.ok()) {
        spdlog::warn("dgt-run: --standby-workers: {}", s.message());
      }
    }
  }
  // Every worker started in earlier batches may have exited while later ones were started (their
  // exits waited for this).
  Execute(lifecycle_->OnSpawnDone(workers_->alive(), env_.clock->Now()));
}

}  // namespace dgt::agent
