// Stateful libFuzzer target over the rendezvous round state machine (rendezvous/round_state.h) on
// a simulated clock. The input picks a run's MIN:MAX, nproc, restarts, spares and whether its
// agents ask for in-place spares (--restart-policy rank), then a sequence
// of events by up to 6 agents: joins, rejoins with their assignment, a second agent with a node id
// already connected, session ends, success and failure reports (also for a wrong round),
// StoreReady, clock ticks, and service restarts (the runs adopted from the backend, or lost with
// the service's memory). After every event the messages are checked:
//   - a new round's assignments give node ranks 0..n-1, each once, with n within MIN:MAX, and
//     world size and first global ranks that follow from them;
//   - node rank 0 keeps rank 0 while its session lives;
//   - a new round as large as the one before keeps the node rank of every member that stayed
//     (same agent session, or its rejoin) in both: a spare takes a lost node's place, nobody
//     moves;
//   - a node told it waits as a spare holds no node rank;
//   - an in-place round (every assignment says so, or none) only for a run that asked for it,
//     with the last round's node count, MASTER_ADDR:MASTER_PORT and restart count; any other new
//     round starts on another store than the last round's (an agent whose store became a round's
//     listens on its next port, announced by a later StoreReady);
//   - round numbers only increase (within one run, until it finishes);
//   - no node is in two rounds: one assignment per node per round, and a round's assignment sent
//     again (a rejoin) is the same one;
//   - messages go only to open sessions, at most one RunFinished each;
//   - after a tick, no deadline is left in the past.
// A divergence aborts with what broke on stderr.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rendezvous/round_state.h"
#include "rendezvous/run_state_backend.h"
#include "rendezvous/types.h"

namespace {

using dgt::rendezvous::Assignment;
using dgt::rendezvous::InMemoryRunStateBackend;
using dgt::rendezvous::JoinProgress;
using dgt::rendezvous::JoinRequest;
using dgt::rendezvous::NodeReport;
using dgt::rendezvous::Outgoing;
using dgt::rendezvous::Refusal;
using dgt::rendezvous::RoundStateMachine;
using dgt::rendezvous::RoundStateOptions;
using dgt::rendezvous::RunFinished;
using dgt::rendezvous::SessionId;
using dgt::rendezvous::StopWorkers;
using dgt::rendezvous::StoreReady;
using dgt::rendezvous::WorkerFailure;

constexpr int kAgents = 6;
constexpr int kMaxSteps = 80;
constexpr char kRunId[] = "job";

// The events of the current input, printed with a divergence (DGT_FUZZ_TRACE=1 only: it costs).
std::string* trace = nullptr;

[[noreturn]] void Diverge(const std::string& what) {
  if (trace != nullptr) std::fprintf(stderr, "%s", trace->c_str());
  std::fprintf(stderr, "round_state_fuzzer divergence: %s\n", what.c_str());
  std::abort();
}

struct Agent {
  std::string node_id;
  SessionId session = 0;  // 0: not connected.
  std::optional<Assignment> held;
  int store_port = 0;  // The port its next store listens on.
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider* in) : in_(in) {
    min_ = in_->ConsumeIntegralInRange<int>(1, 3);
    max_ = in_->ConsumeIntegralInRange<int>(min_, 4);
    nproc_ = in_->ConsumeIntegralInRange<int>(1, 2);
    max_restarts_ = in_->ConsumeIntegralInRange<int>(0, 2);
    last_call_ = absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 10));
    join_timeout_ = absl::Seconds(in_->ConsumeIntegralInRange<int>(5, 60));
    spare_nodes_ = in_->ConsumeIntegralInRange<int>(0, 2);
    in_place_ = in_->ConsumeBool();
    for (int i = 0; i < kAgents; ++i) {
      agents_[i].node_id = absl::StrCat("n", i);
      agents_[i].store_port = 20000 + i * 100;
    }
    options_.rejoin_timeout = absl::Seconds(20);
    options_.failure_grace = absl::Seconds(1);
    options_.backend = backend_.get();
    machine_ = std::make_unique<RoundStateMachine>(options_);
  }

  void Run() {
    if (trace != nullptr) {
      absl::StrAppend(trace, "run ", min_, ":", max_, " nproc ", nproc_, " max_restarts ",
                      max_restarts_, " last call ", absl::FormatDuration(last_call_),
                      " join timeout ", absl::FormatDuration(join_timeout_), " spares ",
                      spare_nodes_, in_place_ ? " in place" : "", "\n");
    }
    for (int step = 0; step < kMaxSteps && in_->remaining_bytes() > 0; ++step) {
      Step();
      if (trace != nullptr) {
        const auto next = machine_->NextDeadline();
        const auto state = machine_->StateOf(kRunId);
        absl::StrAppend(trace, "  run ", state ? dgt::rendezvous::RunStateName(*state) : "none",
                        ", next deadline ",
                        next ? absl::FormatDuration(*next - now_) : std::string("none"), "\n");
      }
    }
  }

 private:
  JoinRequest MakeJoin(const Agent& a, bool mismatch) const {
    JoinRequest j;
    j.run_id = kRunId;
    j.node_id = a.node_id;
    j.min_nodes = min_;
    j.max_nodes = max_;
    j.nproc_per_node = mismatch ? nproc_ + 1 : nproc_;
    j.address = absl::StrCat("10.0.0.", a.node_id.substr(1));
    j.store_port = a.store_port;
    j.last_call_timeout = last_call_;
    j.max_restarts = max_restarts_;
    j.join_timeout = join_timeout_;
    j.spare_nodes = spare_nodes_;
    j.in_place_spares = in_place_;
    return j;
  }

  void Step() {
    const int i = in_->ConsumeIntegralInRange<int>(0, kAgents - 1);
    Agent& a = agents_[i];
    const int event = in_->ConsumeIntegralInRange<int>(0, 9);
    if (trace != nullptr) {
      absl::StrAppend(trace, "t=", absl::ToUnixSeconds(now_), " agent ", a.node_id, " session ",
                      a.session, " event ", event, "\n");
    }
    switch (event) {
      case 0:
      case 1: {  // A join over a new session (a second agent when one is connected).
        const bool mismatch = in_->ConsumeIntegralInRange<int>(0, 15) == 0;
        JoinRequest j = MakeJoin(a, mismatch);
        const bool second = a.session != 0;
        if (!second && a.held && in_->ConsumeBool()) j.rejoin = a.held;
        const SessionId s = next_session_++;
        owner_[s] = i;
        open_.insert(s);
        if (!second) a.session = s;
        std::vector<Outgoing> out = machine_->OnJoin(s, j, now_);
        if (second) {
          // The node id's agent is connected: refused (ALREADY_EXISTS, or first for a join
          // that does not match the run, or a closed run), nothing else changes.
          const auto* refusal = out.size() == 1 ? std::get_if<Refusal>(&out[0].message) : nullptr;
          const absl::StatusCode code =
              refusal != nullptr ? refusal->status.code() : absl::StatusCode::kOk;
          if (refusal == nullptr || out[0].session != s || !out[0].close ||
              (code != absl::StatusCode::kAlreadyExists &&
               code != absl::StatusCode::kFailedPrecondition &&
               code != absl::StatusCode::kInvalidArgument)) {
            Diverge(absl::StrCat("a second agent for connected node ", a.node_id,
                                 " is not refused alone: ", out.size(), " messages, ",
                                 refusal != nullptr ? refusal->status.ToString() : "no refusal"));
          }
        }
        Apply(out);
        return;
      }
      case 2: {  // The session ends.
        if (a.session == 0) return;
        EndSession(a.session);
        return;
      }
      case 3:
      case 4: {  // A report for the held round, or for another one.
        if (a.session == 0) return;
        NodeReport r;
        r.round = a.held ? a.held->round : 0;
        if (in_->ConsumeIntegralInRange<int>(0, 7) == 0) r.round += 1;
        r.succeeded = in_->ConsumeBool();
        if (!r.succeeded) {
          r.message = "worker failed";
          WorkerFailure f;
          f.node_id = a.node_id;
          f.exit_code = in_->ConsumeIntegralInRange<int>(1, 3);
          f.time = now_ - absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 5));
          r.failure = f;
        }
        Apply(machine_->OnReport(a.session, r, now_));
        return;
      }
      case 5: {  // The agent's next store is listening.
        if (a.session == 0) return;
        a.store_port += 1;
        Apply(machine_->OnStoreReady(a.session, StoreReady{a.store_port}, now_));
        return;
      }
      case 6:
      case 7: {  // Time passes.
        now_ += absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 40));
        Apply(machine_->OnTick(now_));
        if (std::optional<absl::Time> next = machine_->NextDeadline(); next && *next <= now_) {
          Diverge(absl::StrCat("a deadline ", absl::FormatDuration(now_ - *next),
                               " in the past is left after a tick"));
        }
        return;
      }
      case 8: {  // The service restarts and adopts the runs from its backend.
        Restart(/*keep_runs=*/true);
        return;
      }
      default: {  // The service restarts with its memory lost.
        Restart(/*keep_runs=*/false);
        return;
      }
    }
  }

  void EndSession(SessionId s) {
    open_.erase(s);
    Agent& a = agents_[owner_.at(s)];
    if (a.session == s) {
      a.session = 0;
      rank0_live_.erase(a.node_id);
    }
    Apply(machine_->OnSessionClosed(s, now_));
  }

  void Restart(bool keep_runs) {
    open_.clear();
    for (Agent& a : agents_) a.session = 0;
    rank0_live_.clear();
    if (!keep_runs) {
      backend_ = std::make_unique<InMemoryRunStateBackend>();
      options_.backend = backend_.get();
      ForgetRun();
    }
    machine_ = std::make_unique<RoundStateMachine>(options_);
    if (keep_runs) {
      if (absl::Status s = machine_->AdoptRuns(now_); !s.ok()) {
        Diverge(absl::StrCat("AdoptRuns from memory failed: ", s.ToString()));
      }
    }
  }

  // The service no longer has the run (it lost its memory, or the run's last node left): it is
  // re-created from rejoins (checked against the rounds assigned before), or afresh from plain
  // joins, whose rounds start again from 0.
  void ForgetRun() {
    for (const auto& [round, nodes] : rounds_) {
      for (const auto& [node, as] : nodes) before_restart_[round][node] = as;
    }
    rank0_live_.clear();
    ResetRun();
  }

  void ResetRun() {
    rounds_.clear();
    max_round_ = -1;
  }

  // Checks and delivers one event's messages.
  void Apply(const std::vector<Outgoing>& out) {
    if (trace != nullptr) {
      for (const Outgoing& o : out) {
        absl::StrAppend(trace, "  -> session ", o.session, " kind ", o.message.index());
        if (const auto* as = std::get_if<Assignment>(&o.message)) {
          absl::StrAppend(trace, " round ", as->round, " rank ", as->node_rank, "/", as->node_count,
                          " ", as->reason);
        }
        if (const auto* r = std::get_if<Refusal>(&o.message)) {
          absl::StrAppend(trace, " ", r->status.ToString());
        }
        absl::StrAppend(trace, o.close ? " close\n" : "\n");
      }
    }
    std::map<int64_t, std::vector<std::pair<int, Assignment>>> fresh;  // New rounds.
    std::vector<SessionId> closed;
    std::vector<std::string> spares;  // Told they wait as spares.
    for (const Outgoing& o : out) {
      if (!open_.contains(o.session)) {
        Diverge(absl::StrCat("a message to session ", o.session, " that is not open"));
      }
      if (std::find(closed.begin(), closed.end(), o.session) != closed.end()) {
        Diverge(absl::StrCat("a message to session ", o.session, " after its close"));
      }
      const int i = owner_.at(o.session);
      Agent& a = agents_[i];
      if (const auto* as = std::get_if<Assignment>(&o.message)) {
        if (a.session != o.session) Diverge("an assignment to a second agent's session");
        bool continue_membership = true;  // Not a new round: the member (re)attached here.
        if (as->run_id != kRunId) Diverge("an assignment for another run");
        auto before = before_restart_.find(as->round);
        if (as->reason == "rejoined" && before != before_restart_.end() &&
            before->second.contains(a.node_id) &&
            dgt::rendezvous::SameRound(*as, before->second[a.node_id]) &&
            !rounds_[as->round].contains(a.node_id)) {
          // A rejoin that re-creates the round a restarted service forgot.
          rounds_[as->round][a.node_id] = *as;
          max_round_ = std::max(max_round_, as->round);
        } else if (as->round > max_round_) {
          fresh[as->round].emplace_back(i, *as);
          continue_membership = false;
        } else {
          auto r = rounds_.find(as->round);
          if (r == rounds_.end()) {
            Diverge(absl::StrCat("an assignment for round ", as->round, " below the newest ",
                                 max_round_, " that was never assigned"));
          }
          auto n = r->second.find(a.node_id);
          if (n == r->second.end()) {
            Diverge(absl::StrCat("node ", a.node_id, " added to round ", as->round,
                                 " after it started"));
          }
          if (!dgt::rendezvous::SameRound(*as, n->second)) {
            Diverge(absl::StrCat("node ", a.node_id, " given a second assignment in round ",
                                 as->round));
          }
          if (as->round != max_round_) {
            Diverge(absl::StrCat("an assignment for old round ", as->round));
          }
        }
        if (a.held && a.held->run_id == as->run_id && as->round < a.held->round &&
            max_round_ >= a.held->round) {
          Diverge(absl::StrCat("node ", a.node_id, " moved back from round ", a.held->round, " to ",
                               as->round));
        }
        a.held = *as;
        if (continue_membership) member_session_[a.node_id] = o.session;
        if (as->node_rank == 0 && as->master_port == a.store_port) {
          a.store_port += 1;  // The agent's store serves the round; its next one listens.
        }
      } else if (const auto* f = std::get_if<RunFinished>(&o.message)) {
        (void)f;
        if (!o.close) Diverge("RunFinished without closing the session");
        a.held.reset();
        finished_run_ = true;
      } else if (const auto* r = std::get_if<Refusal>(&o.message)) {
        if (r->status.ok()) Diverge("a Refusal with an OK status");
        if (!o.close) Diverge("a Refusal that does not close the session");
      } else if (const auto* p = std::get_if<JoinProgress>(&o.message)) {
        if (p->min_nodes != min_ || p->max_nodes != max_) {
          Diverge(absl::StrCat("JoinProgress with MIN:MAX ", p->min_nodes, ":", p->max_nodes,
                               ", run has ", min_, ":", max_));
        }
        if (p->spare) spares.push_back(a.node_id);
      } else if (std::get_if<StopWorkers>(&o.message) == nullptr) {
        Diverge("an unknown message");
      }
      if (o.close) closed.push_back(o.session);
    }
    if (fresh.size() > 1) Diverge("two new rounds in one event");
    for (auto& [round, assigned] : fresh) CheckNewRound(round, assigned);
    if (!spares.empty()) CheckSpares(spares);
    if (finished_run_) {
      // The run is closed; a later join with its id starts a new run from round 0.
      ForgetRun();
      finished_run_ = false;
    }
    for (SessionId s : closed) {
      if (open_.contains(s)) EndSession(s);
    }
    const auto state = machine_->StateOf(kRunId);
    if (!state.has_value()) {
      ForgetRun();
    } else if (*state == dgt::rendezvous::RunState::kClosed) {
      // Finished (with or without a session to tell): a join after all left starts a new run,
      // which a member's rejoin may turn back into its round, as after a restart.
      ForgetRun();
    }
  }

  // Spares hold no node rank, and are told so only while a round runs.
  void CheckSpares(const std::vector<std::string>& spares) {
    const std::vector<dgt::rendezvous::RunStatus> status = machine_->Status(kRunId, now_);
    if (status.size() != 1 || status[0].state != dgt::rendezvous::RunState::kRunning) {
      Diverge("a node told it is a spare of a run that is not running");
    }
    for (const auto& n : status[0].nodes) {
      if (n.node_rank >= 0 && std::find(spares.begin(), spares.end(), n.node_id) != spares.end()) {
        Diverge(absl::StrCat("spare ", n.node_id, " holds node rank ", n.node_rank));
      }
    }
  }

  void CheckNewRound(int64_t round, const std::vector<std::pair<int, Assignment>>& assigned) {
    const int n = static_cast<int>(assigned.size());
    CheckStore(round, assigned);
    if (auto last = rounds_.find(max_round_); last != rounds_.end()) {
      for (const auto& [i, as] : assigned) {
        const std::string& node = agents_[i].node_id;
        auto before = last->second.find(node);
        auto session = member_session_.find(node);
        const bool stayed =
            session != member_session_.end() && session->second == agents_[i].session;
        if (stayed && before != last->second.end() && before->second.node_count == n &&
            before->second.node_rank != as.node_rank) {
          Diverge(absl::StrCat("node ", agents_[i].node_id, " moved from node rank ",
                               before->second.node_rank, " to ", as.node_rank, " in round ", round,
                               " of the same size ", n));
        }
      }
    }
    std::set<int> ranks;
    std::set<std::string> nodes;
    std::string rank0;
    for (const auto& [i, as] : assigned) {
      const std::string& node = agents_[i].node_id;
      if (as.node_count != n) {
        Diverge(absl::StrCat("round ", round, " says ", as.node_count, " nodes, sent to ", n));
      }
      if (as.node_rank < 0 || as.node_rank >= n || !ranks.insert(as.node_rank).second) {
        Diverge(absl::StrCat("round ", round, " node rank ", as.node_rank, " of ", n,
                             " is out of range or given twice"));
      }
      if (!nodes.insert(node).second) {
        Diverge(absl::StrCat("node ", node, " twice in round ", round));
      }
      // Every node of a run has the nproc of its first join (a mismatched join is refused).
      const int nproc = n > 0 ? as.world_size / n : 0;
      if ((nproc != nproc_ && nproc != nproc_ + 1) || as.world_size != n * nproc ||
          as.first_global_rank != as.node_rank * nproc) {
        Diverge(absl::StrCat("round ", round, " world size ", as.world_size, " first rank ",
                             as.first_global_rank, " for node rank ", as.node_rank));
      }
      if (as.restart_count > max_restarts_) {
        Diverge(absl::StrCat("restart count ", as.restart_count, " above max ", max_restarts_));
      }
      if (as.node_rank == 0) rank0 = node;
    }
    if (n < min_ || n > max_) {
      Diverge(absl::StrCat("round ", round, " has ", n, " nodes outside ", min_, ":", max_));
    }
    for (const std::string& live : rank0_live_) {
      if (live != rank0) {
        Diverge(absl::StrCat("node rank 0 moved from live node ", live, " to ", rank0, " in round ",
                             round));
      }
    }
    rank0_live_ = {rank0};
    for (const auto& [i, as] : assigned) {
      rounds_[round][agents_[i].node_id] = as;
      member_session_[agents_[i].node_id] = agents_[i].session;
    }
    max_round_ = round;
  }

  // An in-place round keeps the last round's store, size and restart count; any other new round
  // starts on another store.
  void CheckStore(int64_t round, const std::vector<std::pair<int, Assignment>>& assigned) {
    const Assignment& first = assigned.front().second;
    for (const auto& [i, as] : assigned) {
      if (as.in_place != first.in_place) Diverge(absl::StrCat("round ", round, " half in place"));
    }
    auto last = rounds_.find(max_round_);
    if (last == rounds_.end() || last->second.empty()) {
      if (first.in_place) Diverge(absl::StrCat("in-place round ", round, " without a last round"));
      return;
    }
    const Assignment& before = last->second.begin()->second;
    const bool same_store =
        first.master_addr == before.master_addr && first.master_port == before.master_port;
    if (!first.in_place) {
      if (same_store) {
        Diverge(absl::StrCat("round ", round, " starts on round ", max_round_, "'s store ",
                             first.master_addr, ":", first.master_port));
      }
      return;
    }
    if (!in_place_) Diverge(absl::StrCat("in-place round ", round, " for a run without it"));
    if (!same_store || first.node_count != before.node_count ||
        first.restart_count != before.restart_count) {
      Diverge(absl::StrCat("in-place round ", round, " changes the store, size or restart count"));
    }
  }

  FuzzedDataProvider* in_;
  bool in_place_ = false;
  int min_ = 1;
  int max_ = 1;
  int nproc_ = 1;
  int max_restarts_ = 0;
  int spare_nodes_ = 0;
  // The session each node's agent held when it was last assigned a round (or rejoined one).
  std::map<std::string, SessionId> member_session_;
  absl::Duration last_call_;
  absl::Duration join_timeout_;
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  std::unique_ptr<InMemoryRunStateBackend> backend_ = std::make_unique<InMemoryRunStateBackend>();
  RoundStateOptions options_;
  std::unique_ptr<RoundStateMachine> machine_;
  std::array<Agent, kAgents> agents_;
  SessionId next_session_ = 1;
  std::map<SessionId, int> owner_;
  std::set<SessionId> open_;
  // The current run's rounds as first assigned: round -> node id -> assignment.
  std::map<int64_t, std::map<std::string, Assignment>> rounds_;
  int64_t max_round_ = -1;
  bool finished_run_ = false;
  // The rounds assigned before the service lost the run.
  std::map<int64_t, std::map<std::string, Assignment>> before_restart_;
  // The node holding rank 0 in the newest round while its session lives.
  std::set<std::string> rank0_live_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool traced = std::getenv("DGT_FUZZ_TRACE") != nullptr;
  std::string events;
  trace = traced ? &events : nullptr;
  FuzzedDataProvider in(data, size);
  Harness harness(&in);
  harness.Run();
  return 0;
}
