#include "agent/workers/node_workers.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/coord/tf_cluster.h"
#include "agent/workers/log_dir.h"
#include "agent/workers/log_line_prefix.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace dgt::agent {
namespace {

namespace asio = boost::asio;

TfExchange::Options TfOptions(const LaunchOptions& o, absl::Duration store_timeout) {
  TfExchange::Options t;
  t.roles = TfRoleConfig{o.parameter_server_count, o.tf_chief, o.worker_count, o.nproc_per_node};
  t.join_timeout_s = o.join_timeout_s;
  t.join_timeout_flag = o.join_timeout_flag;
  t.store_timeout = store_timeout;
  return t;
}

HangMonitor::Options HangOptions(const LaunchOptions& o) {
  HangMonitor::Options h;
  h.detector.hang_timeout = absl::Seconds(o.hang_timeout_s);
  h.detector.first_progress_timeout = absl::Seconds(o.first_progress_timeout_s);
  return h;
}

}  // namespace

NodeWorkers::NodeWorkers(boost::asio::io_context& io, const LaunchOptions& options,
                         const AgentEnv& env, const NodeAssignment& assignment,
                         absl::Duration store_timeout, Sink sink)
    : io_(io),
      options_(options),
      env_(env),
      assignment_(assignment),
      sink_(std::move(sink)),
      hang_(io, HangOptions(options), env.clock,
            env.launcher != nullptr ? env.launcher : DefaultProcessLauncher()),
      tf_(io, TfOptions(options, store_timeout), env.clock) {}

NodeWorkers::~NodeWorkers() { Shutdown(); }

void NodeWorkers::Shutdown() {
  hang_.Stop();
  tf_.Stop();
  group_.reset();
  retired_.clear();
  if (log_root_is_temp_ && !log_root_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(log_root_, ec);
    log_root_is_temp_ = false;
  }
}

void NodeWorkers::Finish(int exit_status, const std::string& message) {
  sink_(lifecycle_->Finish(exit_status, message));
}

absl::Status NodeWorkers::SetUpLogs() {
  DGT_RETURN_IF_ERROR(SetUpLogDir());
  if (!hang_.enabled()) return absl::OkStatus();
  if (log_root_.empty()) {
    return absl::FailedPreconditionError(
        "--hang-timeout/--first-progress-timeout: no log directory for the progress file");
  }
  if (absl::Status s = hang_.Open(log_root_, options_.nproc_per_node); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--hang-timeout/--first-progress-timeout: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status NodeWorkers::SetUpLogDir() {
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
        return absl::FailedPreconditionError(
            absl::StrCat("-r/-t: cannot create a log directory: ", dir.status().message()));
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
    return absl::OkStatus();
  }
  // A directory of this launch's own: relaunching with the same --log-dir and run id must
  // neither overwrite nor mix the earlier run's logs.
  absl::StatusOr<std::string> dir = CreateRunLogDir(options_.log_dir, options_.run_id);
  if (!dir.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--log-dir: ", dir.status().message()));
  }
  log_root_ = *dir;
  spdlog::info("dgt-run: worker logs and error files of run '{}' in {}", options_.run_id,
               log_root_);
  return absl::OkStatus();
}

absl::Status NodeWorkers::ReserveTfPorts(const std::string& address) {
  return tf_.ReservePorts(address, options_.nproc_per_node);
}

void NodeWorkers::UpdateNetworkEnv(const std::string& master_addr) {
  if (network_env_master_ == master_addr) return;
  // What NCCL needs to find InfiniBand (or to stay off it), as `dgt doctor` shows it.
  worker::NetworkEnvOptions net_options;
  net_options.master_addr = master_addr;
  worker::NetworkReport report = env_.network_probe(net_options);
  network_env_ = report.env;
  network_env_master_ = master_addr;
  for (const std::string& reason : report.reasons) spdlog::debug("dgt-run: network: {}", reason);
  std::string exported;
  for (const auto& [key, value] : network_env_) absl::StrAppend(&exported, " ", key, "=", value);
  spdlog::info("dgt-run: network discovery: {} RDMA device(s); exporting{}", report.devices.size(),
               exported.empty() ? " nothing new" : exported);
}

void NodeWorkers::Stop(int signal) {
  if (!group_) return;
  hang_.ForgetAll();  // Stopping workers are not judged.
  if (signal != 0) {
    group_->Stop(absl::Seconds(options_.stop_timeout_s), signal);
  } else {
    group_->Stop(absl::Seconds(options_.stop_timeout_s));
  }
}

void NodeWorkers::KillAll() {
  hang_.ForgetAll();
  if (group_) group_->KillAll();
}

void NodeWorkers::Signal(int signal) {
  if (group_) group_->Signal(signal);
}

void NodeWorkers::OnDrained(std::function<void()> done) { group_->OnDrained(std::move(done)); }

void NodeWorkers::OnWorkerExit(const WorkerExit& exit) {
  WorkerExit e = exit;
  e.hang_order = hang_.DeclaredOrder(exit.pid);
  e.hung_at = hang_.DeclaredAt(exit.pid);
  hang_.Exited(exit.local_rank, exit.pid);
  if (state() == NodeState::kDone) return;  // Killed while the last done mark goes out.
  sink_(lifecycle_->OnWorkerExit(e, group_->alive(), env_.clock->Now()));
}

absl::StatusOr<WorkerSpec> NodeWorkers::MakeSpec(int local_rank, int attempt) {
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
  std::string stacks_file;  // Where a hung worker's stacks go (hang detection).
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
    stacks_file = (dir / "stacks.txt").string();
    std::filesystem::remove(stacks_file, ec);
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
  hang_.Prepare(local_rank, stacks_file, &env);
  if (options_.restart_policy == RestartPolicy::kRank) {
    // What the agent does when a rank dies, for trainers using dgt::worker::ElasticGroup.
    env["DGT_RECOVERY_MODE"] =
        options_.recovery_mode == RecoveryMode::kShrink ? "shrink" : "replace";
  }
  spec.env = ToEnvStrings(env);
  return spec;
}

std::unique_ptr<WorkerGroup> NodeWorkers::NewGroup() {
  return std::make_unique<WorkerGroup>(
      io_, [this](const WorkerExit& e) { OnWorkerExit(e); },
      [this](pid_t pgid) { watchdog_.Register(pgid); },
      [this](pid_t pgid) { watchdog_.Unregister(pgid); }, env_.launcher);
}

void NodeWorkers::PrepareSpare() {
  if (group_ || options_.restart_policy != RestartPolicy::kRank ||
      options_.recovery_mode != RecoveryMode::kReplace ||
      options_.distribution == Distribution::kTensorflow ||
      (options_.standby_workers == 0 && !options_.fork_server)) {
    return;
  }
  // No round yet: no log directory, and the rank's variables are the activation's.
  absl::StatusOr<WorkerSpec> spec = MakeSpec(0, 0);
  if (!spec.ok()) {
    spdlog::warn("dgt-run: cannot prepare this spare's workers: {}", spec.status().message());
    return;
  }
  group_ = NewGroup();
  group_->Prepare(*spec);
  spare_prepared_ = true;
  const bool standbys = options_.standby_workers > 0;
  absl::Status s =
      standbys ? group_->StartStandbys(options_.standby_workers) : group_->StartForkServer();
  if (!s.ok()) {
    spdlog::log(absl::IsFailedPrecondition(s) ? spdlog::level::debug : spdlog::level::warn,
                "dgt-run: this spare starts its ranks as fresh processes: {}", s.message());
    return;
  }
  spdlog::info("dgt-run: this spare warms up {} for the ranks it may take",
               standbys ? absl::StrCat(options_.standby_workers, " standby worker(s)")
                        : std::string("its fork server"));
}

void NodeWorkers::StartRound(int restart_count, int64_t round, bool replacing) {
  failures_.clear();
  recovered_failures_.clear();
  if (spare_prepared_) {
    // A spare's group: its standbys (or fork server) start this round's workers.
    spare_prepared_ = false;
    warm_group_ = group_.get();
  } else {
    if (group_) {
      group_->StopForkServer();  // Kept until exit, the retired group needs no server.
      retired_.push_back(std::move(group_));
    }
    group_ = NewGroup();
  }
  if (options_.distribution == Distribution::kTensorflow) {
    if (assignment_.node_count > 1) {
      StartTfExchange(group_.get(), restart_count, round);
      return;
    }
    tf_.UseLocalAddresses();
  }
  if (replacing) {
    PublishThenSpawn(group_.get(), 0, restart_count, absl::Now());
    return;
  }
  SpawnRound(group_.get(), restart_count);
}

void NodeWorkers::PublishThenSpawn(WorkerGroup* group, int local_rank, int restart_count,
                                   absl::Time start) {
  if (group_.get() != group || state() == NodeState::kDone) return;  // A later round took over.
  if (state() != NodeState::kRunning) {
    SpawnFrom(group, 0, restart_count);  // Stopping: nothing starts, the spawn is done.
    return;
  }
  if (local_rank >= options_.nproc_per_node) {
    spdlog::info(
        "dgt-run: published the failures of ranks {}..{} ({} ms); starting their "
        "replacements",
        assignment_.first_global_rank, assignment_.first_global_rank + options_.nproc_per_node - 1,
        absl::ToInt64Milliseconds(absl::Now() - start));
    SpawnRound(group, restart_count);
    return;
  }
  EnsurePublisher();
  const int rank = assignment_.first_global_rank + local_rank;
  publisher_->Publish(
      assignment_.master_addr, assignment_.master_port, rank,
      absl::StrCat("rank ", rank, " was lost with its node; a spare took node rank ",
                   assignment_.node_rank),
      [this, group, local_rank, restart_count, start, rank](const absl::StatusOr<int>& generation) {
        if (!generation.ok()) {
          // The survivors still see the lost peers through their communicators, and each
          // replacement opens the generation itself.
          spdlog::warn("dgt-run: cannot publish the failure of rank {}: {}", rank,
                       generation.status().message());
        }
        PublishThenSpawn(group, local_rank + 1, restart_count, start);
      });
}

void NodeWorkers::SpawnRound(WorkerGroup* group, int restart_count) {
  // The TF_CONFIG addresses are known: the workers bind these ports now.
  tf_.ReleasePorts();
  SpawnFrom(group, 0, restart_count);
}

void NodeWorkers::StartTfExchange(WorkerGroup* group, int restart_count, int64_t round) {
  TfExchange::Callbacks callbacks;
  callbacks.gate = [this, group] {
    if (group_.get() != group || state() == NodeState::kDone) return TfExchange::Gate::kGone;
    return state() == NodeState::kRunning ? TfExchange::Gate::kGo : TfExchange::Gate::kStopping;
  };
  callbacks.on_ready = [this, group, restart_count] { SpawnRound(group, restart_count); };
  callbacks.on_stopping = [this, group, restart_count] { SpawnFrom(group, 0, restart_count); };
  callbacks.on_finish = [this](int exit_status, const std::string& message) {
    Finish(exit_status, message);
  };
  // The static backend has one round and no round number.
  tf_.Start(std::max<int64_t>(round, 0), assignment_.node_rank, assignment_.node_count,
            assignment_.master_addr, assignment_.master_port, std::move(callbacks));
}

void NodeWorkers::SpawnFrom(WorkerGroup* group, int first, int restart_count) {
  // Workers started per turn of the loop: a few ms of fork/exec each, so a SIGTERM (or a worker
  // that failed at once) waits at most about a batch, not for thousands of spawns.
  constexpr int kSpawnBatch = 32;
  if (group_.get() != group || state() == NodeState::kDone) return;  // A later round took over.
  if (state() != NodeState::kRunning) {
    // Stopping (a signal, a failure, a new round): the rest is not started.
    SpawnDone(restart_count);
    return;
  }
  const int end = std::min(first + kSpawnBatch, options_.nproc_per_node);
  for (int local = first; local < end; ++local) {
    absl::StatusOr<WorkerSpec> spec = MakeSpec(local, restart_count);
    absl::StatusOr<pid_t> pid = !spec.ok()             ? spec.status()
                                : group == warm_group_ ? group_->StartReplacement(*spec)
                                                       : group_->StartOne(*spec);
    const absl::Status& status = pid.status();
    if (pid.ok()) hang_.Started(local, spec->rank, *pid);
    if (!status.ok()) {
      group_->KillAll();  // The ones already started; the group's destructor reaps them.
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

void NodeWorkers::SpawnDone(int restart_count) {
  warm_group_ = nullptr;
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
      if (absl::Status s = group_->StartStandbys(options_.standby_workers); !s.ok()) {
        spdlog::warn("dgt-run: --standby-workers: {}", s.message());
      }
      // Without standbys, a fork server forks the replacements (docs/RECOVERY.md "Fork server").
      if (options_.standby_workers == 0 && options_.fork_server &&
          options_.recovery_mode == RecoveryMode::kReplace) {
        if (absl::Status s = group_->StartForkServer(); !s.ok()) {
          // Not a Python command (a C++ trainer): nothing to pre-import, nothing to say.
          spdlog::log(absl::IsFailedPrecondition(s) ? spdlog::level::debug : spdlog::level::warn,
                      "dgt-run: --fork-server: {}; replacements start as fresh processes",
                      s.message());
        }
      }
    }
  }
  // Every worker started in earlier batches may have exited while later ones were started (their
  // exits waited for this).
  sink_(lifecycle_->OnSpawnDone(group_->alive(), env_.clock->Now()));
}

}  // namespace dgt::agent
