// Where the rendezvous keeps its run state, behind one interface so that several stateless
// dgt-rendezvous replicas can later share it (an etcd v3 backend) while a single
// service keeps it in memory (InMemoryRunStateBackend, the embedded default).
//
// What is stored: one RunRecord per run id — the run's parameters (--nnodes, --nproc-per-node,
// --max-restarts, timeouts), its phase and round, the master address and port, its deadlines
// (absolute wall-clock times), pending decisions, its outcome, and one NodeRecord per node
// (address, store port, node rank, this round's report). The record is the unit of
// consistency: every decision about a run (admit a node, assign ranks, start a round, end the
// run) reads one record and writes it back whole. Which session (agent stream) a node holds is
// in the record (NodeRecord::session), but sessions themselves are the serving replica's: a
// session id means nothing to another replica.
//
// Consistency required: linearizable per run. A write commits only if the run is unchanged since
// the caller read it (compare-and-swap on the run's revision), so two replicas can never both
// assign a rank, admit the last node under MAX, or hand out node rank 0's store. Nothing is
// required across runs.
//
// How the interface maps onto etcd v3 (the next backend):
// - Revision: the run's ModRevision (etcd's store revision at the run's last write); revisions
//   grow across the whole backend, 0 means "absent".
// - Mutable + Commit, CompareAndPut, CompareAndDelete: one Txn each, compare
//   mod_revision(run key) == the revision read, then put (or delete); a failed compare is
//   Aborted and the replica refreshes its view and handles the event again.
// - Leases: etcd leases (LeaseGrant / LeaseKeepAlive / LeaseRevoke); a run put with a lease is
//   deleted when the lease ends, as etcd deletes a key attached to an expired lease. A replica's
//   own lease carries its liveness; node liveness is the session the replica holds.
// - Watch: one etcd Watch on the runs' key prefix; each replica applies the events to the local
//   view its reads (Find, ForEach) are served from, and to its sessions.
// The in-memory backend is the single-replica case of the same contract: it never conflicts,
// and its leases run on the `now` the caller passes (etcd's on the etcd leader's clock).
//
// Thread-compatible: the caller serialises calls (RendezvousService under its mutex).
#ifndef DGT_RENDEZVOUS_RUN_STATE_BACKEND_H_
#define DGT_RENDEZVOUS_RUN_STATE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rendezvous/types.h"

namespace dgt::rendezvous {

// One node of a run, waiting or a member of the current round.
struct NodeRecord {
  std::string node_id;
  SessionId session = 0;  // 0 while no agent stream holds the node.
  std::string address;
  int32_t nproc = 0;
  int32_t store_port = 0;  // A store never used for a round; 0 while the agent opens one.
  int32_t node_rank = -1;  // In the current round; -1 while waiting.
  bool succeeded = false;  // Reported success for the current round.
  bool failed = false;     // Reported a failure for the current round (counted once).
  absl::Time last_contact;

  friend bool operator==(const NodeRecord&, const NodeRecord&) = default;
};

// Everything the rendezvous knows about one run (round_state.h describes the semantics).
struct RunRecord {
  std::string run_id;
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  int32_t nproc_per_node = 0;
  int32_t max_restarts = 0;
  // Waiting nodes held as hot spares: up to this many never cause a scale-up (--spare-nodes).
  int32_t spare_nodes = 0;
  // A member lost with a spare to take its place becomes an in-place round: the survivors keep
  // their workers (JoinRequest.in_place_spares).
  bool in_place_spares = false;
  absl::Duration last_call_timeout;
  absl::Duration join_timeout;
  RunState state = RunState::kGathering;
  std::map<std::string, NodeRecord> nodes;  // By node id: members and waiting nodes.
  // Kept in step with `nodes` so that a join or report costs O(log n), not O(n): a round of
  // N nodes must not cost N^2.
  int32_t connected = 0;  // Nodes with a session.
  int32_t members = 0;    // Nodes with a rank (node_rank >= 0).
  int32_t succeeded = 0;  // Members that reported success for the current round.
  int64_t round = -1;
  int32_t restart_count = 0;
  int32_t world_size = 0;
  std::string master_addr;
  int32_t master_port = 0;
  // kGathering: close at MIN once this passes.
  std::optional<absl::Time> last_call_deadline;
  // kGathering after a loss below MIN: fail the run once this passes.
  std::optional<absl::Time> join_deadline;
  // kRunning with waiting nodes and room: scale up once this passes.
  std::optional<absl::Time> scale_up_deadline;
  // Failures reported in the current round (no restart left), and when to end the run.
  std::vector<WorkerFailure> failures;
  std::vector<std::string> failure_messages;
  std::optional<absl::Time> failure_deadline;
  // Re-created from rejoins after the service restarted: `expected_members` nodes ran the
  // round; until all of them rejoined (or rejoin_deadline passes) the run neither ends with
  // success nor scales up.
  bool recovering = false;
  int32_t expected_members = 0;
  std::vector<bool> rank_rejoined;  // By node rank, while recovering.
  std::optional<absl::Time> rejoin_deadline;
  // A failure reported while recovering, with restarts left: the restart round waits for the
  // recovery to end (all rejoined, or the window passed), so that it includes every node that
  // rejoins rather than only those that came back first. The report's text.
  std::optional<std::string> deferred_restart;
  // A round decided but held until node rank 0 has a fresh store port.
  std::optional<std::string> pending_reason;
  int32_t pending_restart_increment = 0;
  std::string outcome;
  // What every member was told when the run ended (kClosed).
  RunFinished finished;
  absl::Time closed_at;

  friend bool operator==(const RunRecord&, const RunRecord&) = default;
};

// A run's version: the backend-wide revision of its last write; 0 for a run that does not exist.
using Revision = int64_t;
// A lease id; kNoLease for a record that lives until it is deleted.
using LeaseId = int64_t;
inline constexpr LeaseId kNoLease = 0;

// A change to a run, as a watch delivers it.
struct RunEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string run_id;
  Revision revision = 0;  // Of the put, or the backend's revision at the delete.

  friend bool operator==(const RunEvent&, const RunEvent&) = default;
};

using WatchId = int64_t;

class RunStateBackend {
 public:
  virtual ~RunStateBackend() = default;

  // --- Reads, from this replica's view of the runs (in memory: the runs themselves; etcd: the
  // cache its watch keeps current).

  // The run (one this replica staged and has not committed yet included), or nullptr. Valid
  // until the next write.
  virtual const RunRecord* Find(absl::string_view run_id) const = 0;
  // The run's revision; 0 when it does not exist.
  virtual Revision RevisionOf(absl::string_view run_id) const = 0;
  // Every run, in run-id order. `fn` must not write to the backend.
  virtual void ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const = 0;
  virtual size_t size() const = 0;

  // --- Writes of the event being handled: Create or Mutable stage a run, Commit writes it.

  // Stages a new run with this id (every other field default) and returns it for the caller to
  // fill; Commit writes it. Errors: AlreadyExists when the run exists.
  virtual absl::StatusOr<RunRecord*> Create(absl::string_view run_id) = 0;
  // Stages the run for a change and returns it; nullptr when it does not exist. Commit writes
  // the change. In memory this is the stored record itself (no copy).
  virtual RunRecord* Mutable(absl::string_view run_id) = 0;
  // Writes the staged run if no other writer changed it since it was read (compare-and-swap on
  // its revision); returns the new revision and tells the watchers. Errors: NotFound when
  // nothing is staged for `run_id`; Aborted when another writer won (the stage is dropped, the
  // view refreshed; the caller handles its event again). In memory it never aborts.
  virtual absl::StatusOr<Revision> Commit(absl::string_view run_id) = 0;
  // Deletes the run (staged or not) and tells the watchers. Errors: NotFound.
  virtual absl::Status Delete(absl::string_view run_id) = 0;

  // --- Whole-record compare-and-swap, for writers that hold no stage (another replica's
  // takeover of a run, tools).

  // Writes `run` (keyed by run.run_id) if its revision is still `expected` (0: the run must not
  // exist), attached to `lease` (kNoLease: none). Returns the new revision. Errors: Aborted when
  // the revision differs (the message names both); NotFound for an unknown lease.
  virtual absl::StatusOr<Revision> CompareAndPut(const RunRecord& run, Revision expected,
                                                 LeaseId lease = kNoLease) = 0;
  // Deletes the run if its revision is still `expected`. Errors: Aborted when it differs,
  // NotFound when the run does not exist.
  virtual absl::Status CompareAndDelete(absl::string_view run_id, Revision expected) = 0;

  // --- Leases. `now` is the caller's clock; a backend whose leases run on their own clock
  // (etcd) ignores it.

  // A lease that ends `ttl` after its last keepalive. Errors: InvalidArgument for ttl <= 0.
  virtual absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl, absl::Time now) = 0;
  // Renews the lease for another ttl from `now`. Errors: NotFound when it ended (expired or
  // revoked).
  virtual absl::Status KeepAlive(LeaseId lease, absl::Time now) = 0;
  // Ends the lease at once and deletes the runs attached to it. Errors: NotFound.
  virtual absl::Status RevokeLease(LeaseId lease) = 0;
  // Ends every lease not renewed within its ttl before `now`, deleting the runs attached to it.
  virtual void ExpireLeases(absl::Time now) = 0;

  // --- Watches.

  // Calls `fn` for every later put (Commit, CompareAndPut) and delete, in revision order, after
  // the change is visible to reads. In memory: synchronously, on the writer's thread; `fn` must
  // not write to the backend.
  virtual WatchId Watch(std::function<void(const RunEvent&)> fn) = 0;
  virtual void CancelWatch(WatchId id) = 0;

  // --- Limits.

  // Whether a run of `nodes` nodes whose ids and addresses are as long as these fits one write
  // of this backend: a round start rewrites every node in one commit. OkStatus when it does
  // (always, in memory). Errors: InvalidArgument naming the limit and the most nodes that fit.
  virtual absl::Status CheckRunFits(int64_t nodes, absl::string_view node_id,
                                    absl::string_view address) const {
    (void)nodes;
    (void)node_id;
    (void)address;
    return absl::OkStatus();
  }

  // --- Replicas taking over (docs/ETCD.md, "Replicas").

  // Drops every stage not committed (an event whose commit failed: nothing of it may be written
  // later). In memory stages are the records themselves: nothing to drop.
  virtual void DiscardStages() {}
  // Re-reads every run from the store into the view, so that a replica that just became the
  // leader decides on what the last leader committed, not on a view its watch may not have
  // brought up to date yet. In memory: nothing to do. Errors: the store's (etcd: UNAVAILABLE
  // naming the endpoints).
  virtual absl::Status Reload() { return absl::OkStatus(); }
};

// The embedded default: runs in a std::map, revisions from a counter, leases on the caller's
// clock, watches called inline. Never aborts a commit (one writer).
class InMemoryRunStateBackend final : public RunStateBackend {
 public:
  InMemoryRunStateBackend() = default;

  const RunRecord* Find(absl::string_view run_id) const override;
  Revision RevisionOf(absl::string_view run_id) const override;
  void ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const override;
  size_t size() const override { return runs_.size(); }

  absl::StatusOr<RunRecord*> Create(absl::string_view run_id) override;
  RunRecord* Mutable(absl::string_view run_id) override;
  absl::StatusOr<Revision> Commit(absl::string_view run_id) override;
  absl::Status Delete(absl::string_view run_id) override;

  absl::StatusOr<Revision> CompareAndPut(const RunRecord& run, Revision expected,
                                         LeaseId lease = kNoLease) override;
  absl::Status CompareAndDelete(absl::string_view run_id, Revision expected) override;

  absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl, absl::Time now) override;
  absl::Status KeepAlive(LeaseId lease, absl::Time now) override;
  absl::Status RevokeLease(LeaseId lease) override;
  void ExpireLeases(absl::Time now) override;

  WatchId Watch(std::function<void(const RunEvent&)> fn) override;
  void CancelWatch(WatchId id) override;

 private:
  struct Entry {
    RunRecord run;
    Revision revision = 0;  // 0 while created and not yet committed.
    LeaseId lease = kNoLease;
  };
  struct Lease {
    absl::Duration ttl;
    absl::Time expires;
  };

  void Notify(const RunEvent& event);
  // Deletes the runs attached to `lease` and forgets it.
  void EndLease(LeaseId lease);

  std::map<std::string, Entry, std::less<>> runs_;
  Revision revision_ = 0;
  absl::flat_hash_map<LeaseId, Lease> leases_;
  LeaseId next_lease_ = 1;
  std::map<WatchId, std::function<void(const RunEvent&)>> watches_;
  WatchId next_watch_ = 1;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_RUN_STATE_BACKEND_H_
