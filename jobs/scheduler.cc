#include "jobs/scheduler.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"

namespace dgt::jobs {
namespace {

double UnixSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

std::string LabelText(const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  return absl::StrCat("{", absl::StrJoin(sorted, ", ", absl::PairFormatter("=")), "}");
}

// 128 bits from the system's random source as 32 lowercase hex digits. The source is opened once
// per thread (opening it per job was a tenth of the scheduler fuzzer's time).
std::string NewUid() {
  thread_local std::random_device rd;
  std::string uid;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&uid, "%08x", rd());
  return uid;
}

// The most unhealthy nodes a pending reason names, and the most bytes of each one's reason.
constexpr size_t kMaxUnhealthyNamed = 3;
constexpr size_t kMaxHealthReasonBytes = 200;

// `text` cut to `max` bytes at a UTF-8 character's start, "..." after a cut.
std::string Cut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return absl::StrCat(text.substr(0, end), "...");
}

// The nodes a job is placed on: its instance_count, and its spares, which wait in the run.
int32_t NodesFor(const v1::JobSpec& spec) { return spec.instance_count() + spec.spare_instances(); }

// Whether a spare of the job (spec.spare_instances) can still take a lost node's part.
bool SpareLeft(const v1::JobInfo& info) {
  return info.spares_used() < info.spec().spare_instances();
}

// A job whose nodes run (or start) it: its run's status and its nodes' losses matter.
bool StartingOrRunning(v1::JobState state) {
  return state == v1::JOB_STATE_STARTING || state == v1::JOB_STATE_RUNNING;
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {}

void Scheduler::Restore(const std::vector<v1::JobInfo>& jobs, absl::Time now) {
  for (const v1::JobInfo& info : jobs) {
    Job job;
    job.info = info;
    // Nodes not registered now are gone until they come back with the job; those of a starting
    // or running job have lost_node_grace to come back (a leader change breaks every stream).
    for (const v1::JobNode& n : info.nodes()) {
      if (n.exit_code() >= 0 || n.taken_by_spare()) continue;
      job.gone.insert(n.node_name());
      if (StartingOrRunning(info.state()) && info.finished_unix_s() == 0)
        job.lost[n.node_name()] = now;
    }
    FollowId(info.job_id());
    order_.push_back(info.job_id());
    jobs_[info.job_id()] = std::move(job);
  }
}

void Scheduler::FollowId(const std::string& job_id) {
  int64_t n = 0;
  if (absl::string_view id = job_id;
      absl::ConsumePrefix(&id, "job-") && absl::SimpleAtoi(id, &n) && n >= next_id_) {
    next_id_ = n + 1;
  }
}

Scheduler::Job* Scheduler::MutableJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return nullptr;
  changes_.jobs.insert(job_id);
  return &it->second;
}

Scheduler::Node* Scheduler::MutableNode(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nullptr;
  changes_.nodes.insert(node);
  return &it->second;
}

v1::JobNode* Scheduler::JobNodeOf(Job& job, const std::string& node) {
  for (v1::JobNode& n : *job.info.mutable_nodes()) {
    if (n.node_name() == node && !n.taken_by_spare()) return &n;
  }
  return nullptr;
}

absl::StatusOr<std::string> Scheduler::Submit(const v1::JobSpec& spec, absl::Time now,
                                              std::vector<Action>* out) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;
  std::string id = absl::StrCat("job-", next_id_++);
  Job& job = jobs_[id];
  job.info.set_job_id(id);
  *job.info.mutable_spec() = spec;
  job.info.set_state(v1::JOB_STATE_QUEUED);
  job.info.set_submitted_unix_s(UnixSeconds(now));
  job.info.set_uid(NewUid());
  order_.push_back(id);
  changes_.jobs.insert(id);
  Place(now, out);
  return id;
}

bool Scheduler::Matches(const v1::JobSpec& spec, const Node& node) const {
  for (const auto& [key, value] : spec.node_labels()) {
    auto it = node.info.labels().find(key);
    if (it == node.info.labels().end() || it->second != value) return false;
  }
  return true;
}

bool Scheduler::Usable(const v1::JobSpec& spec, const Node& node) const {
  return !node.draining && !node.info.unhealthy() && node.info.job_id().empty() &&
         Matches(spec, node);
}

std::string Scheduler::PendingReason(const v1::JobSpec& spec) const {
  int usable = 0;
  int with_labels = 0;
  std::vector<const Node*> unhealthy;
  for (const auto& [name, node] : nodes_) {
    if (!Matches(spec, node)) continue;
    ++with_labels;
    if (node.info.unhealthy()) unhealthy.push_back(&node);
    if (Usable(spec, node)) ++usable;
  }
  const int32_t needs = NodesFor(spec);
  std::string reason = absl::StrCat(
      "needs ", needs, " idle node", needs == 1 ? "" : "s",
      spec.spare_instances() > 0
          ? absl::StrCat(" (", spec.instance_count(), " and ", spec.spare_instances(), " spare",
                         spec.spare_instances() == 1 ? "" : "s", ")")
          : "",
      spec.node_labels().empty() ? ""
                                 : absl::StrCat(" with labels ", LabelText(spec.node_labels())),
      "; ", usable, usable == 1 ? " matches" : " match");
  if (unhealthy.empty()) return reason;
  std::vector<std::string> named;
  for (size_t i = 0; i < unhealthy.size() && i < kMaxUnhealthyNamed; ++i) {
    named.push_back(absl::StrCat(unhealthy[i]->info.node_name(), ": ",
                                 Cut(unhealthy[i]->info.health_reason(), kMaxHealthReasonBytes)));
  }
  if (unhealthy.size() > kMaxUnhealthyNamed) {
    named.push_back(absl::StrCat("and ", unhealthy.size() - kMaxUnhealthyNamed, " more"));
  }
  absl::StrAppend(
      &reason, "; ", unhealthy.size(), " of ", with_labels, " registered node",
      with_labels == 1 ? "" : "s", spec.node_labels().empty() ? "" : " with those labels",
      unhealthy.size() == 1 ? " is" : " are", " unhealthy (", absl::StrJoin(named, "; "), ")");
  return reason;
}

void Scheduler::Place(absl::Time now, std::vector<Action>* out) {
  // Lost nodes waiting for a replacement come before queued jobs (their job already runs).
  for (const std::string& id : order_) {
    Job& job = jobs_.at(id);
    if (job.to_replace.empty()) continue;
    if (job.info.finished_unix_s() > 0 || IsTerminal(job.info.state())) {
      job.to_replace.clear();
      continue;
    }
    std::set<std::string> waiting = job.to_replace;
    for (const std::string& lost : waiting) {
      if (Replace(job, lost, out)) job.to_replace.erase(lost);
    }
  }
  std::string blocker;
  for (const std::string& id : order_) {
    Job& job = jobs_.at(id);
    if (job.info.state() != v1::JOB_STATE_QUEUED) continue;
    if (!blocker.empty()) {
      std::string reason = absl::StrCat("waiting behind ", blocker, " (first in, first out)");
      if (job.info.reason() != reason) MutableJob(id)->info.set_reason(reason);
      continue;
    }
    const v1::JobSpec& spec = job.info.spec();
    std::vector<std::string> chosen;
    for (const auto& [name, node] : nodes_) {
      if (!Usable(spec, node)) continue;
      if (static_cast<int32_t>(chosen.size()) < NodesFor(spec)) chosen.push_back(name);
    }
    if (static_cast<int32_t>(chosen.size()) < NodesFor(spec)) {
      std::string reason = PendingReason(spec);
      if (job.info.reason() != reason) MutableJob(id)->info.set_reason(reason);
      blocker = id;
      continue;
    }
    Job& placed = *MutableJob(id);
    placed.info.set_state(v1::JOB_STATE_STARTING);
    placed.info.clear_reason();
    placed.info.set_started_unix_s(UnixSeconds(now));
    for (const std::string& name : chosen) {
      v1::JobNode* jn = placed.info.add_nodes();
      jn->set_node_name(name);
      jn->set_node_rank(-1);
      jn->set_first_rank(-1);
      jn->set_exit_code(-1);
      Node& node = *MutableNode(name);
      node.info.set_job_id(id);
      SetNodeState(node);
    }
    for (const std::string& name : chosen) out->push_back(StartAction(placed, name));
  }
}

Action Scheduler::StartAction(const Job& job, const std::string& node) const {
  Action action{node, {}};
  v1::StartJob* start = action.message.mutable_start();
  start->set_job_id(job.info.job_id());
  *start->mutable_spec() = job.info.spec();
  start->set_rdzv_endpoint(options_.rdzv_endpoint);
  start->set_uid(job.info.uid());
  for (const v1::JobNode& n : job.info.nodes()) {
    if (!n.taken_by_spare()) start->add_job_nodes(n.node_name());
  }
  start->set_submitted_unix_s(job.info.submitted_unix_s());
  start->set_started_unix_s(job.info.started_unix_s());
  return action;
}

void Scheduler::Adopt(const v1::StartJob& start, const std::string& node, absl::Time now) {
  const std::string& id = start.job_id();
  Job& job = jobs_[id];
  order_.push_back(id);
  changes_.jobs.insert(id);
  FollowId(id);
  job.info.set_job_id(id);
  *job.info.mutable_spec() = start.spec();
  job.info.set_state(v1::JOB_STATE_RUNNING);
  job.info.set_uid(start.uid());
  job.info.set_submitted_unix_s(start.submitted_unix_s());
  job.info.set_started_unix_s(start.started_unix_s());
  std::vector<std::string> names(start.job_nodes().begin(), start.job_nodes().end());
  if (std::find(names.begin(), names.end(), node) == names.end()) names.push_back(node);
  for (const std::string& name : names) {
    if (JobNodeOf(job, name) != nullptr) continue;  // Named twice.
    v1::JobNode* jn = job.info.add_nodes();
    jn->set_node_name(name);
    jn->set_node_rank(-1);
    jn->set_first_rank(-1);
    jn->set_exit_code(-1);
    if (name == node) continue;
    // Not back with it yet: lost mid-job now.
    job.gone.insert(name);
    job.lost[name] = now;
  }
  job.started.insert(node);
  job.info.set_reason(
      absl::StrCat("adopted after a service restart (reported by node ", node, ")"));
}

bool Scheduler::JoinAsReplacement(Job& job, const v1::StartJob& start, const std::string& node) {
  if (job.info.finished_unix_s() > 0) return false;
  const std::set<std::string> named(start.job_nodes().begin(), start.job_nodes().end());
  for (v1::JobNode& jn : *job.info.mutable_nodes()) {
    const std::string old = jn.node_name();
    if (jn.exit_code() >= 0 || jn.taken_by_spare() || !job.lost.contains(old) ||
        named.contains(old)) {
      continue;
    }
    job.lost.erase(old);
    job.gone.erase(old);
    job.to_replace.erase(old);
    jn.set_node_name(node);
    changes_.jobs.insert(job.info.job_id());
    return true;
  }
  return false;
}

void Scheduler::SetNodeState(Node& node) {
  node.info.set_state(node.draining ? "draining" : node.info.job_id().empty() ? "idle" : "busy");
}

absl::Status Scheduler::Register(const v1::NodeHello& hello, absl::Time now,
                                 std::vector<Action>* out) {
  const std::string& name = hello.node_name();
  if (name.empty()) return absl::InvalidArgumentError("NodeHello.node_name: must not be empty");
  if (nodes_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("node '", name, "' is already registered (another daemon holds the name)"));
  }
  Node& node = nodes_[name];
  changes_.nodes.insert(name);
  changes_.removed_nodes.erase(name);
  node.info.set_node_name(name);
  node.info.set_hostname(hello.hostname());
  *node.info.mutable_addresses() = hello.addresses();
  node.info.set_gpu_count(hello.gpu_count());
  *node.info.mutable_rdma_devices() = hello.rdma_devices();
  *node.info.mutable_labels() = hello.labels();
  node.info.set_registered_unix_s(UnixSeconds(now));
  node.info.set_unhealthy(hello.unhealthy());
  node.info.set_health_reason(hello.unhealthy() ? hello.health_reason() : "");
  std::set<std::string> running(hello.running_job_ids().begin(), hello.running_job_ids().end());
  std::map<std::string, const v1::StartJob*> starts;
  for (const v1::StartJob& start : hello.running_jobs()) {
    if (start.job_id().empty()) continue;
    starts[start.job_id()] = &start;
    running.insert(start.job_id());
  }
  std::set<std::string> foreign;  // Listed ids that name another job (uid) here.
  for (const std::string& id : running) {
    auto start = starts.find(id);
    const v1::StartJob* started = start == starts.end() ? nullptr : start->second;
    auto it = jobs_.find(id);
    if (it == jobs_.end() && started != nullptr) {
      // A job of the service before a restart: it runs on (the rules above).
      Adopt(*started, name, now);
      it = jobs_.find(id);
    }
    v1::JobNode* jn = it == jobs_.end() ? nullptr : JobNodeOf(it->second, name);
    // Another uid: a different job that had this id (both known: a daemon before uids has none).
    const bool other_job = it != jobs_.end() && started != nullptr && !started->uid().empty() &&
                           !it->second.info.uid().empty() &&
                           started->uid() != it->second.info.uid();
    // The dgt-run of a part a spare took runs on there: stopped, never a replacement.
    const bool taken = it != jobs_.end() && jn == nullptr &&
                       std::any_of(it->second.info.nodes().begin(), it->second.info.nodes().end(),
                                   [&](const v1::JobNode& n) {
                                     return n.node_name() == name && n.taken_by_spare();
                                   });
    if (jn == nullptr && !other_job && !taken && it != jobs_.end() && started != nullptr &&
        !started->uid().empty() && started->uid() == it->second.info.uid() &&
        JoinAsReplacement(it->second, *started, name)) {
      jn = JobNodeOf(it->second, name);
    }
    if (jn == nullptr || other_job || IsTerminal(it->second.info.state()) || jn->exit_code() >= 0) {
      // Not this node's job (any more): stop it there.
      if (other_job) foreign.insert(id);
      Action action{name, {}};
      action.message.mutable_cancel()->set_job_id(id);
      action.message.mutable_cancel()->set_grace_s(options_.default_grace_s);
      out->push_back(std::move(action));
      // Its dgt-run still runs (a job that ended meanwhile, or a part that was replaced): the
      // node is busy until it exits (the exited update frees it), not idle for the next job.
      if (!other_job && (jn == nullptr || jn->exit_code() < 0) && node.info.job_id().empty()) {
        node.info.set_job_id(id);
      }
      continue;
    }
    Job& job = *MutableJob(id);
    job.gone.erase(name);
    job.lost.erase(name);
    job.to_replace.erase(name);
    node.info.set_job_id(id);
  }
  // Jobs that had this node and that it no longer runs: it is gone from them.
  for (auto& [id, job] : jobs_) {
    if (running.contains(id) && !foreign.contains(id)) continue;
    v1::JobNode* jn = JobNodeOf(job, name);
    if (jn == nullptr || jn->exit_code() >= 0 || job.info.finished_unix_s() > 0) continue;
    changes_.jobs.insert(id);
    job.gone.insert(name);
    if (job.to_replace.contains(name)) continue;  // Lost already: waits for an idle node.
    const bool was_lost = job.lost.erase(name) > 0;
    if (StartingOrRunning(job.info.state())) {
      LoseNode(job, name,
               absl::StrCat("its daemon was lost mid-job (",
                            was_lost ? "it registered again without the job"
                                     : "it registered again without the job after a service "
                                       "restart",
                            ")"),
               now, out);
      continue;
    }
    if (job.first_failure.empty()) {
      job.first_failure = absl::StrCat("node ", name,
                                       ": its daemon registered again without the job (dgt-run "
                                       "ended unreported)");
    }
    MaybeFinish(job, now);
  }
  SetNodeState(node);
  Place(now, out);
  return absl::OkStatus();
}

void Scheduler::Deregister(const std::string& name, absl::Time now, std::vector<Action>* out) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  const std::string job_id = it->second.info.job_id();
  nodes_.erase(it);
  changes_.nodes.erase(name);
  changes_.removed_nodes.insert(name);
  if (!job_id.empty()) {
    if (Job* job = MutableJob(job_id); job != nullptr) {
      v1::JobNode* jn = JobNodeOf(*job, name);
      if (jn != nullptr && jn->exit_code() < 0) {
        job->gone.insert(name);
        if (StartingOrRunning(job->info.state())) job->lost[name] = now;
      }
      // A cancelled job waits for no node that is gone.
      if (job->info.state() == v1::JOB_STATE_CANCELLED) MaybeFinish(*job, now);
    }
  }
  Place(now, out);
}

void Scheduler::Drain(const std::string& name, absl::Time now, std::vector<Action>* out) {
  Node* node = MutableNode(name);
  if (node == nullptr) return;
  node->draining = true;
  SetNodeState(*node);
  Place(now, out);
}

void Scheduler::SetHealth(const std::string& name, bool unhealthy, const std::string& reason,
                          absl::Time now, std::vector<Action>* out) {
  auto it = nodes_.find(name);
  const std::string kept = unhealthy ? reason : "";
  if (it == nodes_.end() ||
      (it->second.info.unhealthy() == unhealthy && it->second.info.health_reason() == kept)) {
    return;
  }
  Node& node = *MutableNode(name);
  node.info.set_unhealthy(unhealthy);
  node.info.set_health_reason(kept);
  Place(now, out);
}

void Scheduler::FreeNode(const std::string& name, const std::string& job_id) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.info.job_id() != job_id) return;
  Node& node = *MutableNode(name);
  node.info.clear_job_id();
  SetNodeState(node);
}

absl::Status Scheduler::OnUpdate(const std::string& node, const v1::JobUpdate& update,
                                 absl::Time now, std::vector<Action>* out) {
  auto it = jobs_.find(update.job_id());
  v1::JobNode* jn = it == jobs_.end() ? nullptr : JobNodeOf(it->second, node);
  if (jn == nullptr) {
    // The exit of a job this node was told to stop when it registered again (not its part any
    // more): it frees the node.
    auto n = nodes_.find(node);
    if (update.event() == v1::JOB_EVENT_EXITED && n != nodes_.end() &&
        n->second.info.job_id() == update.job_id()) {
      FreeNode(node, update.job_id());
      Place(now, out);
      return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat("update for job '", update.job_id(), "' from node '",
                                            node, "', which does not run it"));
  }
  if (update.event() != v1::JOB_EVENT_STARTED && update.event() != v1::JOB_EVENT_EXITED) {
    return absl::InvalidArgumentError(
        absl::StrCat("JobUpdate.event: must be started or exited, got ",
                     JobEventName(update.event()), " (", static_cast<int>(update.event()), ")"));
  }
  Job& job = *MutableJob(update.job_id());
  if (update.event() == v1::JOB_EVENT_STARTED) {
    job.started.insert(node);
    if (job.info.state() == v1::JOB_STATE_STARTING &&
        static_cast<int>(job.started.size()) == job.info.nodes_size()) {
      job.info.set_state(v1::JOB_STATE_RUNNING);
    }
    return absl::OkStatus();
  }
  jn = JobNodeOf(job, node);
  jn->set_exit_code(update.exit_code());
  job.gone.erase(node);
  job.lost.erase(node);
  FreeNode(node, job.info.job_id());
  const std::string failure = absl::StrCat("dgt-run exited with code ", update.exit_code(),
                                           update.message().empty() ? "" : ": ", update.message());
  const bool left_an_open_run = update.exit_code() != 0 &&
                                job.info.state() == v1::JOB_STATE_RUNNING && !job.run_closed &&
                                job.info.finished_unix_s() == 0;
  auto n = nodes_.find(node);
  const bool drained = n != nodes_.end() && n->second.draining;
  if (left_an_open_run &&
      (job.info.restarts() + job.info.node_replacements() < job.info.spec().max_restarts() ||
       SpareLeft(job.info))) {
    // Its dgt-run left a run that goes on (the node drained, or dgt-run was killed or lost the
    // service): nothing starts that part again there, and the others' dgt-run would wait out
    // their join timeout for it. It is lost as a lost daemon's part is: a spare takes it, or it
    // is replaced.
    LoseNode(job, node,
             drained ? absl::StrCat("it drained: ", failure)
                     : absl::StrCat("its dgt-run left the run, which goes on (", failure, ")"),
             now, out);
  } else if (update.exit_code() != 0 && job.first_failure.empty()) {
    job.first_failure = absl::StrCat("node ", node, ": ",
                                     left_an_open_run && drained ? "it drained: " : "", failure);
    // A node that failed before every node started: the run can never form.
    if (job.info.state() == v1::JOB_STATE_STARTING && !job.started.contains(node)) {
      CancelNodes(job, options_.default_grace_s, out);
    } else if (job.info.state() == v1::JOB_STATE_RUNNING &&
               job.info.restarts() + job.info.node_replacements() >=
                   job.info.spec().max_restarts()) {
      // No restarts left (counted as LoseNode does): the others' dgt-run would only wait out
      // their join timeout for this node, holding their nodes and the queue. Fail it now.
      Finish(job, v1::JOB_STATE_FAILED,
             !job.run_failure.empty() ? job.run_failure : job.first_failure, now);
      CancelNodes(job, options_.default_grace_s, out);
    }
  }
  MaybeFinish(job, now);
  Place(now, out);
  return absl::OkStatus();
}

void Scheduler::CancelNodes(Job& job, double grace_s, std::vector<Action>* out) {
  for (const v1::JobNode& n : job.info.nodes()) {
    if (n.exit_code() >= 0 || n.taken_by_spare() || job.gone.contains(n.node_name())) continue;
    auto it = nodes_.find(n.node_name());
    if (it == nodes_.end() || it->second.info.job_id() != job.info.job_id()) continue;
    Action action{n.node_name(), {}};
    action.message.mutable_cancel()->set_job_id(job.info.job_id());
    action.message.mutable_cancel()->set_grace_s(grace_s);
    out->push_back(std::move(action));
  }
}

void Scheduler::MaybeFinish(Job& job, absl::Time now) {
  if (job.info.finished_unix_s() > 0 || job.info.state() == v1::JOB_STATE_QUEUED) return;
  bool all_ok = true;
  std::string lost;
  for (const v1::JobNode& n : job.info.nodes()) {
    if (n.taken_by_spare()) continue;  // Lost; a spare ran its part.
    const bool gone = job.gone.contains(n.node_name());
    // Still running there, or its daemon may still come back within lost_node_grace with the
    // job's exit.
    if (n.exit_code() < 0 && (!gone || job.lost.contains(n.node_name()))) return;
    if (gone || n.exit_code() != 0) all_ok = false;
    if (gone && lost.empty()) lost = n.node_name();
  }
  if (job.first_failure.empty() && !lost.empty()) {
    job.first_failure =
        absl::StrCat("node ", lost, ": its daemon was lost before it reported the job's end");
  }
  if (job.info.state() == v1::JOB_STATE_CANCELLED) {
    job.info.set_finished_unix_s(UnixSeconds(now));
    job.final_poll = true;
    return;
  }
  if (all_ok) {
    Finish(job, v1::JOB_STATE_SUCCEEDED, "", now);
  } else {
    Finish(job, v1::JOB_STATE_FAILED,
           !job.run_failure.empty() ? job.run_failure : job.first_failure, now);
  }
}

void Scheduler::Finish(Job& job, v1::JobState state, const std::string& reason, absl::Time now) {
  changes_.jobs.insert(job.info.job_id());
  job.info.set_state(state);
  job.info.set_reason(reason);
  job.info.set_finished_unix_s(UnixSeconds(now));
  job.final_poll = true;
  job.lost.clear();
  job.to_replace.clear();
}

void Scheduler::Tick(absl::Time now, std::vector<Action>* out) {
  for (const std::string& id : order_) {
    Job& job = jobs_.at(id);
    if (job.lost.empty()) continue;
    std::vector<std::string> expired;
    for (const auto& [name, since] : job.lost) {
      if (now - since >= options_.lost_node_grace) expired.push_back(name);
    }
    for (const std::string& name : expired) {
      job.lost.erase(name);
      changes_.jobs.insert(id);
      if (job.info.finished_unix_s() > 0) continue;
      if (job.run_closed) {
        // The run has its outcome: no replacement can join it. The node stays gone.
        MaybeFinish(job, now);
        continue;
      }
      LoseNode(job, name,
               absl::StrCat("its daemon was lost mid-job (no re-registration within ",
                            absl::ToDoubleSeconds(options_.lost_node_grace), " s)"),
               now, out);
    }
  }
  Place(now, out);
}

absl::Time Scheduler::NextTick() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, job] : jobs_) {
    for (const auto& [name, since] : job.lost)
      next = std::min(next, since + options_.lost_node_grace);
  }
  return next;
}

void Scheduler::LoseNode(Job& job, const std::string& node, const std::string& what, absl::Time now,
                         std::vector<Action>* out) {
  changes_.jobs.insert(job.info.job_id());
  if (IsTerminal(job.info.state())) {
    // The job ended already (cancelled, its other nodes still stopping): the lost node's part is
    // not replaced, it is gone.
    job.gone.insert(node);
    MaybeFinish(job, now);
    return;
  }
  const int32_t max_restarts = job.info.spec().max_restarts();
  // The rendezvous re-forms a run's round with a replacement without counting a restart: both add.
  const int32_t used = job.info.restarts() + job.info.node_replacements();
  const std::string lost = absl::StrCat("node ", node, ": ", what);
  if (v1::JobNode* jn = JobNodeOf(job, node); jn != nullptr && SpareLeft(job.info)) {
    // The rendezvous gives the lost node's node rank and ranks to a spare waiting in the run:
    // nothing is started, and no restart is counted.
    const int32_t spares = job.info.spec().spare_instances();
    job.info.set_spares_used(job.info.spares_used() + 1);
    // A node without ranks in the run's round waited as a spare (or the round was not known
    // yet): no spare takes anything, the job has one spare fewer.
    const bool waited = jn->node_rank() < 0;
    jn->set_taken_by_spare(true);
    jn->set_lost_without_ranks(waited);
    jn->set_node_rank(-1);
    jn->set_first_rank(-1);
    job.gone.insert(node);
    job.to_replace.erase(node);
    job.info.set_reason(
        absl::StrCat(lost,
                     waited ? "; it held no ranks: the job goes on with one spare fewer (spare "
                            : "; a spare takes its place (spare ",
                     job.info.spares_used(), " of ", spares, " used)"));
    MaybeFinish(job, now);
    return;
  }
  if (used >= max_restarts) {
    Finish(job, v1::JOB_STATE_FAILED, absl::StrCat(lost, "; max_restarts ", max_restarts), now);
    CancelNodes(job, options_.default_grace_s, out);
    return;
  }
  job.info.set_node_replacements(job.info.node_replacements() + 1);
  job.info.set_reason(
      absl::StrCat(lost, "; replacing it (restart ", used + 1, " of ", max_restarts, ")"));
  if (!Replace(job, node, out)) job.to_replace.insert(node);
}

bool Scheduler::Replace(Job& job, const std::string& lost, std::vector<Action>* out) {
  auto usable = [&](const Node& n) { return Usable(job.info.spec(), n); };
  std::string chosen;
  if (auto it = nodes_.find(lost); it != nodes_.end() && usable(it->second)) {
    chosen = lost;
  } else {
    for (const auto& [name, n] : nodes_) {
      if (usable(n) && JobNodeOf(job, name) == nullptr) {
        chosen = name;
        break;
      }
    }
  }
  if (chosen.empty()) return false;
  changes_.jobs.insert(job.info.job_id());
  v1::JobNode* jn = JobNodeOf(job, lost);
  jn->set_node_name(chosen);
  jn->set_node_rank(-1);
  jn->set_first_rank(-1);
  jn->set_exit_code(-1);
  // The chosen node may have lost an earlier part of this job to a spare: that part stays
  // history, and the node is no longer gone from the job.
  for (const std::string& name : {lost, chosen}) {
    job.gone.erase(name);
    job.lost.erase(name);
    job.started.erase(name);
  }
  Node& node = *MutableNode(chosen);
  node.info.set_job_id(job.info.job_id());
  SetNodeState(node);
  out->push_back(StartAction(job, chosen));
  return true;
}

void Scheduler::OnRunStatus(const rendezvous::RunStatus& run, absl::Time now) {
  auto it = jobs_.find(run.run_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  const v1::JobState state = job.info.state();
  const bool active = StartingOrRunning(state);
  if (!active && !job.final_poll) return;
  job.final_poll = false;
  v1::JobInfo before = job.info;
  const int32_t per_node = job.info.spec().distribution().process_count_per_instance();
  if (run.restart_count > job.info.restarts()) job.info.set_restarts(run.restart_count);
  for (const rendezvous::NodeStatus& ns : run.nodes) {
    v1::JobNode* jn = JobNodeOf(job, ns.node_id);
    // A node without a rank now (waiting, or the run closed) keeps the one it had.
    if (jn == nullptr || ns.node_rank < 0) continue;
    jn->set_node_rank(ns.node_rank);
    jn->set_first_rank(ns.node_rank * per_node);
  }
  if (state == v1::JOB_STATE_STARTING && run.round >= 0) job.info.set_state(v1::JOB_STATE_RUNNING);
  absl::string_view outcome = run.outcome;
  if (active && !run.outcome.empty()) job.run_closed = true;
  if (active && absl::ConsumePrefix(&outcome, "failed: ")) job.run_failure = std::string(outcome);
  if (job.info.SerializeAsString() != before.SerializeAsString()) {
    changes_.jobs.insert(job.info.job_id());
  }
  (void)now;
}

absl::StatusOr<v1::JobInfo> Scheduler::Cancel(const std::string& job_id, double grace_s,
                                              absl::Time now, std::vector<Action>* out) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  Job& job = it->second;
  if (IsTerminal(job.info.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id, "' already finished: ", JobStateName(job.info.state())));
  }
  changes_.jobs.insert(job_id);
  const bool queued = job.info.state() == v1::JOB_STATE_QUEUED;
  job.info.set_state(v1::JOB_STATE_CANCELLED);
  job.info.set_reason(queued ? "cancelled before it started" : "cancelled");
  if (queued) {
    job.info.set_finished_unix_s(UnixSeconds(now));
  } else {
    CancelNodes(job, grace_s > 0 ? grace_s : options_.default_grace_s, out);
    MaybeFinish(job, now);
  }
  Place(now, out);
  return job.info;
}

absl::StatusOr<Scheduler::LogTarget> Scheduler::LogTargetFor(const std::string& job_id,
                                                             int32_t rank) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  const int32_t per_node = it->second.info.spec().distribution().process_count_per_instance();
  // A lost node keeps its last rank through its grace while a spare may run it already: the
  // node that is not gone from the job wins.
  std::optional<LogTarget> found;
  for (const v1::JobNode& n : it->second.info.nodes()) {
    if (n.first_rank() >= 0 && rank >= n.first_rank() && rank < n.first_rank() + per_node) {
      found = LogTarget{n.node_name(), rank - n.first_rank()};
      if (!it->second.gone.contains(n.node_name())) return *found;
    }
  }
  if (found) return *found;
  const v1::JobInfo& info = it->second.info;
  // A job cancelled while queued was never placed: it has no nodes, hence no ranks or logs.
  if (info.state() == v1::JOB_STATE_QUEUED || info.nodes_size() == 0) {
    return absl::NotFoundError(absl::StrCat(
        "job '", job_id, "' has no rank ", rank,
        info.state() == v1::JOB_STATE_QUEUED ? " (it has not started)" : " (it never started)"));
  }
  const int32_t ranks = info.spec().instance_count() * per_node;
  if (rank >= ranks) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' has no rank ", rank, " (ranks: 0 to ", ranks - 1, ")"));
  }
  if (IsTerminal(info.state()) && !it->second.final_poll) {
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' rank ", rank,
                                            " was never given to a node: its run formed no round "
                                            "with it"));
  }
  return absl::NotFoundError(absl::StrCat("job '", job_id, "' rank ", rank,
                                          " is not known yet: its run has not formed (ranks 0 to ",
                                          ranks - 1, " once it has)"));
}

const v1::JobInfo* Scheduler::FindJob(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second.info;
}

std::vector<v1::JobInfo> Scheduler::Jobs() const {
  std::vector<v1::JobInfo> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) out.push_back(jobs_.at(id).info);
  return out;
}

std::vector<v1::NodeInfo> Scheduler::Nodes() const {
  std::vector<v1::NodeInfo> out;
  for (const auto& [name, node] : nodes_) out.push_back(node.info);
  return out;
}

std::vector<std::string> Scheduler::ActiveJobIds() const {
  std::vector<std::string> out;
  for (const std::string& id : order_) {
    const Job& job = jobs_.at(id);
    if (StartingOrRunning(job.info.state()) || job.final_poll) out.push_back(id);
  }
  return out;
}

Scheduler::Changes Scheduler::TakeChanges() { return std::exchange(changes_, {}); }

}  // namespace dgt::jobs
