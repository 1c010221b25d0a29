#include "rendezvous/round_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dgt::rendezvous {
namespace {

constexpr absl::StatusCode kInvalidArgument = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kAlreadyExists = absl::StatusCode::kAlreadyExists;
constexpr absl::StatusCode kResourceExhausted = absl::StatusCode::kResourceExhausted;
constexpr absl::StatusCode kFailedPrecondition = absl::StatusCode::kFailedPrecondition;
constexpr absl::StatusCode kAborted = absl::StatusCode::kAborted;

std::string NnodesText(int32_t min_nodes, int32_t max_nodes) {
  return min_nodes == max_nodes ? absl::StrCat(min_nodes) : absl::StrCat(min_nodes, ":", max_nodes);
}

const char* StateName(RunState s) { return RunStateName(s); }

// A join's timeout: the service default when the join leaves it at zero.
absl::Duration OrDefault(absl::Duration requested, absl::Duration fallback) {
  return requested > absl::ZeroDuration() ? requested : fallback;
}

}  // namespace

RoundStateMachine::RoundStateMachine(RoundStateOptions options)
    : options_(std::move(options)),
      owned_backend_(options_.backend == nullptr ? std::make_unique<InMemoryRunStateBackend>()
                                                 : nullptr),
      backend_(options_.backend == nullptr ? owned_backend_.get() : options_.backend) {}

std::map<std::string, int> RoundStateMachine::RunsByState() const {
  std::map<std::string, int> out = {{"gathering", 0}, {"running", 0}, {"closed", 0}};
  backend_->ForEach([&](const RunRecord& run) { ++out[StateName(run.state)]; });
  return out;
}

Outgoing RoundStateMachine::ErrorFor(SessionId session, absl::StatusCode code,
                                     absl::string_view message) {
  return Outgoing{session, Refusal{absl::Status(code, message)}, /*close=*/true};
}

RunRecord* RoundStateMachine::Touch(const std::string& run_id) {
  RunRecord* run = backend_->Mutable(run_id);
  if (run != nullptr && std::find(touched_.begin(), touched_.end(), run_id) == touched_.end()) {
    touched_.push_back(run_id);
  }
  return run;
}

RunRecord& RoundStateMachine::CreateRun(const std::string& run_id) {
  absl::StatusOr<RunRecord*> run = backend_->Create(run_id);
  // The callers create only a run they found absent, under the caller's serialisation.
  if (!run.ok()) return *Touch(run_id);
  touched_.push_back(run_id);
  return **run;
}

void RoundStateMachine::DeleteRun(const std::string& run_id) {
  absl::Status deleted = backend_->Delete(run_id);
  if (!deleted.ok() && !absl::IsNotFound(deleted) && commit_failure_.ok()) {
    commit_failure_ = deleted;
  }
  touched_.erase(std::remove(touched_.begin(), touched_.end(), run_id), touched_.end());
}

void RoundStateMachine::CommitTouched() {
  // In memory a commit cannot fail. A commit that fails (etcd unreachable, another writer first,
  // fenced) ends the event: the rest is not written either, and the caller sends nothing.
  for (const std::string& run_id : touched_) {
    if (!commit_failure_.ok()) break;
    absl::StatusOr<Revision> written = backend_->Commit(run_id);
    if (!written.ok()) commit_failure_ = written.status();
  }
  touched_.clear();
  if (!commit_failure_.ok()) backend_->DiscardStages();
}

std::vector<Outgoing> RoundStateMachine::Committed(std::vector<Outgoing> out) {
  // In a batch the runs stay staged (the next event of the batch reads and changes the same
  // stage); EndBatch commits them, and the caller holds `out` until it did.
  if (in_batch_) return out;
  const bool failed_before = !commit_failure_.ok();
  CommitTouched();
  if (commit_failure_.ok()) return out;
  if (!failed_before) ++counters_.failed_commits;
  return {};
}

void RoundStateMachine::BeginBatch() {
  in_batch_ = true;
  batch_failed_before_ = !commit_failure_.ok();
}

absl::Status RoundStateMachine::EndBatch() {
  in_batch_ = false;
  CommitTouched();
  // An event of the batch may have failed already (a delete): the batch counts once.
  if (!commit_failure_.ok() && !batch_failed_before_) ++counters_.failed_commits;
  return commit_failure_;
}

void RoundStateMachine::ForgetSessions() { sessions_.clear(); }

absl::Status RoundStateMachine::AdoptRuns(absl::Time now) {
  touched_.clear();
  backend_->DiscardStages();
  sessions_.clear();
  commit_failure_ = absl::OkStatus();
  if (absl::Status reloaded = backend_->Reload(); !reloaded.ok()) {
    commit_failure_ = reloaded;
    return reloaded;
  }
  std::vector<std::string> ids;
  backend_->ForEach([&](const RunRecord& run) { ids.push_back(run.run_id); });
  for (const std::string& run_id : ids) {
    RunRecord* found = Touch(run_id);
    if (found == nullptr) continue;
    RunRecord& run = *found;
    for (auto& [id, node] : run.nodes) node.session = 0;
    run.connected = 0;
    // A round held for node rank 0's next store was made of sessions that are gone: the nodes
    // re-attach (or rejoin, and report their failures again) and the round is decided again.
    run.pending_reason.reset();
    run.pending_restart_increment = 0;
    if (run.state == RunState::kRunning) {
      // The members rejoin with their assignment (RejoinImpl), as after a restart of the
      // service; until all did (or the window passed) the run decides nothing.
      if (!run.recovering) run.expected_members = run.members;
      run.recovering = true;
      run.rank_rejoined.assign(run.expected_members, false);
      run.rejoin_deadline = now + options_.rejoin_timeout;
      for (auto it = run.nodes.begin(); it != run.nodes.end();) {
        auto next = std::next(it);
        if (it->second.node_rank >= 0) EraseNode(run, it);
        it = next;
      }
    }
  }
  CommitTouched();
  return commit_failure_;
}

NodeRecord* RoundStateMachine::NodeOf(SessionId session, RunRecord** run) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return nullptr;
  RunRecord* r = Touch(s->second.run_id);
  if (r == nullptr) return nullptr;
  auto n = r->nodes.find(s->second.node_id);
  if (n == r->nodes.end() || n->second.session != session) return nullptr;
  *run = r;
  return &n->second;
}

int32_t RoundStateMachine::ConnectedCount(const RunRecord& run) const { return run.connected; }

int32_t RoundStateMachine::MemberCount(const RunRecord& run) const { return run.members; }

void RoundStateMachine::EraseNode(RunRecord& run, std::map<std::string, NodeRecord>::iterator it) {
  const NodeRecord& n = it->second;
  run.connected -= n.session != 0 ? 1 : 0;
  run.members -= n.node_rank >= 0 ? 1 : 0;
  run.succeeded -= n.node_rank >= 0 && n.succeeded ? 1 : 0;
  run.nodes.erase(it);
}

void RoundStateMachine::DetachSession(RunRecord& run, NodeRecord& node) {
  if (node.session == 0) return;
  node.session = 0;
  --run.connected;
}

std::vector<Outgoing> RoundStateMachine::OnJoin(SessionId session, const JoinRequest& join,
                                                absl::Time now) {
  if (!commit_failure_.ok()) return {};
  std::vector<Outgoing> out = Committed(JoinImpl(session, join, now));
  ++counters_.joins;
  if (!sessions_.contains(session)) ++counters_.refused_joins;
  return out;
}

std::vector<Outgoing> RoundStateMachine::JoinImpl(SessionId session, const JoinRequest& join,
                                                  absl::Time now) {
  std::vector<Outgoing> out;
  auto invalid = [&](absl::string_view message) {
    out.push_back(ErrorFor(session, kInvalidArgument, message));
    return out;
  };
  if (sessions_.contains(session)) {
    return invalid("this session already joined a run; open a new session per run");
  }
  if (join.run_id.empty()) return invalid("run_id must not be empty");
  if (join.node_id.empty()) return invalid("node_id must not be empty");
  for (const std::string* field : {&join.run_id, &join.node_id, &join.address}) {
    if (field->size() > options_.max_id_bytes) {
      return invalid(absl::StrCat("run_id, node_id and address must be at most ",
                                  options_.max_id_bytes, " bytes, got ", field->size()));
    }
  }
  if (join.min_nodes < 1 || join.max_nodes < join.min_nodes) {
    return invalid(absl::StrCat("--nnodes must be MIN:MAX with 0 < MIN <= MAX, got ",
                                join.min_nodes, ":", join.max_nodes));
  }
  if (join.max_nodes > options_.max_nodes_per_run) {
    return invalid(absl::StrCat("--nnodes MAX must be at most ", options_.max_nodes_per_run,
                                ", got ", join.max_nodes));
  }
  if (join.nproc_per_node < 1) {
    return invalid(absl::StrCat("--nproc-per-node must be >= 1, got ", join.nproc_per_node));
  }
  if (join.address.empty()) return invalid("address must not be empty");
  if (join.store_port < 1 || join.store_port > 65535) {
    return invalid(absl::StrCat("store_port must be 1..65535, got ", join.store_port));
  }
  if (join.last_call_timeout < absl::ZeroDuration() || join.join_timeout < absl::ZeroDuration()) {
    return invalid("last_call_timeout and join_timeout must be >= 0 s");
  }
  if (join.max_restarts < 0) {
    return invalid(absl::StrCat("--max-restarts must be >= 0, got ", join.max_restarts));
  }
  if (join.spare_nodes < 0 || join.spare_nodes > options_.max_waiting_nodes_per_run) {
    return invalid(absl::StrCat("--spare-nodes must be 0..", options_.max_waiting_nodes_per_run,
                                ", got ", join.spare_nodes));
  }

  if (join.rejoin.has_value()) return RejoinImpl(session, join, now);
  // Nodes beyond MAX wait in the record too (spares): a round start rewrites them all.
  if (absl::Status fits = backend_->CheckRunFits(int64_t{join.max_nodes} + join.spare_nodes,
                                                 join.node_id, join.address);
      !fits.ok()) {
    return invalid(fits.message());
  }
  if (const RunRecord* closed = backend_->Find(join.run_id);
      closed != nullptr && closed->state == RunState::kClosed && closed->connected == 0) {
    // Every agent of the finished run has left: the id is free for a new run (two jobs in a row
    // with torchrun's default id "none", or a job's fixed id, on a long-lived service).
    DeleteRun(join.run_id);
  }
  RunRecord* found = Touch(join.run_id);
  const bool created = found == nullptr;
  RunRecord& run = created ? CreateRun(join.run_id) : *found;
  if (created) {
    run.run_id = join.run_id;
    run.min_nodes = join.min_nodes;
    run.max_nodes = join.max_nodes;
    run.nproc_per_node = join.nproc_per_node;
    run.max_restarts = join.max_restarts;
    run.spare_nodes = join.spare_nodes;
    run.in_place_spares = join.in_place_spares;
    run.last_call_timeout = OrDefault(join.last_call_timeout, options_.default_last_call_timeout);
    run.join_timeout = OrDefault(join.join_timeout, options_.default_join_timeout);
  } else {
    if (run.state == RunState::kClosed) {
      // Agents of the finished run are still connected (they are being told its outcome): a
      // join now is a late joiner of that run, not a new job.
      out.push_back(ErrorFor(
          session, kFailedPrecondition,
          absl::StrCat("run '", run.run_id, "' is closed (", run.outcome, "); use a new run id")));
      return out;
    }
    if (std::string why = Mismatch(run, join); !why.empty()) return invalid(why);
  }

  auto existing = run.nodes.find(join.node_id);
  if (existing == run.nodes.end() &&
      // int64: MAX plus a large waiting allowance must not wrap around.
      int64_t{run.connected} >=
          int64_t{run.max_nodes} + int64_t{options_.max_waiting_nodes_per_run}) {
    out.push_back(ErrorFor(session, kResourceExhausted,
                           absl::StrCat("run '", run.run_id, "' already holds ", run.connected,
                                        run.connected == 1 ? " node (MAX " : " nodes (MAX ",
                                        run.max_nodes, " and ", options_.max_waiting_nodes_per_run,
                                        " waiting); try again when a node leaves")));
    return out;
  }
  if (existing != run.nodes.end()) {
    const NodeRecord& old = existing->second;
    if (old.session != 0) {
      // Never replace a connected agent: both would run the same ranks. An agent that died has
      // no session any more (its stream ends with the process, or by keepalive within 3 s), so
      // a restarted agent with the same node id gets in once the old one is gone.
      out.push_back(ErrorFor(
          session, kAlreadyExists,
          absl::StrCat("node id '", join.node_id, "' is already in run '", run.run_id, "' from ",
                       old.address,
                       " (its agent is connected); a second agent with the same --node-id is "
                       "refused")));
      return out;
    }
    // A node that finished its part and left, now back: it joins again as a new node.
    EraseNode(run, existing);
  }

  NodeRecord node;
  node.node_id = join.node_id;
  node.session = session;
  node.address = join.address;
  node.nproc = join.nproc_per_node;
  node.store_port = join.store_port;
  node.last_contact = now;
  run.nodes.emplace(node.node_id, node);
  ++run.connected;
  sessions_[session] = SessionRef{run.run_id, node.node_id};

  Evaluate(run, now, out, session);
  return out;
}

std::string RoundStateMachine::Mismatch(const RunRecord& run, const JoinRequest& join) {
  if (run.min_nodes == join.min_nodes && run.max_nodes == join.max_nodes &&
      run.nproc_per_node == join.nproc_per_node) {
    if (run.spare_nodes != join.spare_nodes) {
      // Which waiting nodes are spares follows from the run's count: another count would be
      // silently ignored.
      return absl::StrCat("run '", run.run_id, "' uses --spare-nodes=", run.spare_nodes,
                          "; this node asked for --spare-nodes=", join.spare_nodes);
    }
    if (run.in_place_spares == join.in_place_spares) return "";
    // A spare's in-place round keeps the survivors' workers: every node must do its part.
    auto how = [](bool in_place) {
      return in_place ? "keeps its workers when a spare takes a lost node's place "
                        "(--restart-policy=rank, replace mode)"
                      : "restarts its workers in every new round (--restart-policy=group, or "
                        "--recovery-mode=shrink)";
    };
    return absl::StrCat("run '", run.run_id, "' ", how(run.in_place_spares), "; this node ",
                        how(join.in_place_spares));
  }
  return absl::StrCat("run '", run.run_id,
                      "' uses --nnodes=", NnodesText(run.min_nodes, run.max_nodes),
                      " --nproc-per-node=", run.nproc_per_node,
                      "; this node asked for --nnodes=", NnodesText(join.min_nodes, join.max_nodes),
                      " --nproc-per-node=", join.nproc_per_node);
}

std::vector<Outgoing> RoundStateMachine::RejoinImpl(SessionId session, const JoinRequest& join,
                                                    absl::Time now) {
  std::vector<Outgoing> out;
  const Assignment& a = *join.rejoin;
  const std::string& node_id = join.node_id;
  auto refuse = [&](absl::StatusCode code, absl::string_view message) {
    out.push_back(ErrorFor(session, code, message));
    return out;
  };
  if (a.run_id != join.run_id || a.round < 0 || a.node_count < 1 || a.node_count > join.max_nodes ||
      a.node_rank < 0 || a.node_rank >= a.node_count || a.world_size < 1 || a.master_addr.empty() ||
      a.master_port < 1 || a.master_port > 65535 || a.restart_count < 0 ||
      // Every node of a run has the run's nproc, so the layout follows from the node count.
      int64_t{a.world_size} != int64_t{a.node_count} * join.nproc_per_node ||
      int64_t{a.first_global_rank} != int64_t{a.node_rank} * join.nproc_per_node) {
    return refuse(kInvalidArgument,
                  absl::StrCat("the rejoin of node '", node_id,
                               "' carries an invalid assignment (run '", a.run_id, "', round ",
                               a.round, ", node rank ", a.node_rank, " of ", a.node_count, ")"));
  }
  RunRecord* it = Touch(join.run_id);
  const bool unknown = it == nullptr;
  if (unknown || (it->state == RunState::kGathering && it->round < 0 && it->members == 0)) {
    // This service does not know the run's round (it was restarted while the run ran): the
    // rejoins re-create it. Nodes that joined afresh in the meantime stay waiting.
    if (unknown) {
      it = &CreateRun(join.run_id);
      RunRecord& fresh = *it;
      fresh.run_id = join.run_id;
      fresh.min_nodes = join.min_nodes;
      fresh.max_nodes = join.max_nodes;
      fresh.nproc_per_node = join.nproc_per_node;
      fresh.max_restarts = join.max_restarts;
      fresh.spare_nodes = join.spare_nodes;
      fresh.in_place_spares = join.in_place_spares;
      fresh.last_call_timeout =
          OrDefault(join.last_call_timeout, options_.default_last_call_timeout);
      fresh.join_timeout = OrDefault(join.join_timeout, options_.default_join_timeout);
    } else if (std::string why = Mismatch(*it, join); !why.empty()) {
      return refuse(kInvalidArgument, why);
    }
    RunRecord& run = *it;
    run.state = RunState::kRunning;
    run.round = a.round;
    run.restart_count = a.restart_count;
    run.world_size = a.world_size;
    run.master_addr = a.master_addr;
    run.master_port = a.master_port;
    run.recovering = true;
    run.expected_members = a.node_count;
    run.rank_rejoined.assign(a.node_count, false);
    run.rejoin_deadline = now + options_.rejoin_timeout;
    run.last_call_deadline.reset();
    run.join_deadline.reset();
  }
  RunRecord& run = *it;
  if (run.state == RunState::kClosed) {
    if (a.round == run.round) {
      // The run ended while this node's session was broken: tell it the outcome now.
      out.push_back(Outgoing{session, run.finished, /*close=*/true});
      return out;
    }
    return refuse(kFailedPrecondition, absl::StrCat("run '", run.run_id, "' is closed (",
                                                    run.outcome, "); use a new run id"));
  }
  if (std::string why = Mismatch(run, join); !why.empty()) {
    return refuse(kInvalidArgument, why);
  }
  const bool same_round = run.state == RunState::kRunning && a.round == run.round &&
                          a.restart_count == run.restart_count && a.world_size == run.world_size &&
                          a.master_addr == run.master_addr && a.master_port == run.master_port &&
                          (!run.recovering || a.node_count == run.expected_members);
  if (!same_round && run.state == RunState::kGathering && !run.recovering &&
      !run.nodes.contains(node_id)) {
    // The run lost members while this node was away (its round went on without it) and now
    // waits for nodes: the node joins it as a new node, as a fresh agent would.
    JoinRequest fresh = join;
    fresh.rejoin.reset();
    return JoinImpl(session, fresh, now);
  }
  if (!same_round) {
    return refuse(kAborted,
                  absl::StrCat("node '", node_id, "' rejoins run '", run.run_id, "' at round ",
                               a.round, ", but the run is ", StateName(run.state), " at round ",
                               run.round, ": it went on without this node"));
  }
  auto existing = run.nodes.find(node_id);
  if (existing != run.nodes.end() && existing->second.node_rank < 0 && run.recovering) {
    // A fresh agent with this node id reached the restarted service before the member's rejoin
    // (a replacement started while the old agent was reconnecting). The member runs workers of
    // the round: it wins, and the newcomer is refused as a second agent with the same node id.
    if (existing->second.session != 0) {
      out.push_back(ErrorFor(
          existing->second.session, kAlreadyExists,
          absl::StrCat("node id '", node_id, "' is node rank ", a.node_rank, " of round ",
                       run.round, " of run '", run.run_id,
                       "', whose agent rejoined; a second agent with the same --node-id is "
                       "refused")));
      sessions_.erase(existing->second.session);
    }
    EraseNode(run, existing);
    existing = run.nodes.end();
  }
  if (existing != run.nodes.end() && existing->second.node_rank < 0) {
    return refuse(kAborted, absl::StrCat("node '", node_id, "' is not a member of round ",
                                         run.round, " of run '", run.run_id,
                                         "' (it waits to join as a new node): it went on without "
                                         "this node"));
  }
  if (existing != run.nodes.end()) {
    NodeRecord& n = existing->second;
    if (n.node_rank != a.node_rank) {
      return refuse(kAborted, absl::StrCat("node '", node_id, "' rejoins as node rank ",
                                           a.node_rank, ", but it has node rank ", n.node_rank,
                                           " in round ", run.round, " of run '", run.run_id, "'"));
    }
    // The same agent over a new stream: its old stream (if the service has not noticed its end
    // yet) is forgotten without a word; the agent dropped it itself.
    if (n.session != 0) {
      sessions_.erase(n.session);
    } else {
      ++run.connected;
    }
    n.session = session;
    n.address = join.address;
    n.store_port = join.store_port;
    n.last_contact = now;
  } else {
    if (!run.recovering) {
      return refuse(kAborted,
                    absl::StrCat("node '", node_id, "' is not a member of round ", run.round,
                                 " of run '", run.run_id, "': it went on without this node"));
    }
    if (run.rank_rejoined[a.node_rank]) {
      return refuse(kAborted,
                    absl::StrCat("node rank ", a.node_rank, " of round ", run.round, " of run '",
                                 run.run_id, "' already rejoined from another node id"));
    }
    run.rank_rejoined[a.node_rank] = true;
    NodeRecord node;
    node.node_id = node_id;
    node.session = session;
    node.address = join.address;
    node.nproc = join.nproc_per_node;
    node.store_port = join.store_port;
    node.node_rank = a.node_rank;
    node.last_contact = now;
    run.nodes.emplace(node_id, node);
    ++run.connected;
    ++run.members;
  }
  sessions_[session] = SessionRef{run.run_id, node_id};
  Assignment ack = a;
  ack.reason = "rejoined";
  ack.host_node_id = options_.host_node_id;
  out.push_back(Outgoing{session, std::move(ack)});
  if (run.recovering && run.members >= run.expected_members) {
    EndRecovery(run);
    // Reports that came while nodes were missing may complete the run now.
    if (run.deferred_restart && ConnectedCount(run) < run.min_nodes) {
      // Members that finished their part left: a restart round needs MIN connected nodes (as a
      // failure outside recovery). The failure ends the run.
      FinishRun(run, false,
                absl::StrCat(*run.deferred_restart, "; no restart: only ", ConnectedCount(run),
                             " of at least ", run.min_nodes, " nodes are connected"),
                nullptr, now, out);
    } else if (run.deferred_restart) {
      StartRound(run, absl::StrCat("restart after failure: ", *run.deferred_restart), 1, now, out);
    } else if (run.succeeded == run.members) {
      FinishRun(run, true, absl::StrCat("all ", run.members, " nodes succeeded"), nullptr, now,
                out);
    } else if (!run.failures.empty() && static_cast<int32_t>(run.failures.size()) >= run.members) {
      FinishWithEarliestFailure(run, now, out);
    }
  }
  return out;
}

void RoundStateMachine::EndRecovery(RunRecord& run) {
  run.recovering = false;
  run.expected_members = 0;
  run.rank_rejoined.clear();
  run.rejoin_deadline.reset();
}

void RoundStateMachine::SendProgress(const RunRecord& run, std::vector<Outgoing>& out,
                                     SessionId only) const {
  // While a round runs, a waiting node is a hot spare unless the waiting nodes beyond
  // --spare-nodes are about to grow the run (a scale-up after the last call; Evaluate's rule).
  const bool running = run.state == RunState::kRunning;
  const int32_t members = running ? MemberCount(run) : 0;
  const bool scale_up = running && !run.recovering && run.succeeded == 0 &&
                        members < run.max_nodes &&
                        ConnectedCount(run) - members - run.spare_nodes > 0;
  auto progress_to = [&](const NodeRecord& n) {
    if (n.session == 0 || (running && n.node_rank >= 0)) return;
    out.push_back(Outgoing{n.session, JoinProgress{ConnectedCount(run), run.min_nodes,
                                                   run.max_nodes, running && !scale_up}});
  };
  if (only != 0) {
    // One node: found through the session index, not a scan of the run.
    auto s = sessions_.find(only);
    if (s == sessions_.end() || s->second.run_id != run.run_id) return;
    auto n = run.nodes.find(s->second.node_id);
    if (n != run.nodes.end() && n->second.session == only) progress_to(n->second);
    return;
  }
  for (const auto& [id, n] : run.nodes) progress_to(n);
}

void RoundStateMachine::Evaluate(RunRecord& run, absl::Time now, std::vector<Outgoing>& out,
                                 SessionId joined) {
  if (run.pending_reason && TrySendPendingRound(run, now, out)) return;
  const int32_t connected = ConnectedCount(run);
  if (run.state == RunState::kGathering) {
    if (connected >= run.max_nodes) {
      StartRound(run, run.round < 0 ? "initial" : "nodes rejoined", 0, now, out);
      return;
    }
    if (connected >= run.min_nodes) {
      run.join_deadline.reset();
      if (!run.last_call_deadline) run.last_call_deadline = now + run.last_call_timeout;
    } else {
      run.last_call_deadline.reset();
    }
    // Only the node that just joined hears the count: a broadcast per join would make a round of
    // N nodes cost N^2 messages.
    if (joined != 0) SendProgress(run, out, joined);
    return;
  }
  if (run.state == RunState::kRunning) {
    if (run.recovering) {
      // Members are still rejoining: the round's size is not known yet.
      if (joined != 0) SendProgress(run, out, joined);
      return;
    }
    const int32_t members = MemberCount(run);
    // Up to spare_nodes waiting nodes are hot spares: they wait for a lost member's place
    // instead of growing the world.
    const int32_t growing = connected - members - run.spare_nodes;
    const bool any_succeeded = run.succeeded > 0;
    if (growing > 0 && members < run.max_nodes && !any_succeeded) {
      if (members + growing >= run.max_nodes) {
        StartRound(run, "scale-up", 0, now, out);
        return;
      }
      if (!run.scale_up_deadline) run.scale_up_deadline = now + run.last_call_timeout;
    } else {
      run.scale_up_deadline.reset();
    }
    if (joined != 0) SendProgress(run, out, joined);
  }
}

void RoundStateMachine::StartRound(RunRecord& run, const std::string& reason,
                                   int32_t restart_increment, absl::Time now,
                                   std::vector<Outgoing>& out, bool member_lost) {
  run.last_call_deadline.reset();
  run.scale_up_deadline.reset();
  run.join_deadline.reset();
  run.failure_deadline.reset();
  run.failures.clear();
  run.failure_messages.clear();
  EndRecovery(run);
  run.deferred_restart.reset();

  // Members of the new round: survivors of the last round first (by rank), then waiting nodes in
  // node-id order, up to MAX.
  std::vector<NodeRecord*> survivors, newcomers;
  for (auto& [id, n] : run.nodes) {
    if (n.session == 0) continue;
    (n.node_rank >= 0 ? survivors : newcomers).push_back(&n);
  }
  std::sort(survivors.begin(), survivors.end(),
            [](const NodeRecord* a, const NodeRecord* b) { return a->node_rank < b->node_rank; });
  std::vector<std::pair<NodeRecord*, int32_t>> ranks;  // node → new rank
  const int32_t k = static_cast<int32_t>(std::min<size_t>(survivors.size(), run.max_nodes));
  if (run.round < 0) {
    // First round: node-id order (std::map iteration order), deterministic.
    int32_t r = 0;
    for (NodeRecord* n : newcomers) {
      if (r >= run.max_nodes) break;
      ranks.emplace_back(n, r++);
    }
  } else {
    // Survivors keep their ranks. The places of the last round's lost members (gaps below its
    // node count) go first to waiting nodes, in node-id order: a spare takes a lost node's node
    // rank and its global ranks, so the rank layout does not change. Gaps left without a spare
    // close up (the highest-ranked nodes move into the lowest gaps). Then the world grows by the
    // waiting nodes beyond spare_nodes (at least up to MIN), up to MAX. The last round's node
    // count follows from its world size (all a run re-created from rejoins knows), at most MAX.
    const int32_t last_count =
        std::min(run.nproc_per_node > 0 ? std::max(run.world_size / run.nproc_per_node, k) : k,
                 std::max(run.max_nodes, k));
    std::vector<NodeRecord*> holder(std::max(last_count, k), nullptr);
    for (int32_t i = 0; i < k; ++i) {
      NodeRecord* n = survivors[i];
      if (n->node_rank >= static_cast<int32_t>(holder.size())) holder.resize(n->node_rank + 1);
      holder[n->node_rank] = n;
    }
    size_t next_new = 0;
    for (int32_t gap = 0; gap < last_count && next_new < newcomers.size(); ++gap) {
      if (holder[gap] == nullptr) holder[gap] = newcomers[next_new++];
    }
    const int32_t count = k + static_cast<int32_t>(next_new);
    std::vector<int32_t> gaps;
    std::vector<int32_t> movers;  // Ranks at or above `count`, highest first.
    for (int32_t r = 0; r < static_cast<int32_t>(holder.size()); ++r) {
      if (r < count && holder[r] == nullptr) gaps.push_back(r);
      if (r >= count && holder[r] != nullptr) movers.insert(movers.begin(), r);
    }
    for (size_t i = 0; i < movers.size() && i < gaps.size(); ++i) {
      holder[gaps[i]] = holder[movers[i]];
      holder[movers[i]] = nullptr;
    }
    for (int32_t r = 0; r < count; ++r) ranks.emplace_back(holder[r], r);
    const int32_t waiting = static_cast<int32_t>(newcomers.size() - next_new);
    const int32_t grow =
        std::min(std::max(waiting - run.spare_nodes, run.min_nodes - count), waiting);
    for (int32_t r = count; r < count + grow && r < run.max_nodes; ++r) {
      ranks.emplace_back(newcomers[next_new++], r);
    }
  }
  if (ranks.empty()) return;
  std::sort(ranks.begin(), ranks.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  NodeRecord* master = ranks.front().first;
  const bool in_place = member_lost && restart_increment == 0 &&
                        run.pending_restart_increment == 0 && !run.pending_reason &&
                        InPlaceFits(run, ranks);
  if (!in_place && master->store_port == 0) {
    // NodeRecord rank 0's agent is still opening its next store: hold the round until it is ready.
    run.pending_reason = reason;
    // One held round is one restart, however many failures asked for it.
    run.pending_restart_increment = std::max(run.pending_restart_increment, restart_increment);
    return;
  }
  run.pending_reason.reset();
  // A held restart and this round's are one round: one restart.
  restart_increment = std::max(restart_increment, run.pending_restart_increment);
  run.pending_restart_increment = 0;

  run.round += 1;
  run.restart_count += restart_increment;
  ++counters_.rounds;
  counters_.restarts += restart_increment;
  run.world_size = 0;
  for (auto& [id, n] : run.nodes) {
    n.node_rank = -1;
    n.succeeded = false;
    n.failed = false;
  }
  run.members = static_cast<int32_t>(ranks.size());
  run.succeeded = 0;
  int32_t first_rank = 0;
  std::vector<int32_t> first_ranks;
  for (auto& [n, r] : ranks) {
    n->node_rank = r;
    first_ranks.push_back(first_rank);
    first_rank += n->nproc;
  }
  run.world_size = first_rank;
  if (!in_place) {
    // An in-place round keeps the store that holds the recovery keys.
    run.master_addr = master->address;
    run.master_port = master->store_port;
    master->store_port = 0;  // Consumed: the next round needs the agent's next store.
  }
  run.state = RunState::kRunning;
  for (size_t i = 0; i < ranks.size(); ++i) {
    NodeRecord* n = ranks[i].first;
    Assignment a;
    a.run_id = run.run_id;
    a.round = run.round;
    a.node_rank = ranks[i].second;
    a.node_count = static_cast<int32_t>(ranks.size());
    a.world_size = run.world_size;
    a.first_global_rank = first_ranks[i];
    a.master_addr = run.master_addr;
    a.master_port = run.master_port;
    a.restart_count = run.restart_count;
    a.reason =
        in_place ? absl::StrCat(reason, " (in place: the survivors keep their workers)") : reason;
    a.host_node_id = options_.host_node_id;
    a.in_place = in_place;
    out.push_back(Outgoing{n->session, std::move(a)});
  }
  SendProgress(run, out);  // Nodes beyond MAX (the other spares) keep waiting.
  (void)now;
}

bool RoundStateMachine::InPlaceFits(const RunRecord& run,
                                    const std::vector<std::pair<NodeRecord*, int32_t>>& ranks) {
  if (!run.in_place_spares || run.round < 0 || ranks.front().first->node_rank != 0) return false;
  int32_t world_size = 0;
  bool spare = false;
  for (const auto& [n, r] : ranks) {
    // Still the last round's rank here: -1 for a waiting node.
    if (n->node_rank >= 0 && n->node_rank != r) return false;
    spare = spare || n->node_rank < 0;
    world_size += n->nproc;
  }
  return spare && world_size == run.world_size;
}

bool RoundStateMachine::TrySendPendingRound(RunRecord& run, absl::Time now,
                                            std::vector<Outgoing>& out) {
  std::string reason = *run.pending_reason;
  run.pending_reason.reset();
  if (ConnectedCount(run) < run.min_nodes) {
    // Nodes left while the round was held: too few for it. A gathering run waits for nodes
    // again, up to its join timeout (StartRound cleared the deadline when it held the round).
    if (run.state == RunState::kGathering && run.round >= 0 && !run.join_deadline) {
      run.join_deadline = now + run.join_timeout;
    }
    if (run.state == RunState::kRunning) {
      // The held round was to replace the running one (a scale-up never drops below MIN: the
      // members it keeps are at least MIN until one is lost, which holds a round of its own),
      // which cannot go on: as after any loss below MIN, a failure reported meanwhile ends the
      // run, else its members stop their workers and the run waits for nodes.
      AfterMemberLost(run,
                      absl::StrCat(reason, "; then nodes left: ", ConnectedCount(run),
                                   " connected before node rank 0's next store was ready"),
                      now, out);
    }
    return false;
  }
  int32_t inc = run.pending_restart_increment;
  run.pending_restart_increment = 0;
  StartRound(run, reason, inc, absl::InfinitePast(), out);
  return true;
}

void RoundStateMachine::FinishRun(RunRecord& run, bool succeeded, const std::string& message,
                                  const WorkerFailure* failure, absl::Time now,
                                  std::vector<Outgoing>& out, bool too_few_nodes) {
  const bool was_running = run.state == RunState::kRunning;
  run.outcome = absl::StrCat(succeeded ? "succeeded: " : "failed: ", message);
  run.finished =
      RunFinished{succeeded, message, failure != nullptr ? std::optional(*failure) : std::nullopt,
                  too_few_nodes};
  for (const auto& [id, n] : run.nodes) {
    if (n.session == 0) continue;
    // A node waiting while a round ran was a hot spare (or about to grow the run): the run it
    // waited on is its job, and its success ends the spare's part well (a scheduler counts a
    // step or an Indexed Job's pod with any other code as failed). Too few nodes after losing
    // nodes is theirs too: a join timeout.
    const bool theirs = too_few_nodes || (was_running && succeeded);
    if (n.node_rank < 0 && !theirs) {
      // Waiting nodes never ran a worker of this run: its failure is not theirs (torchrun:
      // RendezvousClosedError), so they are told they were not admitted. A spare says so, so
      // that its exit (77, not admitted) reads as the expected end of an unused spare.
      out.push_back(
          ErrorFor(n.session, kFailedPrecondition,
                   absl::StrCat("run '", run.run_id, "' ended (", run.outcome, ") before node '",
                                n.node_id, "' was admitted to it",
                                was_running ? " (it waited as a spare and was not needed)" : "")));
      continue;
    }
    out.push_back(Outgoing{n.session, run.finished, /*close=*/true});
  }
  run.state = RunState::kClosed;
  ++(succeeded ? counters_.runs_succeeded : counters_.runs_failed);
  run.closed_at = now;
  EndRecovery(run);
  run.deferred_restart.reset();
  run.last_call_deadline.reset();
  run.scale_up_deadline.reset();
  run.join_deadline.reset();
  run.failure_deadline.reset();
  run.pending_reason.reset();
}

std::vector<Outgoing> RoundStateMachine::OnReport(SessionId session, const NodeReport& report,
                                                  absl::Time now) {
  if (!commit_failure_.ok()) return {};
  return Committed(ReportImpl(session, report, now));
}

std::vector<Outgoing> RoundStateMachine::ReportImpl(SessionId session, const NodeReport& report,
                                                    absl::Time now) {
  std::vector<Outgoing> out;
  RunRecord* run = nullptr;
  NodeRecord* node = NodeOf(session, &run);
  if (node == nullptr) {
    out.push_back(ErrorFor(session, kFailedPrecondition, "report before join"));
    return out;
  }
  node->last_contact = now;
  // A report about an earlier round (its failure may be the consequence of a lost node) or racing
  // the end of the run is ignored.
  if (run->state != RunState::kRunning || report.round != run->round || node->node_rank < 0) {
    return out;
  }
  if (report.succeeded) {
    // A node's first report of a round stands: a success after its failure does not count.
    if (node->failed) return out;
    if (!node->succeeded) ++run->succeeded;
    node->succeeded = true;
    if (run->succeeded == run->members && !run->recovering) {
      FinishRun(*run, true, absl::StrCat("all ", run->members, " nodes succeeded"), nullptr, now,
                out);
    }
    return out;
  }
  // A node that rejoined after a broken stream reports again: its failure counts once. A
  // node's first report of a round stands: a failure after its success does not count either.
  if (node->failed || node->succeeded) return out;
  node->failed = true;
  std::string what =
      absl::StrCat("node ", node->node_id, " (node rank ", node->node_rank, "): ", report.message);
  // A restart round needs MIN connected nodes (members that finished their part and left are
  // not): with fewer, the failure ends the run as when no restart is left.
  if (run->restart_count < run->max_restarts &&
      (run->recovering || ConnectedCount(*run) >= run->min_nodes)) {
    if (run->recovering) {
      // Not every node of the round has rejoined the restarted service: a restart round now
      // would leave the others out (and refuse their rejoins). It starts when recovery ends.
      if (!run->deferred_restart) run->deferred_restart = what;
      return out;
    }
    StartRound(*run, absl::StrCat("restart after failure: ", what), 1, now, out);
    return out;
  }
  WorkerFailure failure = report.failure.value_or(WorkerFailure{});
  failure.node_id = node->node_id;
  run->failures.push_back(failure);
  run->failure_messages.push_back(
      run->max_restarts > 0 ? absl::StrCat(what, " (after ", run->restart_count, " restart(s))")
                            : what);
  if (static_cast<int32_t>(run->failures.size()) >= run->members && !run->recovering) {
    FinishWithEarliestFailure(*run, now, out);
  } else if (!run->failure_deadline) {
    run->failure_deadline = now + options_.failure_grace;
  }
  return out;
}

void RoundStateMachine::FinishWithEarliestFailure(RunRecord& run, absl::Time now,
                                                  std::vector<Outgoing>& out) {
  size_t first = 0;
  for (size_t i = 1; i < run.failures.size(); ++i) {
    if (run.failures[i].time < run.failures[first].time) first = i;
  }
  WorkerFailure failure = run.failures[first];
  std::string message = run.failure_messages[first];
  run.failures.clear();
  run.failure_messages.clear();
  run.failure_deadline.reset();
  FinishRun(run, false, message, &failure, now, out);
}

std::vector<Outgoing> RoundStateMachine::OnStoreReady(SessionId session, const StoreReady& ready,
                                                      absl::Time now) {
  if (!commit_failure_.ok()) return {};
  return Committed(StoreReadyImpl(session, ready, now));
}

std::vector<Outgoing> RoundStateMachine::StoreReadyImpl(SessionId session, const StoreReady& ready,
                                                        absl::Time now) {
  std::vector<Outgoing> out;
  RunRecord* run = nullptr;
  NodeRecord* node = NodeOf(session, &run);
  if (node == nullptr) return out;
  if (ready.store_port < 1 || ready.store_port > 65535) {
    out.push_back(ErrorFor(session, kInvalidArgument,
                           absl::StrCat("store_port must be 1..65535, got ", ready.store_port)));
    return out;
  }
  node->store_port = ready.store_port;
  node->last_contact = now;
  if (run->pending_reason) TrySendPendingRound(*run, now, out);
  return out;
}

void RoundStateMachine::LoseNode(RunRecord& run, const std::string& node_id, const std::string& why,
                                 absl::Time now, std::vector<Outgoing>& out) {
  auto it = run.nodes.find(node_id);
  if (it == run.nodes.end()) return;
  NodeRecord& node = it->second;
  const bool active_member =
      run.state == RunState::kRunning && node.node_rank >= 0 && !node.succeeded;
  if (run.state == RunState::kRunning && node.succeeded) {
    DetachSession(run, node);  // Its part is done; keep the record for the all-succeeded check.
    return;
  }
  if (active_member && run.recovering) {
    // Not every node has rejoined the restarted service yet: the round's membership is not known,
    // so nothing is decided now. The node counts as one that has not rejoined; it may still come
    // back until the rejoin window ends, which decides for all missing nodes at once.
    run.rank_rejoined[node.node_rank] = false;
    EraseNode(run, it);
    return;
  }
  const std::string lost = absl::StrCat("node ", node.node_id, " (", node.address, ") ", why);
  if (active_member) ++counters_.nodes_lost;
  EraseNode(run, it);
  if (run.state == RunState::kClosed) return;
  if (!active_member) {
    Evaluate(run, now, out);
    return;
  }
  AfterMemberLost(run, lost, now, out);
}

void RoundStateMachine::AfterMemberLost(RunRecord& run, const std::string& lost, absl::Time now,
                                        std::vector<Outgoing>& out) {
  if (!run.failures.empty()) {
    // The round is already failing: losing a node now does not start another round.
    FinishWithEarliestFailure(run, now, out);
    return;
  }
  if (run.succeeded > 0) {
    // Some nodes finished their part: a new round would run their finished workers again (as
    // torchrun, whose agents exit once their own workers succeed, never does). The run fails.
    FinishRun(run, false,
              absl::StrCat(lost, " after ", run.succeeded,
                           " node(s) had finished; finished "
                           "workers are not run again"),
              nullptr, now, out);
    return;
  }
  if (ConnectedCount(run) >= run.min_nodes) {
    StartRound(run, absl::StrCat("node lost: ", lost), 0, now, out, /*member_lost=*/true);
    return;
  }
  // Too few nodes to go on: survivors stop their workers and the run waits for nodes.
  for (const auto& [id, n] : run.nodes) {
    if (n.session == 0 || n.node_rank < 0) continue;
    out.push_back(Outgoing{
        n.session,
        StopWorkers{run.round,
                    absl::StrCat(lost, "; waiting up to ", absl::FormatDuration(run.join_timeout),
                                 " for at least ", run.min_nodes, " nodes")}});
  }
  EndRecovery(run);
  run.state = RunState::kGathering;
  run.join_deadline = now + run.join_timeout;
  run.last_call_deadline.reset();
  // A scale-up of the round that ended, or a round held for its node rank 0's next store, goes
  // with it: a gathering run's tick handles neither, and a held round stops it from timing out.
  // A restart the held round carried still counts (pending_restart_increment).
  run.scale_up_deadline.reset();
  run.pending_reason.reset();
  SendProgress(run, out);
}

std::vector<Outgoing> RoundStateMachine::OnSessionClosed(SessionId session, absl::Time now) {
  if (!commit_failure_.ok()) return {};
  return Committed(SessionClosedImpl(session, now));
}

std::vector<Outgoing> RoundStateMachine::SessionClosedImpl(SessionId session, absl::Time now) {
  std::vector<Outgoing> out;
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return out;
  SessionRef ref = s->second;
  sessions_.erase(s);
  RunRecord* r = Touch(ref.run_id);
  if (r == nullptr) return out;
  RunRecord& run = *r;
  auto n = run.nodes.find(ref.node_id);
  if (n == run.nodes.end() || n->second.session != session) return out;
  n->second.last_contact = now;  // Its stream was alive (keepalive) until now.
  if (run.state == RunState::kClosed) {
    DetachSession(run, n->second);
    return out;
  }
  LoseNode(run, ref.node_id, "was lost", now, out);
  if (run.state != RunState::kClosed && ConnectedCount(run) == 0) {
    // Nobody is left to tell: forget the run.
    for (const auto& [id, node] : run.nodes) sessions_.erase(node.session);
    DeleteRun(ref.run_id);
  }
  return out;
}

std::vector<Outgoing> RoundStateMachine::OnTick(absl::Time now) {
  if (!commit_failure_.ok()) return {};
  return Committed(TickImpl(now));
}

std::vector<Outgoing> RoundStateMachine::TickImpl(absl::Time now) {
  std::vector<Outgoing> out;
  // Only runs with a deadline passed have anything to do; the others are not written.
  std::vector<std::string> due;
  backend_->ForEach([&](const RunRecord& run) {
    std::optional<absl::Time> next = NextDeadlineOf(run);
    if (next && *next <= now) due.push_back(run.run_id);
  });
  for (const std::string& run_id : due) {
    RunRecord* found = Touch(run_id);
    if (found == nullptr) continue;
    RunRecord& run = *found;
    if (run.state == RunState::kGathering && !run.pending_reason) {
      const int32_t connected = ConnectedCount(run);
      if (run.join_deadline && *run.join_deadline <= now && connected < run.min_nodes) {
        FinishRun(run, false,
                  absl::StrCat("run '", run.run_id, "' had only ", connected, " of at least ",
                               run.min_nodes, " nodes for ", absl::FormatDuration(run.join_timeout),
                               " after losing nodes"),
                  nullptr, now, out, /*too_few_nodes=*/true);
      } else if (run.last_call_deadline && *run.last_call_deadline <= now) {
        if (connected >= run.min_nodes) {
          StartRound(run, run.round < 0 ? "initial" : "nodes rejoined", 0, now, out);
        } else {
          // Below MIN again (an adopted run's nodes have not re-attached yet): Evaluate sets a
          // new last call when MIN is back. Kept, the passed deadline would make the caller
          // tick without pause.
          run.last_call_deadline.reset();
        }
      }
    } else if (run.state == RunState::kRunning && run.recovering && run.rejoin_deadline &&
               *run.rejoin_deadline <= now) {
      const int32_t missing = run.expected_members - run.members;
      const std::string lost =
          absl::StrCat(missing, " of ", run.expected_members, " node(s) of round ", run.round,
                       " did not rejoin within ", absl::FormatDuration(options_.rejoin_timeout),
                       " after the rendezvous service restarted");
      counters_.nodes_lost += missing;
      EndRecovery(run);
      std::optional<std::string> restart = std::move(run.deferred_restart);
      run.deferred_restart.reset();
      if (restart && ConnectedCount(run) >= run.min_nodes) {
        // A failure came while waiting for the rejoins: the restart it asked for, with the nodes
        // that rejoined (at least MIN).
        StartRound(run, absl::StrCat("restart after failure: ", *restart, "; ", lost), 1, now, out);
      } else {
        AfterMemberLost(run, lost, now, out);
      }
    } else if (run.state == RunState::kRunning && !run.recovering && run.failure_deadline &&
               *run.failure_deadline <= now) {
      FinishWithEarliestFailure(run, now, out);
    } else if (run.state == RunState::kRunning && !run.recovering && run.scale_up_deadline &&
               *run.scale_up_deadline <= now) {
      StartRound(run, "scale-up", 0, now, out);
    }
    if (run.state == RunState::kClosed && run.closed_at + options_.closed_run_retention <= now) {
      for (const auto& [id, node] : run.nodes) sessions_.erase(node.session);
      DeleteRun(run_id);
    }
  }
  return out;
}

std::optional<absl::Time> RoundStateMachine::NextDeadlineOf(const RunRecord& run) const {
  std::optional<absl::Time> next;
  auto consider = [&](const std::optional<absl::Time>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  consider(run.last_call_deadline);
  consider(run.join_deadline);
  // A failure's grace and a scale-up wait for the end of recovery (TickImpl): until then, the
  // rejoin window.
  if (!run.recovering) {
    consider(run.failure_deadline);
    consider(run.scale_up_deadline);
  }
  consider(run.rejoin_deadline);
  if (run.state == RunState::kClosed) consider(run.closed_at + options_.closed_run_retention);
  return next;
}

std::optional<absl::Time> RoundStateMachine::NextDeadline() const {
  std::optional<absl::Time> next;
  backend_->ForEach([&](const RunRecord& run) {
    std::optional<absl::Time> t = NextDeadlineOf(run);
    if (t && (!next || *t < *next)) next = t;
  });
  return next;
}

std::optional<RoundStateMachine::RunState> RoundStateMachine::StateOf(
    const std::string& run_id) const {
  const RunRecord* run = backend_->Find(run_id);
  if (run == nullptr) return std::nullopt;
  return run->state;
}

std::vector<RunStatus> RoundStateMachine::Status(const std::string& run_id, absl::Time now) const {
  std::vector<RunStatus> response;
  auto add = [&](const RunRecord& run) {
    RunStatus& rs = response.emplace_back();
    rs.run_id = run.run_id;
    rs.state = run.state;
    rs.round = run.round;
    rs.restart_count = run.restart_count;
    rs.min_nodes = run.min_nodes;
    rs.max_nodes = run.max_nodes;
    rs.world_size = run.world_size;
    rs.outcome = run.outcome;
    rs.master_addr = run.master_addr;
    rs.master_port = run.master_port;
    std::vector<const NodeRecord*> nodes;
    for (const auto& [nid, n] : run.nodes) nodes.push_back(&n);
    std::sort(nodes.begin(), nodes.end(), [](const NodeRecord* a, const NodeRecord* b) {
      int ra = a->node_rank < 0 ? INT32_MAX : a->node_rank;
      int rb = b->node_rank < 0 ? INT32_MAX : b->node_rank;
      return ra != rb ? ra < rb : a->node_id < b->node_id;
    });
    rs.nodes.reserve(nodes.size());
    for (const NodeRecord* n : nodes) {
      rs.nodes.push_back(NodeStatus{n->node_id, n->address, n->node_rank, n->nproc,
                                    n->session != 0 ? now : n->last_contact, n->succeeded});
    }
  };
  if (run_id.empty()) {
    backend_->ForEach(add);
  } else if (const RunRecord* run = backend_->Find(run_id); run != nullptr) {
    add(*run);
  }
  return response;
}

}  // namespace dgt::rendezvous
