#include "daemon/daemon.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/version.h"
#include "daemon/job_command.h"
#include "daemon/job_logs.h"
#include "daemon/node_facts.h"
#include "grpcpp/grpcpp.h"
#include "replica/endpoint_list.h"
#include "replica/leadership_status.h"

namespace dgt::daemon {

namespace v1 = dgt::jobs::v1;

namespace {
constexpr absl::Duration kInitialBackoff = absl::Milliseconds(200);
// Children are reaped at least this often.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
// After the last job of a drain: how long the service may take to close its side.
constexpr absl::Duration kCloseTimeout = absl::Seconds(2);
// Beyond stop_grace_s: how long a drain waits for killed jobs to be reaped.
constexpr absl::Duration kDrainSlack = absl::Seconds(10);
// What an endpoint's log state is after a Registered (any failure after it is news).
constexpr char kRegisteredState[] = "registered";

// Registration attempts: 200 ms after a failure, doubling to max_backoff, whatever the number of
// endpoints; no jitter.
replica::RotationOptions RotationFor(absl::Duration max_backoff) {
  replica::RotationOptions options;
  options.first_pause = kInitialBackoff;
  options.max_pause_one = max_backoff;
  options.max_pause_several = max_backoff;
  options.pause_per_pass = false;
  options.jitter = [] { return 1.0; };
  return options;
}
}  // namespace

struct Daemon::Stream {
  uint64_t id = 0;
  std::string endpoint;
  std::unique_ptr<v1::Jobs::Stub> stub;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::NodeMessage, v1::ControlMessage>> rw;
  std::thread reader;
  bool registered = false;
  bool ended = false;
  // No Registered within register_timeout: cancelled by the daemon.
  bool gave_up = false;
  // Cancelled by the daemon to register again with a reloaded config (SIGHUP).
  bool reloaded = false;
  absl::Time register_deadline;
};

Daemon::Daemon(AgentConfig config, DaemonEnv env)
    : config_(std::move(config)),
      env_(std::move(env)),
      rotation_(config_.rendezvous_endpoints, RotationFor(env_.max_backoff)) {
  client_options_.tls = config_.tls;
  if (!config_.token_file.empty()) {
    auto token = rendezvous::ReadTokenFile(config_.token_file);
    if (token.ok()) {
      client_options_.token = *token;
    } else {
      spdlog::error("token_file: {}", token.status().ToString());
    }
  }
}

Daemon::~Daemon() {
  if (health_ != nullptr) health_->Stop();
  if (stream_ != nullptr) {
    stream_->context->TryCancel();
    if (stream_->reader.joinable()) stream_->reader.join();
  }
}

void Daemon::Push(Event event) {
  dgt::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
  cv_.Signal();
}

bool Daemon::WaitEvent(Event* out, absl::Time deadline) {
  dgt::MutexLock lock(&mu_);
  while (events_.empty()) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (events_.empty()) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void Daemon::RequestStop() { Push(Event{Event::kStop, 0, {}, {}}); }
void Daemon::RequestReload() { Push(Event{Event::kReload, 0, {}, {}}); }

void Daemon::Notify(const std::string& state) {
  if (env_.notify) env_.notify(state);
}

void Daemon::LogEndpoint(const std::string& endpoint, spdlog::level::level_enum level,
                         const std::string& text) {
  spdlog::log(endpoint_log_.Level(endpoint, level, text), "{}", text);
}

void Daemon::UpdateStatus() {
  std::string status;
  if (stopping_) {
    status = absl::StrCat("draining; stopping ", runner_.size(), " job(s)");
  } else if (stream_ != nullptr && stream_->registered) {
    const auto ids = runner_.RunningIds();
    status = absl::StrCat("registered with ", stream_->endpoint, "; ",
                          ids.empty() ? "idle" : "running " + absl::StrJoin(ids, ", "),
                          unhealthy_ ? "; unhealthy" : "");
  } else if (!health_known_) {
    status = "running the health checks";
  } else {
    status = absl::StrCat("connecting to ", rotation_.current());
  }
  if (status == last_status_) return;
  last_status_ = status;
  Notify("STATUS=" + status);
}

v1::NodeMessage Daemon::MakeHello() const {
  v1::NodeMessage m;
  auto* h = m.mutable_hello();
  h->set_node_name(config_.node_name);
  h->set_hostname(env_.hostname);
  for (const auto& a : NodeAddresses(config_.advertise_address)) h->add_addresses(a);
  h->set_gpu_count(CountGpus(env_.dev_dir));
  if (env_.verbs != nullptr) {
    for (const auto& d : RdmaDevices(*env_.verbs)) h->add_rdma_devices(d);
  }
  for (const auto& [k, v] : config_.labels) (*h->mutable_labels())[k] = v;
  // A job that exited while the node was not registered is still this node's until its exit
  // is sent (after the Registered that answers this hello). Left out, a new leader or a
  // restarted service would count the job lost on this node (JOBS.md) before the exit came.
  std::vector<std::string> ids = runner_.RunningIds();
  for (const auto& m : pending_updates_) {
    const std::string& id = m.update().job_id();
    if (m.update().event() == v1::JOB_EVENT_EXITED &&
        std::find(ids.begin(), ids.end(), id) == ids.end()) {
      ids.push_back(id);
    }
  }
  for (const auto& id : ids) {
    h->add_running_job_ids(id);
    if (auto it = starts_.find(id); it != starts_.end()) *h->add_running_jobs() = it->second;
  }
  h->set_version(kVersion);
  if (unhealthy_) {
    h->set_unhealthy(true);
    h->set_health_reason(agent::OneLineReason(*unhealthy_));
  }
  return m;
}

void Daemon::StartHealthChecks() {
  agent::HealthFs* fs = env_.health_fs;
  if (fs == nullptr) {
    system_health_fs_ = agent::SystemHealthFs();
    fs = system_health_fs_.get();
  }
  agent::HealthMonitor::Options options;
  options.interval = absl::Seconds(config_.health.interval_s);
  options.check_timeout = absl::Seconds(config_.health.check_timeout_s);
  options.stop_at_failure = false;  // A node that recovers takes jobs again.
  options.round_mu = &reap_mu_;
  health_ = std::make_unique<agent::HealthMonitor>(
      std::move(options), [this](const std::optional<std::string>& failure) {
        Push(Event{Event::kHealth, 0, {}, failure});
      });
  // The work dir holds the jobs' logs and dgt-run's: the disk check (min_free_disk) reads it.
  health_->AddChecksFor(config_.health, "", config_.work_dir, fs);
  // The first round on the monitor's thread too: the loop goes on (watchdog, SIGTERM) while a
  // check runs, and registers once the verdict is in.
  health_->Start(/*round_now=*/true);
}

void Daemon::OnHealth(const std::optional<std::string>& failure) {
  if (!health_known_) {
    health_known_ = true;
    if (!failure) spdlog::info("health checks passed ({} check(s))", health_->size());
  }
  if (failure == unhealthy_) return;
  if (failure) {
    spdlog::warn("node unhealthy, it takes no new job: {}", agent::OneLineReason(*failure));
  } else {
    spdlog::info("node healthy again (its health checks passed)");
  }
  unhealthy_ = failure;
  v1::NodeMessage m;
  m.mutable_health()->set_unhealthy(unhealthy_.has_value());
  m.mutable_health()->set_health_reason(agent::OneLineReason(unhealthy_.value_or("")));
  // Not registered: the next NodeHello carries it.
  Send(m);
}

namespace {

// Whether `channel` is READY by `deadline`. A connection attempt that fails (refused: nothing
// listens there, e.g. a dead leader a standby still names) answers at once, so that the daemon
// moves on to its next endpoint without waiting out the deadline. A channel already failed when
// called (gRPC's reconnect backoff) is waited for up to the deadline, as WaitForConnected does.
bool ConnectsBy(grpc::Channel& channel, absl::Time deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  bool attempted = state != GRPC_CHANNEL_TRANSIENT_FAILURE;
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted) return false;
    if (state == GRPC_CHANNEL_CONNECTING) attempted = true;
    if (!channel.WaitForStateChange(state, absl::ToChronoTime(deadline))) return false;
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return true;
}

}  // namespace

bool Daemon::Connect(const std::string& endpoint) {
  auto& channel = channels_[endpoint];
  if (channel == nullptr) {
    auto created = rendezvous::CreateClientChannel(endpoint, client_options_);
    if (!created.ok()) {
      spdlog::error("cannot connect to {}: {}", endpoint, created.status().ToString());
      return false;
    }
    channel = *created;
  }
  if (!ConnectsBy(*channel, absl::Now() + env_.connect_timeout)) {
    LogEndpoint(endpoint, spdlog::level::warn,
                absl::StrCat("jobs service at ", endpoint, " not reachable within ",
                             absl::FormatDuration(env_.connect_timeout)));
    return false;
  }
  auto s = std::make_unique<Stream>();
  s->id = next_stream_id_++;
  s->endpoint = endpoint;
  s->stub = v1::Jobs::NewStub(channel);
  s->context = std::make_unique<grpc::ClientContext>();
  rendezvous::AuthorizeCall(client_options_, s->context.get());
  s->rw = s->stub->Register(s->context.get());
  s->register_deadline = absl::Now() + env_.register_timeout;
  const v1::NodeMessage hello = MakeHello();
  // The stream's end follows and is logged (LogEndpoint) with the status.
  if (!s->rw->Write(hello)) spdlog::debug("{}: sending NodeHello failed", endpoint);
  auto* rw = s->rw.get();
  const uint64_t id = s->id;
  s->reader = std::thread([this, rw, id] {
    v1::ControlMessage m;
    while (rw->Read(&m)) Push(Event{Event::kControl, id, m, {}});
    Push(Event{Event::kStreamEnded, id, {}, {}});
  });
  stream_ = std::move(s);
  // After a failure at this endpoint, the next tries are news only when they end differently.
  const bool retry = endpoint_log_.FailedBefore(endpoint, kRegisteredState);
  spdlog::log(retry ? spdlog::level::debug : spdlog::level::info, "registering node {} with {}",
              config_.node_name, endpoint);
  return true;
}

bool Daemon::Send(const v1::NodeMessage& message) {
  if (stream_ == nullptr || !stream_->registered || stream_->ended) return false;
  return stream_->rw->Write(message);
}

bool Daemon::SendUpdate(const std::string& job_id, v1::JobEvent event, int exit_code,
                        const std::string& message) {
  v1::NodeMessage m;
  auto* u = m.mutable_update();
  u->set_job_id(job_id);
  u->set_event(event);
  u->set_exit_code(exit_code);
  u->set_message(message);
  if (Send(m)) return true;
  pending_updates_.push_back(std::move(m));
  return false;
}

void Daemon::OnStreamEnded() {
  Stream& s = *stream_;
  s.ended = true;
  if (s.reader.joinable()) s.reader.join();
  const grpc::Status status = s.rw->Finish();
  const bool was_registered = s.registered;
  const std::string& msg = status.error_message();
  const grpc::StatusCode code = status.error_code();
  const std::optional<replica::v1::NotLeader> not_leader = replica::StandbyAnswer(status);
  const bool standby = not_leader.has_value();
  const bool other_endpoint =
      code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::UNIMPLEMENTED || standby;
  // absl and gRPC status codes agree.
  std::string what = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  if (s.gave_up) {
    what = absl::StrCat("no Registered within ", absl::FormatDuration(env_.register_timeout),
                        "; given up");
  } else if (code == grpc::StatusCode::UNIMPLEMENTED) {
    absl::StrAppend(&what, ": ", s.endpoint,
                    " does not serve dgt.jobs.v1.Jobs (an older dgt-rendezvous, or the one "
                    "embedded in dgt-run?)");
  }
  if (!msg.empty() && !s.gave_up) absl::StrAppend(&what, " (", msg, ")");
  std::string next = other_endpoint ? "; trying the next endpoint" : "; retrying";
  // A standby that names the leader: go to it next when it is one of ours.
  // (An index, not an optional: gcc 12 warns about the optional's use below.)
  const size_t none = config_.rendezvous_endpoints.size();
  const size_t leader = standby ? replica::LeaderIndex(config_.rendezvous_endpoints, s.endpoint,
                                                       not_leader->leader_address())
                                      .value_or(none)
                                : none;
  const bool to_leader = leader != none;
  if (to_leader) {
    next = absl::StrCat("; trying the leader, ", config_.rendezvous_endpoints[leader], ", next");
  }
  const bool reloaded = s.reloaded && code == grpc::StatusCode::CANCELLED;
  if (reloaded) {
    // Ended on purpose by OnReload: not a failure to warn about.
    spdlog::info("registration with {} ended for the reloaded config; registering again",
                 s.endpoint);
  } else {
    LogEndpoint(s.endpoint, spdlog::level::warn,
                absl::StrCat("registration with ", s.endpoint, " ended: ", what, next));
  }
  stream_.reset();
  absl::Duration pause = absl::ZeroDuration();
  if (reloaded) {
    rotation_.MoveTo(0);
    rotation_.OnAccepted();
    if (!was_registered) pause = rotation_.OnRefused();
  } else if (was_registered) {
    // A break after registering: again at once, at the leader or the next one if it moved.
    rotation_.OnAccepted();
    if (to_leader) {
      rotation_.MoveTo(leader);
    } else if (other_endpoint) {
      rotation_.MoveTo(rotation_.index() + 1);
    }
  } else if (to_leader) {
    pause = rotation_.OnRefused();
    rotation_.MoveTo(leader);
  } else if (other_endpoint) {
    pause = rotation_.OnAttemptFailed();
  } else {
    pause = rotation_.OnRefused();
  }
  next_connect_ = absl::Now() + pause;
}

void Daemon::OnControl(const v1::ControlMessage& message) {
  switch (message.kind_case()) {
    case v1::ControlMessage::kRegistered: {
      stream_->registered = true;
      endpoint_log_.Set(stream_->endpoint, kRegisteredState);
      rotation_.OnAccepted();
      spdlog::info("registered as {} with {}", message.registered().node_name(), stream_->endpoint);
      if (!ready_sent_) {
        ready_sent_ = true;
        Notify("READY=1");
      }
      while (!pending_updates_.empty() && Send(pending_updates_.front())) {
        const v1::JobUpdate& sent = pending_updates_.front().update();
        if (sent.event() == v1::JOB_EVENT_EXITED) starts_.erase(sent.job_id());
        pending_updates_.pop_front();
      }
      if (stopping_) {
        v1::NodeMessage d;
        d.mutable_draining();
        Send(d);
      }
      break;
    }
    case v1::ControlMessage::kStart:
      OnStart(message.start());
      break;
    case v1::ControlMessage::kCancel: {
      const auto& c = message.cancel();
      const double grace_s = c.grace_s() > 0 ? c.grace_s() : config_.stop_grace_s;
      if (!runner_.Cancel(c.job_id(), absl::Seconds(grace_s), absl::Now())) {
        spdlog::warn("CancelJob for {}: not running here", c.job_id());
      }
      break;
    }
    case v1::ControlMessage::kReadLog:
      OnReadLog(message.read_log());
      break;
    default:
      spdlog::warn("ignoring an unknown control message");
  }
}

void Daemon::OnStart(const v1::StartJob& start) {
  const std::string& id = start.job_id();
  if (runner_.Has(id)) {
    spdlog::info("StartJob {}: already running here", id);
    return;
  }
  auto fail = [&](const std::string& why) {
    spdlog::error("job {} not started: {}", id, why);
    SendUpdate(id, v1::JOB_EVENT_EXITED, 1, "could not start: " + why);
  };
  if (stopping_) return fail("the node is draining");
  auto user = LookupRunAsUser(config_.run_as_user, config_.allow_root);
  if (!user.ok()) return fail(std::string(user.status().message()));
  auto launch = BuildJobLaunch(config_, start, *user, env_.environ);
  if (!launch.ok()) return fail(std::string(launch.status().message()));
  if (auto s = runner_.Start(id, *launch, *user, start.uid()); !s.ok()) {
    return fail(std::string(s.message()));
  }
  starts_[id] = start;
  SendUpdate(id, v1::JOB_EVENT_STARTED, 0, "");
}

void Daemon::OnReadLog(const v1::ReadLog& request) {
  v1::NodeMessage m;
  auto* chunk = m.mutable_log();
  chunk->set_request_id(request.request_id());
  auto read = ReadJobLog(config_.work_dir, request.job_id(), request.local_rank(), request.stream(),
                         request.offset(), request.max_bytes(), !runner_.Has(request.job_id()));
  if (read.ok()) {
    chunk->set_data(std::move(read->data));
    chunk->set_next_offset(read->next_offset);
    chunk->set_eof(read->eof);
  } else {
    chunk->set_code(static_cast<int>(read.status().code()));  // absl and gRPC codes agree.
    chunk->set_error(std::string(read.status().message()));
    chunk->set_next_offset(request.offset());
  }
  Send(m);
}

void Daemon::OnJobExit(const JobRunner::Exit& exit) {
  // Held back while not registered: the job stays in starts_ and NodeHello (MakeHello) until
  // its exit is sent.
  if (SendUpdate(exit.job_id, v1::JOB_EVENT_EXITED, exit.exit_code, exit.message)) {
    starts_.erase(exit.job_id);
  }
}

void Daemon::OnStop() {
  if (stopping_) return;
  stopping_ = true;
  const absl::Time now = absl::Now();
  spdlog::info("draining: {} job(s) get SIGTERM, SIGKILL after {} s", runner_.size(),
               config_.stop_grace_s);
  if (stream_ != nullptr && stream_->registered) {
    v1::NodeMessage d;
    d.mutable_draining();
    Send(d);
  }
  runner_.CancelAll(absl::Seconds(config_.stop_grace_s), now);
  drain_deadline_ = now + absl::Seconds(config_.stop_grace_s) + kDrainSlack;
}

void Daemon::OnReload() {
  if (!env_.reload) {
    spdlog::warn("SIGHUP: no config file to reload");
    return;
  }
  auto fresh = env_.reload();
  if (!fresh.ok()) {
    spdlog::error("config reload failed, keeping the old config: {}", fresh.status().message());
    return;
  }
  const bool changed = fresh->labels != config_.labels ||
                       fresh->rendezvous_endpoints != config_.rendezvous_endpoints;
  config_.labels = fresh->labels;
  config_.rendezvous_endpoints = fresh->rendezvous_endpoints;
  spdlog::info("config reloaded (labels, rendezvous_endpoints; other keys need a restart){}",
               changed ? "; registering again" : "");
  if (changed) {
    rotation_.SetEndpoints(config_.rendezvous_endpoints);
    endpoint_log_.Clear();
    if (stream_ != nullptr) {
      stream_->reloaded = true;
      stream_->context->TryCancel();
    }
    next_connect_ = absl::Now();
  }
}

void Daemon::CloseStream() {
  if (stream_ == nullptr) return;
  stream_->rw->WritesDone();
  // The service ends its side when it sees ours end; wait a little for it.
  const absl::Time deadline = absl::Now() + kCloseTimeout;
  Event e;
  while (stream_ != nullptr && !stream_->ended && WaitEvent(&e, deadline)) {
    if (e.kind == Event::kStreamEnded && e.stream_id == stream_->id) stream_->ended = true;
  }
  if (!stream_->ended) stream_->context->TryCancel();
  if (stream_->reader.joinable()) stream_->reader.join();
  const grpc::Status status = stream_->rw->Finish();
  spdlog::info("deregistered from {} ({})", stream_->endpoint,
               status.ok() ? "OK" : status.error_message());
  stream_.reset();
}

void Daemon::OnEvent(Event& event) {
  switch (event.kind) {
    case Event::kStop:
      OnStop();
      break;
    case Event::kReload:
      OnReload();
      break;
    case Event::kControl:
      if (stream_ != nullptr && event.stream_id == stream_->id) OnControl(event.message);
      break;
    case Event::kStreamEnded:
      if (stream_ != nullptr && event.stream_id == stream_->id) OnStreamEnded();
      break;
    case Event::kHealth:
      OnHealth(event.health_failure);
      break;
  }
}

int Daemon::Run() {
  StartHealthChecks();
  absl::Time next_watchdog = absl::Now();
  const bool watchdog = env_.watchdog_interval > absl::ZeroDuration();
  for (;;) {
    absl::Time now = absl::Now();
    std::vector<JobRunner::Exit> exits;
    // Orphans (waitpid(-1)) only between health rounds: a round's check is a child too.
    if (reap_mu_.TryLock()) {
      exits = runner_.Poll(now, /*reap_any=*/true);
      reap_mu_.Unlock();
    } else {
      exits = runner_.Poll(now, /*reap_any=*/false);
    }
    for (const auto& exit : exits) OnJobExit(exit);
    if (stopping_ && runner_.size() == 0) {
      CloseStream();
      spdlog::info("drained; exiting");
      return 0;
    }
    if (stopping_ && now >= drain_deadline_) {
      spdlog::error("drain: {} job(s) not reaped after SIGKILL; exiting", runner_.size());
      CloseStream();
      return 0;
    }
    // The first NodeHello carries the first health verdict.
    if (stream_ == nullptr && !stopping_ && health_known_ && now >= next_connect_) {
      if (!Connect(rotation_.current())) next_connect_ = absl::Now() + rotation_.OnAttemptFailed();
      now = absl::Now();
    }
    if (stream_ != nullptr && !stream_->registered && !stream_->ended &&
        now >= stream_->register_deadline) {
      // Logged with the stream's end (OnStreamEnded), once per change.
      stream_->gave_up = true;
      stream_->register_deadline = absl::InfiniteFuture();
      stream_->context->TryCancel();
    }
    if (watchdog && now >= next_watchdog) {
      Notify("WATCHDOG=1");
      next_watchdog = now + env_.watchdog_interval;
    }
    UpdateStatus();

    absl::Time deadline = now + kPollInterval;
    if (watchdog) deadline = std::min(deadline, next_watchdog);
    if (stream_ == nullptr && !stopping_ && health_known_) {
      deadline = std::min(deadline, next_connect_);
    }
    if (auto kill_at = runner_.NextDeadline()) deadline = std::min(deadline, *kill_at);
    Event event;
    if (WaitEvent(&event, deadline)) OnEvent(event);
  }
}

}  // namespace dgt::daemon
