// dgt-agent's main loop: holds the node's Register stream to the jobs service (dgt.jobs.v1,
// proto/dgt/jobs/v1/jobs.proto) and runs the jobs it is sent.
//
// - Registration: tries rendezvous_endpoints in order. An endpoint hands over to the next one when
//   it is not reachable within connect_timeout, answers UNAVAILABLE or UNIMPLEMENTED (a service
//   without dgt.jobs.v1.Jobs: an older dgt-rendezvous, or dgt-run's embedded one), or answers as
//   a standby (a replica that is not the leader: replica/leadership_status.h). A standby's
//   leader_address that names one of rendezvous_endpoints (same host:port, or same address once
//   resolved) sends the next attempt there. Attempts back off from 200 ms, doubling, to
//   max_backoff; a stream that breaks after registering is registered again at once, forever
//   (NodeHello.running_job_ids keeps running jobs on this node). Failures are logged with the
//   status code's name, once per endpoint until the outcome changes (repeats at debug level).
// - Jobs: StartJob runs dgt-run (job_command.h, job_runner.h) and answers JobUpdate "started",
//   or "exited" with exit code 1 and the reason when it cannot start; its end answers "exited"
//   with dgt-run's code (held back while not registered and sent after the next Registered;
//   until then NodeHello still lists the job).
//   CancelJob: SIGTERM, SIGKILL after grace_s (0: stop_grace_s). ReadLog: a LogChunk
//   (job_logs.h).
// - systemd (through DaemonEnv::notify): READY=1 at the first Registered, STATUS= on every
//   change ("running the health checks", "registered with H:P; idle", "registered with H:P;
//   running job-3", "connecting to H:P", "draining"; "; unhealthy" after a registered one while
//   the checks fail), WATCHDOG=1 every watchdog_interval.
// - RequestStop (SIGTERM) drains: Draining to the service, every job cancelled with stop_grace_s,
//   their "exited" updates sent, then the stream half-closed (deregistration); Run returns 0.
// - Health: the node's health checks (agent/health, with agent.yaml's health keys) run once
//   before the first registration and every health_interval_s, on a thread of their own. The
//   verdict goes in every NodeHello (unhealthy, health_reason) and each change as NodeHealth. An
//   unhealthy node stays registered; the service places no job on it.
// - RequestReload (SIGHUP): DaemonEnv::reload; a new config's labels and endpoints are applied
//   (the node registers again with them); a failed reload is logged and the old config kept.
//
// Thread-safety: Run() on one thread (it forks the jobs: that thread must live as long as they
// do); RequestStop/RequestReload from any thread.
#ifndef DGT_DAEMON_DAEMON_H_
#define DGT_DAEMON_DAEMON_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/health/builtin_checks.h"
#include "agent/health/health_monitor.h"
#include "agent/health/health_policy.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "daemon/config.h"
#include "daemon/job_runner.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "dgt/worker/net_discovery.h"
#include "rendezvous/client.h"
#include "replica/endpoint_log.h"
#include "replica/endpoint_rotation.h"

namespace dgt::daemon {

struct DaemonEnv {
  // Receives sd_notify(3) state strings ("READY=1", "STATUS=...", "WATCHDOG=1"); none: dropped.
  std::function<void(const std::string&)> notify;
  // WATCHDOG=1 period; zero: none.
  absl::Duration watchdog_interval = absl::ZeroDuration();
  // Where GPUs are counted (node_facts.h CountGpus).
  std::string dev_dir = "/dev";
  // What the built-in health checks read (agent/health/builtin_checks.h); null: the real file
  // system. Not owned.
  agent::HealthFs* health_fs = nullptr;
  // RDMA device table; null: none reported.
  worker::VerbsApi* verbs = nullptr;
  std::string hostname;
  // Re-reads the config file (SIGHUP); null: reload is refused (logged).
  std::function<absl::StatusOr<AgentConfig>()> reload;
  // The daemon's environment, of which jobs get PATH, LANG, LC_ALL, TZ (job_command.h).
  std::map<std::string, std::string> environ;
  absl::Duration connect_timeout = absl::Seconds(3);
  // How long a new stream may wait for Registered before it is given up.
  absl::Duration register_timeout = absl::Seconds(10);
  absl::Duration max_backoff = absl::Seconds(5);
};

class Daemon {
 public:
  Daemon(AgentConfig config, DaemonEnv env);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until RequestStop() has drained; returns the process exit code (0).
  int Run();
  void RequestStop();
  void RequestReload();

 private:
  struct Stream;
  struct Event {
    enum Kind { kControl, kStreamEnded, kStop, kReload, kHealth } kind = kControl;
    uint64_t stream_id = 0;
    dgt::jobs::v1::ControlMessage message;
    // kHealth: a round's verdict (HealthMonitor::RoundReport).
    std::optional<std::string> health_failure;
  };

  void Push(Event event);
  bool WaitEvent(Event* out, absl::Time deadline);
  bool Connect(const std::string& endpoint);
  void OnEvent(Event& event);
  void OnControl(const dgt::jobs::v1::ControlMessage& message);
  void OnStreamEnded();
  void OnStart(const dgt::jobs::v1::StartJob& start);
  void OnReadLog(const dgt::jobs::v1::ReadLog& request);
  void OnStop();
  void OnReload();
  void OnJobExit(const JobRunner::Exit& exit);
  // Starts the rounds of health checks: the first at once, then every health_interval_s.
  void StartHealthChecks();
  // A round's verdict: nullopt healthy, else the failure message.
  void OnHealth(const std::optional<std::string>& failure);
  // True when sent; false when held back until the next Registered.
  bool SendUpdate(const std::string& job_id, dgt::jobs::v1::JobEvent event, int exit_code,
                  const std::string& message);
  bool Send(const dgt::jobs::v1::NodeMessage& message);
  void CloseStream();
  // Logs `text` about `endpoint` at `level` when it differs from the last line logged about it,
  // else at debug level: a retry loop logs once per endpoint per change, not every pass.
  void LogEndpoint(const std::string& endpoint, spdlog::level::level_enum level,
                   const std::string& text);
  void UpdateStatus();
  void Notify(const std::string& state);
  dgt::jobs::v1::NodeMessage MakeHello() const;

  AgentConfig config_;
  DaemonEnv env_;
  rendezvous::ClientOptions client_options_;
  JobRunner runner_;
  // The StartJob of each job runner_ runs, reported in NodeHello.running_jobs (a restarted
  // service adopts the jobs from them).
  std::map<std::string, dgt::jobs::v1::StartJob> starts_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  std::unique_ptr<Stream> stream_;
  uint64_t next_stream_id_ = 1;
  // Which endpoint the next registration goes to, and when (replica/endpoint_rotation.h).
  replica::EndpointRotation rotation_;
  absl::Time next_connect_ = absl::InfinitePast();
  bool ready_sent_ = false;
  bool stopping_ = false;
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  std::deque<dgt::jobs::v1::NodeMessage> pending_updates_;
  std::string last_status_;
  // The last line LogEndpoint logged about each endpoint ("registered" after a Registered).
  replica::EndpointLog endpoint_log_;

  // The last health round's failure; nullopt while healthy.
  std::optional<std::string> unhealthy_;
  // The first round's verdict is in: the node may register.
  bool health_known_ = false;
  std::unique_ptr<agent::HealthFs> system_health_fs_;

  dgt::Mutex mu_;
  dgt::CondVar cv_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  // Held by every health round and by runner_'s reaping of any child (waitpid(-1)), so that the
  // daemon never reaps a health check's process (HealthMonitor::Options::round_mu).
  dgt::Mutex reap_mu_;
  // Last: its round thread reports into events_ until it is stopped.
  std::unique_ptr<agent::HealthMonitor> health_;
};

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_DAEMON_H_
