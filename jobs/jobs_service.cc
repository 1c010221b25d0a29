#include "jobs/jobs_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "jobs/job_state.h"
#include "replica/leadership_status.h"
#include "server/auth.h"
#include "server/queued_write_reactor.h"

namespace dgt::jobs {
namespace {

constexpr int64_t kMaxLogBytes = int64_t{1} << 20;

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace

// One node daemon's Register stream: the first message must be its NodeHello. Writes are queued
// and sent one at a time.
class JobsService::NodeReactor final
    : public server::QueuedWriteReactor<v1::NodeMessage, v1::ControlMessage> {
 public:
  NodeReactor(JobsService* service, std::string peer) : service_(service), peer_(std::move(peer)) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      service_->OnNodeGone(this);
      End(grpc::Status::OK);
      return;
    }
    if (node_.empty()) {
      if (!incoming_.has_hello() || incoming_.hello().node_name().empty()) {
        End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         "the first message of a Register stream must be a NodeHello with a "
                         "node_name"));
        return;
      }
      grpc::Status s = service_->OnHello(this, incoming_.hello());
      if (!s.ok()) {
        spdlog::warn("jobs: refusing node '{}' from {}: {}", incoming_.hello().node_name(), peer_,
                     s.error_message());
        End(std::move(s));
        return;
      }
    } else {
      service_->OnNodeMessage(this, incoming_);
    }
    StartRead(&incoming_);
  }

  void OnCancel() override { service_->OnNodeGone(this); }

  void OnDone() override {
    service_->OnNodeGone(this);
    delete this;
  }

  // Set once (by OnHello, under the service's mutex) before any other read.
  void set_node(std::string node) { node_ = std::move(node); }
  const std::string& node() const { return node_; }
  const std::string& peer() const { return peer_; }

 private:
  JobsService* service_;
  const std::string peer_;
  std::string node_;
  v1::NodeMessage incoming_;
};

namespace {

using RejectReactor = server::RejectReactor<v1::NodeMessage, v1::ControlMessage>;

}  // namespace

JobsService::JobsService(JobsServiceOptions options)
    : options_(std::move(options)), scheduler_(options_.scheduler) {
  if (options_.backend == nullptr) {
    owned_backend_ = std::make_unique<InMemoryJobStateBackend>();
    backend_ = owned_backend_.get();
  } else {
    backend_ = options_.backend;
  }
  dgt::MutexLock lock(&mu_);
  leader_ = !options_.elected;
}

absl::StatusOr<std::unique_ptr<JobsService>> JobsService::Create(JobsServiceOptions options) {
  std::unique_ptr<JobsService> service(new JobsService(std::move(options)));
  if (service->options_.elected) {
    // A standby loads nothing and deletes nothing: the leader's records are the leader's; TakeOver
    // reads them when this replica leads.
    service->poller_ = std::thread([s = service.get()] { s->PollLoop(); });
    return service;
  }
  auto jobs = service->backend_->LoadJobs();
  if (!jobs.ok()) return jobs.status();
  auto nodes = service->backend_->LoadNodes();
  if (!nodes.ok()) return nodes.status();
  for (const v1::NodeInfo& node : *nodes) (void)service->backend_->DeleteNode(node.node_name());
  {
    dgt::MutexLock lock(&service->mu_);
    service->scheduler_.Restore(*jobs, absl::Now());
    if (!jobs->empty()) spdlog::info("jobs: {} job(s) restored from the backend", jobs->size());
  }
  service->poller_ = std::thread([s = service.get()] { s->PollLoop(); });
  return service;
}

JobsService::~JobsService() { Stop(); }

void JobsService::set_rdzv_endpoint(const std::string& endpoint) {
  dgt::MutexLock lock(&mu_);
  options_.scheduler.rdzv_endpoint = endpoint;
  scheduler_.set_rdzv_endpoint(endpoint);
}

void JobsService::Stop() {
  {
    dgt::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, p] : pending_logs_) {
      p.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the service is stopping"));
    }
    pending_logs_.clear();
    cv_.SignalAll();
  }
  if (poller_.joinable()) poller_.join();
}

absl::Status JobsService::TakeOver() {
  dgt::MutexLock lock(&mu_);
  if (stopping_ || leader_) return absl::OkStatus();
  auto jobs = backend_->LoadJobs();
  if (!jobs.ok()) return jobs.status();
  auto nodes = backend_->LoadNodes();
  if (!nodes.ok()) return nodes.status();
  // The old leader's registrations: those daemons register here again (listing their running
  // jobs, which keeps them on them).
  for (const v1::NodeInfo& node : *nodes) {
    absl::Status s = backend_->DeleteNode(node.node_name());
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  scheduler_ = Scheduler(options_.scheduler);
  scheduler_.Restore(*jobs, absl::Now());
  leader_ = true;
  leader_address_.clear();
  spdlog::info("jobs: replica {} leads: {} job(s) and {} node record(s) of the last leader read",
               options_.replica_id, jobs->size(), nodes->size());
  cv_.SignalAll();
  return absl::OkStatus();
}

void JobsService::StepDown(const std::string& message) {
  dgt::MutexLock lock(&mu_);
  StepDownLocked(message);
}

void JobsService::StepDownLocked(const std::string& message) {
  if (!leader_) return;
  leader_ = false;
  step_down_message_ = message;
  spdlog::warn("jobs: {}; ending {} node registration(s)", message, nodes_.size());
  const grpc::Status status(grpc::StatusCode::UNAVAILABLE, message);
  for (auto& [name, reactor] : nodes_) reactor->End(status);
  nodes_.clear();
  for (auto& [id, p] : pending_logs_) p.reactor->Finish(status);
  pending_logs_.clear();
  cv_.SignalAll();
}

void JobsService::SetLeader(const std::string& address) {
  dgt::MutexLock lock(&mu_);
  if (!leader_) leader_address_ = address;
}

void JobsService::SetReplicaId(std::string replica_id) {
  dgt::MutexLock lock(&mu_);
  options_.replica_id = std::move(replica_id);
}

bool JobsService::is_leader() {
  dgt::MutexLock lock(&mu_);
  return leader_;
}

grpc::Status JobsService::StandbyStatus() const {
  // The contract daemons and `dgt` rely on: a standby's answer moves them to the next one.
  return replica::StandbyStatus(options_.replica_id, leader_address_);
}

grpc::Status JobsService::CheckSubmitter(const grpc::CallbackServerContext* context,
                                         bool writes) const {
  if (!options_.submit_token.empty()) {
    if (server::BearerAuthorized(*context, options_.submit_token)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong submit token");
  }
  if (writes && !options_.allow_unauthenticated_submit) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "job submission is off: start dgt-rendezvous with --submit-token-file");
  }
  return grpc::Status::OK;
}

grpc::ServerBidiReactor<v1::NodeMessage, v1::ControlMessage>* JobsService::Register(
    grpc::CallbackServerContext* context) {
  if (!server::BearerAuthorized(*context, options_.agent_token)) {
    spdlog::warn("jobs: refusing node registration from {}: missing or wrong bearer token",
                 context->peer());
    return new RejectReactor(server::MissingBearerToken());
  }
  {
    dgt::MutexLock lock(&mu_);
    if (!leader_) return new RejectReactor(StandbyStatus());
  }
  return new NodeReactor(this, context->peer());
}

grpc::Status JobsService::OnHello(NodeReactor* reactor, const v1::NodeHello& hello) {
  dgt::MutexLock lock(&mu_);
  if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the service is stopping");
  if (!leader_) return StandbyStatus();
  std::vector<Action> actions;
  absl::Status s = scheduler_.Register(hello, absl::Now(), &actions);
  if (!s.ok()) return ToGrpc(s);
  reactor->set_node(hello.node_name());
  nodes_[hello.node_name()] = reactor;
  spdlog::info("jobs: node '{}' registered from {} ({} GPU(s), {} running job(s){}{})",
               hello.node_name(), reactor->peer(), hello.gpu_count(), hello.running_job_ids_size(),
               hello.unhealthy() ? "; unhealthy: " : "",
               hello.unhealthy() ? hello.health_reason() : "");
  v1::ControlMessage registered;
  registered.mutable_registered()->set_node_name(hello.node_name());
  if (!Persist()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, step_down_message_);
  reactor->Send(std::move(registered));
  Dispatch(std::move(actions));
  return grpc::Status::OK;
}

void JobsService::OnNodeMessage(NodeReactor* reactor, const v1::NodeMessage& message) {
  // A node's exit may end the job before the next poll: read its run first (outside mu_, as the
  // poller does), so the job keeps the ranks its run gave (`dgt logs --rank`).
  std::optional<rendezvous::RunStatus> run;
  if (message.has_update() && message.update().event() == v1::JOB_EVENT_EXITED &&
      options_.run_status) {
    run = options_.run_status(message.update().job_id());
  }
  dgt::MutexLock lock(&mu_);
  if (stopping_ || !leader_) return;
  const std::string& node = reactor->node();
  // A stream of an earlier term of this replica's leadership.
  if (auto it = nodes_.find(node); it == nodes_.end() || it->second != reactor) return;
  std::vector<Action> actions;
  const absl::Time now = absl::Now();
  switch (message.kind_case()) {
    case v1::NodeMessage::kUpdate: {
      const v1::JobUpdate& u = message.update();
      if (run.has_value()) scheduler_.OnRunStatus(*run, now);
      absl::Status s = scheduler_.OnUpdate(node, u, now, &actions);
      if (!s.ok()) {
        spdlog::warn("jobs: node '{}': {}", node, s.message());
        break;
      }
      if (u.event() == v1::JOB_EVENT_EXITED) {
        spdlog::info("jobs: {} on node '{}' exited with code {}{}{}", u.job_id(), node,
                     u.exit_code(), u.message().empty() ? "" : ": ", u.message());
      }
      if (const v1::JobInfo* job = scheduler_.FindJob(u.job_id());
          job != nullptr && IsTerminal(job->state()) && job->finished_unix_s() > 0) {
        spdlog::info("jobs: {} {}{}{}", job->job_id(), std::string(JobStateName(job->state())),
                     job->reason().empty() ? "" : ": ", job->reason());
      }
      break;
    }
    case v1::NodeMessage::kLog: {
      const v1::LogChunk& chunk = message.log();
      auto it = pending_logs_.find(chunk.request_id());
      if (it == pending_logs_.end() || it->second.node != node) break;  // Late or foreign.
      PendingLog p = std::move(it->second);
      pending_logs_.erase(it);
      if (chunk.code() != 0) {
        p.reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(chunk.code()),
                                       absl::StrCat("node ", node, ": ", chunk.error())));
        break;
      }
      p.response->set_data(chunk.data());
      p.response->set_next_offset(chunk.next_offset());
      p.response->set_node_name(node);
      const v1::JobInfo* job = scheduler_.FindJob(p.job_id);
      p.response->set_eof(chunk.eof() && job != nullptr && IsTerminal(job->state()));
      p.reactor->Finish(grpc::Status::OK);
      break;
    }
    case v1::NodeMessage::kDraining:
      spdlog::info("jobs: node '{}' is draining", node);
      scheduler_.Drain(node, now, &actions);
      break;
    case v1::NodeMessage::kHealth: {
      const v1::NodeHealth& h = message.health();
      if (h.unhealthy()) {
        spdlog::warn("jobs: node '{}' is unhealthy, it takes no new job: {}", node,
                     h.health_reason());
      } else {
        spdlog::info("jobs: node '{}' is healthy again", node);
      }
      scheduler_.SetHealth(node, h.unhealthy(), h.health_reason(), now, &actions);
      break;
    }
    case v1::NodeMessage::kHello:
      spdlog::warn("jobs: node '{}' sent a second NodeHello; ignored", node);
      break;
    default:
      break;
  }
  PersistAndDispatch(std::move(actions));
}

void JobsService::OnNodeGone(NodeReactor* reactor) {
  dgt::MutexLock lock(&mu_);
  const std::string& node = reactor->node();
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second != reactor) return;
  nodes_.erase(it);
  for (auto p = pending_logs_.begin(); p != pending_logs_.end();) {
    if (p->second.node == node) {
      p->second.reactor->Finish(
          // FAILED_PRECONDITION as for a node not registered at all: this service answered.
          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                       absl::StrCat("node '", node,
                                    "' deregistered before it answered: its log cannot be read "
                                    "now")));
      p = pending_logs_.erase(p);
    } else {
      ++p;
    }
  }
  if (stopping_ || !leader_) return;
  spdlog::warn("jobs: node '{}' deregistered (its stream ended)", node);
  std::vector<Action> actions;
  scheduler_.Deregister(node, absl::Now(), &actions);
  PersistAndDispatch(std::move(actions));
  cv_.SignalAll();  // The poller's wake-up now includes the lost node's grace.
}

void JobsService::Dispatch(std::vector<Action> actions) {
  for (Action& a : actions) {
    auto it = nodes_.find(a.node);
    if (it == nodes_.end()) continue;
    if (a.message.has_start()) {
      spdlog::info("jobs: starting {} on node '{}'", a.message.start().job_id(), a.node);
    } else if (a.message.has_cancel()) {
      spdlog::info("jobs: cancelling {} on node '{}' (grace {} s)", a.message.cancel().job_id(),
                   a.node, a.message.cancel().grace_s());
    }
    it->second->Send(std::move(a.message));
  }
}

bool JobsService::FencedLocked(const absl::Status& s) {
  if (!absl::IsFailedPrecondition(s)) return false;
  StepDownLocked(
      absl::StrCat("replica ", options_.replica_id, " lost its leadership: ", s.message()));
  if (options_.on_fenced) options_.on_fenced(s);
  return true;
}

bool JobsService::Persist() {
  Scheduler::Changes changes = scheduler_.TakeChanges();
  unsaved_jobs_.clear();
  // A fenced write: another replica leads; nothing more is written or sent from here.
  for (const std::string& id : changes.jobs) {
    if (const v1::JobInfo* job = scheduler_.FindJob(id); job != nullptr) {
      if (absl::Status s = backend_->PutJob(*job); !s.ok()) {
        if (FencedLocked(s)) return false;
        spdlog::warn("jobs: job {} not saved: {}", id, s.message());
        unsaved_jobs_[id] = std::string(s.message());
      }
    }
  }
  if (!unsaved_jobs_.empty() && options_.elected) {
    // A job record whose write failed may or may not be in etcd, so this replica's memory of
    // the job can no longer be vouched for: an answer from it (a read, "already finished") could
    // name a state the next leader never sees. It gives up its leadership; the next leader (this
    // replica too, after a new campaign) reads every job from etcd (TakeOver). The caller still
    // answers with the unsaved change's own message.
    const auto& [id, why] = *unsaved_jobs_.begin();
    const absl::Status status =
        absl::UnavailableError(absl::StrCat("job ", id, "'s record was not saved (", why,
                                            "); the next leader reads every job from etcd"));
    StepDownLocked(absl::StrCat("replica ", options_.replica_id,
                                " gave up its leadership: ", status.message()));
    if (options_.on_fenced) options_.on_fenced(status);
    return true;
  }
  std::vector<v1::NodeInfo> nodes;
  if (!changes.nodes.empty()) nodes = scheduler_.Nodes();
  for (const v1::NodeInfo& node : nodes) {
    if (!changes.nodes.contains(node.node_name())) continue;
    if (absl::Status s = backend_->PutNode(node); !s.ok()) {
      if (FencedLocked(s)) return false;
      spdlog::warn("jobs: node {} not saved: {}", node.node_name(), s.message());
    }
  }
  for (const std::string& name : changes.removed_nodes) {
    if (absl::Status s = backend_->DeleteNode(name); !s.ok() && !absl::IsNotFound(s)) {
      if (FencedLocked(s)) return false;
      spdlog::warn("jobs: node {} not removed: {}", name, s.message());
    }
  }
  return true;
}

bool JobsService::PersistAndDispatch(std::vector<Action> actions) {
  if (!Persist()) return false;
  Dispatch(std::move(actions));
  return true;
}

void JobsService::PollLoop() {
  dgt::MutexLock lock(&mu_);
  absl::Time next_poll = absl::Now();
  while (!stopping_) {
    absl::Time now = absl::Now();
    // Nodes lost mid-job whose grace ended: replaced, or their job fails.
    // Only the leader decides (a standby's scheduler is reloaded at TakeOver).
    if (leader_) {
      std::vector<Action> actions;
      scheduler_.Tick(now, &actions);
      Dispatch(std::move(actions));
      Persist();
    }
    // Log reads whose node did not answer in time.
    for (auto p = pending_logs_.begin(); p != pending_logs_.end();) {
      if (p->second.deadline <= now) {
        p->second.reactor->Finish(
            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                         absl::StrCat("node '", p->second.node, "' did not send the log within ",
                                      absl::FormatDuration(options_.log_timeout))));
        p = pending_logs_.erase(p);
      } else {
        ++p;
      }
    }
    if (now >= next_poll && options_.run_status && leader_) {
      std::vector<std::string> active = scheduler_.ActiveJobIds();
      std::vector<rendezvous::RunStatus> runs;
      mu_.Unlock();  // The rendezvous takes its own mutex.
      for (const std::string& id : active) {
        // A run the rendezvous does not know: an empty status (an ended job's final poll).
        std::optional<rendezvous::RunStatus> run = options_.run_status(id);
        if (!run.has_value()) run.emplace().run_id = id;
        runs.push_back(*std::move(run));
      }
      mu_.Lock();
      if (stopping_) break;
      // Stepped down meanwhile: the runs are the next leader's.
      if (leader_) {
        for (const rendezvous::RunStatus& run : runs) scheduler_.OnRunStatus(run, absl::Now());
        Persist();
      }
      next_poll = absl::Now() + options_.poll_interval;
    } else if (now >= next_poll) {
      next_poll = now + options_.poll_interval;  // A standby polls nothing.
    }
    absl::Time wake = std::min(next_poll, scheduler_.NextTick());
    for (const auto& [id, p] : pending_logs_) wake = std::min(wake, p.deadline);
    cv_.WaitWithDeadline(&mu_, wake);
  }
}

grpc::ServerUnaryReactor* JobsService::Submit(grpc::CallbackServerContext* context,
                                              const v1::SubmitRequest* request,
                                              v1::SubmitResponse* response) {
  if (grpc::Status s = CheckSubmitter(context, /*writes=*/true); !s.ok()) return Done(context, s);
  dgt::MutexLock lock(&mu_);
  if (!leader_) return Done(context, StandbyStatus());
  std::vector<Action> actions;
  auto id = scheduler_.Submit(request->spec(), absl::Now(), &actions);
  if (!id.ok()) return Done(context, ToGrpc(id.status()));
  response->set_job_id(*id);
  const v1::JobInfo* job = scheduler_.FindJob(*id);
  spdlog::info("jobs: {} submitted ({} node(s) x {} process(es)): {}", *id,
               request->spec().instance_count(),
               request->spec().distribution().process_count_per_instance(),
               job->state() == v1::JOB_STATE_QUEUED ? absl::StrCat("queued: ", job->reason())
                                                    : std::string(JobStateName(job->state())));
  if (!PersistAndDispatch(std::move(actions))) {
    return Done(context, grpc::Status(grpc::StatusCode::UNAVAILABLE, step_down_message_));
  }
  if (auto it = unsaved_jobs_.find(*id); it != unsaved_jobs_.end()) {
    return Done(context, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                      absl::StrCat("job ", *id,
                                                   " was accepted but its record was not saved (",
                                                   it->second,
                                                   "): it may run, or be lost if this replica "
                                                   "stops leading; check `dgt jobs` before "
                                                   "submitting it again")));
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobsService::ListJobs(grpc::CallbackServerContext* context,
                                                const v1::ListJobsRequest* request,
                                                v1::ListJobsResponse* response) {
  if (grpc::Status s = CheckSubmitter(context, false); !s.ok()) return Done(context, s);
  dgt::MutexLock lock(&mu_);
  if (!leader_) {
    // A standby's view: the leader's records.
    auto jobs = backend_->LoadJobs();
    if (!jobs.ok()) return Done(context, ToGrpc(jobs.status()));
    for (v1::JobInfo& job : *jobs) *response->add_jobs() = std::move(job);
    return Done(context, grpc::Status::OK);
  }
  for (v1::JobInfo& job : scheduler_.Jobs()) *response->add_jobs() = std::move(job);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobsService::GetJob(grpc::CallbackServerContext* context,
                                              const v1::GetJobRequest* request,
                                              v1::JobInfo* response) {
  if (grpc::Status s = CheckSubmitter(context, false); !s.ok()) return Done(context, s);
  dgt::MutexLock lock(&mu_);
  std::vector<v1::JobInfo> stored;  // A standby's view: the leader's records.
  if (!leader_) {
    auto jobs = backend_->LoadJobs();
    if (!jobs.ok()) return Done(context, ToGrpc(jobs.status()));
    stored = *std::move(jobs);
  }
  const v1::JobInfo* job = nullptr;
  if (leader_) {
    job = scheduler_.FindJob(request->job_id());
  } else {
    for (const v1::JobInfo& j : stored) {
      if (j.job_id() == request->job_id()) job = &j;
    }
  }
  if (job == nullptr) {
    return Done(context, grpc::Status(grpc::StatusCode::NOT_FOUND,
                                      absl::StrCat("no job '", request->job_id(), "'")));
  }
  *response = *job;
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobsService::Cancel(grpc::CallbackServerContext* context,
                                              const v1::CancelRequest* request,
                                              v1::JobInfo* response) {
  if (grpc::Status s = CheckSubmitter(context, true); !s.ok()) return Done(context, s);
  if (request->grace_s() < 0) {
    return Done(context,
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("grace_s: must be >= 0, got ", request->grace_s())));
  }
  dgt::MutexLock lock(&mu_);
  if (!leader_) return Done(context, StandbyStatus());
  std::vector<Action> actions;
  auto job = scheduler_.Cancel(request->job_id(), request->grace_s(), absl::Now(), &actions);
  if (!job.ok()) return Done(context, ToGrpc(job.status()));
  spdlog::info("jobs: {} cancelled by request", request->job_id());
  *response = *std::move(job);
  if (!PersistAndDispatch(std::move(actions))) {
    return Done(context, grpc::Status(grpc::StatusCode::UNAVAILABLE, step_down_message_));
  }
  if (auto it = unsaved_jobs_.find(request->job_id()); it != unsaved_jobs_.end()) {
    return Done(context, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                      absl::StrCat("the cancel of job ", request->job_id(),
                                                   " was applied but not saved (", it->second,
                                                   "); ask again")));
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobsService::ReadLog(grpc::CallbackServerContext* context,
                                               const v1::ReadLogRequest* request,
                                               v1::ReadLogResponse* response) {
  if (grpc::Status s = CheckSubmitter(context, false); !s.ok()) return Done(context, s);
  const std::string& stream = request->stream();
  if (!stream.empty() && stream != "stdout" && stream != "stderr") {
    return Done(context,
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("stream: must be stdout or stderr, got '", stream, "'")));
  }
  if (request->offset() < 0 || request->max_bytes() < 0) {
    return Done(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "offset and max_bytes must be >= 0"));
  }
  dgt::MutexLock lock(&mu_);
  if (!leader_) return Done(context, StandbyStatus());
  auto target = scheduler_.LogTargetFor(request->job_id(), request->rank());
  if (!target.ok()) return Done(context, ToGrpc(target.status()));
  auto node = nodes_.find(target->node);
  if (node == nodes_.end()) {
    // FAILED_PRECONDITION, not UNAVAILABLE: this service answered (a client retries or reports
    // UNAVAILABLE as a service that did not).
    return Done(context,
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             absl::StrCat("node '", target->node, "' (rank ", request->rank(),
                                          " of ", request->job_id(),
                                          ") is not registered now: its log cannot be read")));
  }
  const uint64_t id = next_request_++;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pending_logs_[id] = PendingLog{reactor, response, target->node, request->job_id(),
                                 absl::Now() + options_.log_timeout};
  v1::ControlMessage m;
  v1::ReadLog* read = m.mutable_read_log();
  read->set_request_id(id);
  read->set_job_id(request->job_id());
  read->set_local_rank(target->local_rank);
  read->set_stream(stream.empty() ? "stdout" : stream);
  read->set_offset(request->offset());
  read->set_max_bytes(request->max_bytes() == 0 ? kMaxLogBytes
                                                : std::min(request->max_bytes(), kMaxLogBytes));
  node->second->Send(std::move(m));
  cv_.SignalAll();  // The poller's wake-up now includes this deadline.
  return reactor;
}

grpc::ServerUnaryReactor* JobsService::ListNodes(grpc::CallbackServerContext* context,
                                                 const v1::ListNodesRequest* request,
                                                 v1::ListNodesResponse* response) {
  if (grpc::Status s = CheckSubmitter(context, false); !s.ok()) return Done(context, s);
  dgt::MutexLock lock(&mu_);
  if (!leader_) {
    auto nodes = backend_->LoadNodes();
    if (!nodes.ok()) return Done(context, ToGrpc(nodes.status()));
    for (v1::NodeInfo& node : *nodes) *response->add_nodes() = std::move(node);
    return Done(context, grpc::Status::OK);
  }
  for (v1::NodeInfo& node : scheduler_.Nodes()) *response->add_nodes() = std::move(node);
  return Done(context, grpc::Status::OK);
}

}  // namespace dgt::jobs
