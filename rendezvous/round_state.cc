#include "rendezvous/round_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dgt::rendezvous {
namespace {

// google.rpc.Code values carried in v1::Error.
constexpr int kInvalidArgument = 3;
constexpr int kAlreadyExists = 6;
constexpr int kFailedPrecondition = 9;
constexpr int kAborted = 10;

std::string NnodesText(int32_t min_nodes, int32_t max_nodes) {
  return min_nodes == max_nodes ? absl::StrCat(min_nodes)
                                : absl::StrCat(min_nodes, ":", max_nodes);
}

}  // namespace

RoundStateMachine::RoundStateMachine(RoundStateOptions options) : options_(options) {}

Outgoing RoundStateMachine::ErrorFor(SessionId session, int code, std::string message) {
  Outgoing o;
  o.session = session;
  o.message.mutable_error()->set_code(code);
  o.message.mutable_error()->set_message(std::move(message));
  o.close = true;
  return o;
}

std::vector<Outgoing> RoundStateMachine::OnJoin(SessionId session, const v1::JoinRequest& join,
                                                absl::Time now) {
  std::vector<Outgoing> out;
  auto invalid = [&](std::string message) {
    out.push_back(ErrorFor(session, kInvalidArgument, std::move(message)));
    return out;
  };
  if (run_of_session_.contains(session)) {
    return invalid("this session already joined a run; open a new session per run");
  }
  if (join.run_id().empty()) return invalid("run_id must not be empty");
  if (join.node_id().empty()) return invalid("node_id must not be empty");
  if (join.min_nodes() < 1 || join.max_nodes() < join.min_nodes()) {
    return invalid(absl::StrCat("--nnodes must be MIN:MAX with 0 < MIN <= MAX, got ",
                                join.min_nodes(), ":", join.max_nodes()));
  }
  if (join.nproc_per_node() < 1) {
    return invalid(absl::StrCat("--nproc-per-node must be >= 1, got ", join.nproc_per_node()));
  }
  if (join.address().empty()) return invalid("address must not be empty");
  if (join.store_port() < 1 || join.store_port() > 65535) {
    return invalid(absl::StrCat("store_port must be 1..65535, got ", join.store_port()));
  }
  if (join.last_call_timeout_s() < 0) {
    return invalid(absl::StrCat("last_call_timeout must be >= 0 s, got ",
                                join.last_call_timeout_s()));
  }

  auto [it, created] = runs_.try_emplace(join.run_id());
  Run& run = it->second;
  if (created) {
    run.run_id = join.run_id();
    run.min_nodes = join.min_nodes();
    run.max_nodes = join.max_nodes();
    run.nproc_per_node = join.nproc_per_node();
    run.last_call_timeout = join.last_call_timeout_s() > 0
                                ? absl::Seconds(join.last_call_timeout_s())
                                : options_.default_last_call_timeout;
  } else {
    if (run.state == RunState::kClosed) {
      out.push_back(ErrorFor(session, kFailedPrecondition,
                             absl::StrCat("run '", run.run_id, "' is closed; use a new run id")));
      return out;
    }
    if (run.min_nodes != join.min_nodes() || run.max_nodes != join.max_nodes() ||
        run.nproc_per_node != join.nproc_per_node()) {
      return invalid(absl::StrCat(
          "run '", run.run_id, "' uses --nnodes=", NnodesText(run.min_nodes, run.max_nodes),
          " --nproc-per-node=", run.nproc_per_node, "; this node asked for --nnodes=",
          NnodesText(join.min_nodes(), join.max_nodes()),
          " --nproc-per-node=", join.nproc_per_node()));
    }
    if (run.state == RunState::kActive) {
      out.push_back(ErrorFor(
          session, kAborted,
          absl::StrCat("run '", run.run_id, "' round ", run.round, " is already running with ",
                       run.nodes.size(), " nodes; joining a running round is not supported")));
      return out;
    }
    for (const Node& n : run.nodes) {
      if (n.join.node_id() == join.node_id()) {
        out.push_back(ErrorFor(session, kAlreadyExists,
                               absl::StrCat("node id '", join.node_id(),
                                            "' already joined run '", run.run_id, "'")));
        return out;
      }
    }
  }

  Node node;
  node.session = session;
  node.join = join;
  run.nodes.push_back(std::move(node));
  run_of_session_[session] = run.run_id;

  const int32_t joined = static_cast<int32_t>(run.nodes.size());
  if (joined >= run.max_nodes) {
    CloseRound(run, out);
  } else {
    if (joined >= run.min_nodes && !run.last_call_deadline) {
      run.last_call_deadline = now + run.last_call_timeout;
    }
    SendProgress(run, out);
  }
  return out;
}

void RoundStateMachine::SendProgress(const Run& run, std::vector<Outgoing>& out) const {
  for (const Node& n : run.nodes) {
    Outgoing o;
    o.session = n.session;
    v1::JoinProgress* p = o.message.mutable_progress();
    p->set_joined_nodes(static_cast<int32_t>(run.nodes.size()));
    p->set_min_nodes(run.min_nodes);
    p->set_max_nodes(run.max_nodes);
    out.push_back(std::move(o));
  }
}

void RoundStateMachine::CloseRound(Run& run, std::vector<Outgoing>& out) {
  std::sort(run.nodes.begin(), run.nodes.end(), [](const Node& a, const Node& b) {
    return a.join.node_id() < b.join.node_id();
  });
  int32_t world_size = 0;
  for (const Node& n : run.nodes) world_size += n.join.nproc_per_node();
  const Node& master = run.nodes.front();
  int32_t first_rank = 0;
  for (size_t i = 0; i < run.nodes.size(); ++i) {
    const Node& n = run.nodes[i];
    Outgoing o;
    o.session = n.session;
    v1::Assignment* a = o.message.mutable_assignment();
    a->set_run_id(run.run_id);
    a->set_round(run.round);
    a->set_node_rank(static_cast<int32_t>(i));
    a->set_node_count(static_cast<int32_t>(run.nodes.size()));
    a->set_world_size(world_size);
    a->set_first_global_rank(first_rank);
    a->set_master_addr(master.join.address());
    a->set_master_port(master.join.store_port());
    first_rank += n.join.nproc_per_node();
    out.push_back(std::move(o));
  }
  run.state = RunState::kActive;
  run.last_call_deadline.reset();
}

void RoundStateMachine::FinishRun(Run& run, const v1::RunFinished& finished, absl::Time now,
                                  std::vector<Outgoing>& out) {
  for (const Node& n : run.nodes) {
    if (!n.connected) continue;
    Outgoing o;
    o.session = n.session;
    *o.message.mutable_finished() = finished;
    o.close = true;
    out.push_back(std::move(o));
  }
  run.state = RunState::kClosed;
  run.closed_at = now;
}

std::vector<Outgoing> RoundStateMachine::OnReport(SessionId session,
                                                  const v1::NodeReport& report, absl::Time now) {
  std::vector<Outgoing> out;
  auto rs = run_of_session_.find(session);
  if (rs == run_of_session_.end()) {
    out.push_back(ErrorFor(session, kFailedPrecondition, "report before join"));
    return out;
  }
  Run& run = runs_.at(rs->second);
  if (run.state != RunState::kActive) return out;  // A report racing the end of the run.
  auto node = std::find_if(run.nodes.begin(), run.nodes.end(),
                           [&](const Node& n) { return n.session == session; });
  if (node == run.nodes.end() || node->reported) return out;
  node->reported = true;
  if (!report.succeeded()) {
    v1::RunFinished finished;
    finished.set_succeeded(false);
    finished.set_message(absl::StrCat("node ", node->join.node_id(), " (node rank ",
                                      node - run.nodes.begin(), "): ", report.message()));
    *finished.mutable_failure() = report.failure();
    finished.mutable_failure()->set_node_id(node->join.node_id());
    FinishRun(run, finished, now, out);
    return out;
  }
  bool all = std::all_of(run.nodes.begin(), run.nodes.end(),
                         [](const Node& n) { return n.reported; });
  if (all) {
    v1::RunFinished finished;
    finished.set_succeeded(true);
    finished.set_message(absl::StrCat("all ", run.nodes.size(), " nodes succeeded"));
    FinishRun(run, finished, now, out);
  }
  return out;
}

std::vector<Outgoing> RoundStateMachine::OnSessionClosed(SessionId session, absl::Time now) {
  std::vector<Outgoing> out;
  auto rs = run_of_session_.find(session);
  if (rs == run_of_session_.end()) return out;
  std::string run_id = rs->second;
  run_of_session_.erase(rs);
  Run& run = runs_.at(run_id);
  auto node = std::find_if(run.nodes.begin(), run.nodes.end(),
                           [&](const Node& n) { return n.session == session; });
  if (node == run.nodes.end()) return out;
  switch (run.state) {
    case RunState::kOpen:
      run.nodes.erase(node);
      if (run.nodes.empty()) {
        runs_.erase(run_id);
        return out;
      }
      if (static_cast<int32_t>(run.nodes.size()) < run.min_nodes) run.last_call_deadline.reset();
      SendProgress(run, out);
      return out;
    case RunState::kActive: {
      node->connected = false;
      if (node->reported) return out;
      v1::RunFinished finished;
      finished.set_succeeded(false);
      finished.set_message(absl::StrCat("node ", node->join.node_id(), " (node rank ",
                                        node - run.nodes.begin(), ", ", node->join.address(),
                                        ") was lost before its workers finished"));
      FinishRun(run, finished, now, out);
      return out;
    }
    case RunState::kClosed:
      node->connected = false;
      return out;
  }
  return out;
}

std::vector<Outgoing> RoundStateMachine::OnTick(absl::Time now) {
  std::vector<Outgoing> out;
  for (auto it = runs_.begin(); it != runs_.end();) {
    Run& run = it->second;
    if (run.state == RunState::kOpen && run.last_call_deadline &&
        *run.last_call_deadline <= now &&
        static_cast<int32_t>(run.nodes.size()) >= run.min_nodes) {
      CloseRound(run, out);
    }
    if (run.state == RunState::kClosed && run.closed_at + options_.closed_run_retention <= now) {
      for (const Node& n : run.nodes) run_of_session_.erase(n.session);
      it = runs_.erase(it);
      continue;
    }
    ++it;
  }
  return out;
}

std::optional<absl::Time> RoundStateMachine::NextDeadline() const {
  std::optional<absl::Time> next;
  for (const auto& [id, run] : runs_) {
    std::optional<absl::Time> t;
    if (run.state == RunState::kOpen && run.last_call_deadline) t = run.last_call_deadline;
    if (run.state == RunState::kClosed) t = run.closed_at + options_.closed_run_retention;
    if (t && (!next || *t < *next)) next = t;
  }
  return next;
}

std::optional<RoundStateMachine::RunState> RoundStateMachine::StateOf(
    const std::string& run_id) const {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return std::nullopt;
  return it->second.state;
}

}  // namespace dgt::rendezvous
