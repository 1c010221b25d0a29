// dgt::worker::ElasticGroup — a trainer's process group that survives the loss of a rank without
// restarting the survivors ("in-place recovery", used with dgt-run's `--restart-policy rank`).
//
// Generations. Every communicator belongs to a generation G (0 at job start). When a rank dies,
// generation G+1 is opened in the store, by whoever notices first: the agent that saw the exit
// (PublishRankFailure), a survivor whose collective failed (Recover), or the replacement process
// at start-up. Survivors' watcher threads see the opening and abort their generation-G
// communicator, so a collective blocked on the dead rank returns at once. The trainer then calls
// Recover(), which builds generation G+1:
//   - RecoveryMode::kReplace: the same world size; the replacement (same RANK, started by the
//     agent with TORCHELASTIC_RESTART_COUNT+1) joins with its rank;
//   - RecoveryMode::kShrink: the survivors only, renumbered in their original rank order; the
//     failed ranks come from the failure report (or, without one by report_timeout, from who
//     joined). A factory that CanShrink() (NCCL >= 2.27 with keep_for_shrink) shrinks the
//     current communicator in place (ncclCommShrink) instead of bootstrapping a new one.
// Every wait has a deadline (Options). The protocol's store keys are in recovery_keys.h.
//
// Thread-safety: one trainer thread calls the methods; the watcher thread is internal.
#ifndef DGT_WORKER_ELASTIC_GROUP_H_
#define DGT_WORKER_ELASTIC_GROUP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dgt/store/store.h"
#include "dgt/worker/communicator.h"
#include "dgt/worker/context.h"

namespace dgt::worker {

enum class RecoveryMode { kReplace, kShrink };

// Opens a new connection to the job's store (the watcher needs its own, because a client
// serialises calls over one connection).
using StoreConnector = std::function<absl::StatusOr<std::unique_ptr<store::Store>>()>;

// A StoreConnector for MASTER_ADDR:MASTER_PORT (dgt::store::Client, torch 2.x protocol).
StoreConnector ConnectToJobStore(const Context& context,
                                 absl::Duration timeout = absl::Seconds(60));

struct ElasticGroupOptions {
  RecoveryMode mode = RecoveryMode::kReplace;
  // Group name: keys of different groups of one job do not collide.
  std::string group = "world";
  // Bootstrap deadline of each generation (every member joined and connected).
  absl::Duration init_timeout = absl::Seconds(60);
  // Deadline of one collective.
  absl::Duration op_timeout = absl::Seconds(300);
  // Shrink mode: how long to wait for the failure report naming the lost ranks.
  absl::Duration report_timeout = absl::Seconds(5);
  // Join(): generations tried when one does not form by init_timeout.
  int join_attempts = 3;
  // How often the watcher re-arms its store wait (bounds how long destruction takes, and how
  // long a bootstrap that failed takes to return; a successful one does not wait for it).
  absl::Duration watch_period = absl::Milliseconds(500);
};

// When the steps of the last Join() or Recover() happened (wall clock), for benchmarks and
// logs. A step that did not happen is absl::InfinitePast().
struct BuildTimeline {
  absl::Time noticed = absl::InfinitePast();    // The watcher saw the next generation open.
  absl::Time started = absl::InfinitePast();    // Join()/Recover() was called.
  absl::Time connected = absl::InfinitePast();  // Join(): the store connections were open.
  absl::Time opened = absl::InfinitePast();     // The generation to build was known.
  absl::Time bootstrap = absl::InfinitePast();  // The communicator's bootstrap began.
  absl::Time built = absl::InfinitePast();      // The communicator was ready.
};

class ElasticGroup {
 public:
  // Joins the job: generation 0 for a fresh start; for a process whose rank was a member before
  // (a replacement, or after a group restart against the same store), the generation after the
  // one its predecessor last joined (or the current one, if the others moved further). Blocks
  // until that generation's communicator is built; a generation that does not form by
  // init_timeout is left for the next one, up to join_attempts generations.
  // Errors: those of CommunicatorFactory::Create and of the store.
  static absl::StatusOr<std::unique_ptr<ElasticGroup>> Join(const Context& context,
                                                            const StoreConnector& connect,
                                                            CommunicatorFactory& factory,
                                                            ElasticGroupOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The current generation's communicator (valid until the next Recover()). Only valid while
  // ready(): after a failed Recover() there is none until a Recover() succeeds.
  Communicator& comm() { return *comm_; }
  bool ready() const { return comm_ != nullptr; }
  // The generation last built (or being built).
  int generation() const { return current_; }
  // This process's RANK from the env contract (kept across generations, also when shrinking).
  int original_rank() const { return context_.rank; }
  // Original ranks of the current members, in communicator rank order.
  const std::vector<int>& members() const { return members_; }
  // True when this process joined as a replacement (its rank was a member before).
  bool is_replacement() const { return replacement_; }
  // True once another generation was opened (the communicator is then aborted).
  bool recovery_pending() const { return pending_.load(); }

  // Aborts the current communicator, opens the next generation (unless someone did already) and
  // builds its communicator. Returns it (also available as comm()).
  // Errors: DeadlineExceeded when the members did not all join by init_timeout (call again to
  // try the generation after); FailedPrecondition in shrink mode when this process was reported
  // failed.
  absl::StatusOr<Communicator*> Recover();

  // The steps of the last Join() or Recover() (trainer thread only).
  BuildTimeline last_build() const;

 private:
  ElasticGroup(const Context& context, std::unique_ptr<store::Store> store,
               std::unique_ptr<store::Store> watch_store, CommunicatorFactory& factory,
               ElasticGroupOptions options);
  // Makes `members` generation `target`: with `ready` (a shrunk communicator) as is, else through
  // a new bootstrap.
  absl::Status Build(int target, std::vector<int> members,
                     std::unique_ptr<Communicator> ready = nullptr);
  CommunicatorOptions OptionsFor(int target, const std::vector<int>& members) const;
  absl::StatusOr<std::vector<int>> ShrinkMembers(int target);
  // Watches for generation `next` to open; then sets recovery_pending() and calls on_open(why)
  // in the watcher thread.
  void StartWatcher(int next, std::function<void(const std::string&)> on_open);
  // Joins the watcher: up to watch_period when its store wait has not ended.
  void StopWatcher();
  // Replaces what the running watcher does when its generation opens, and clears
  // recovery_pending(); false (nothing changed) when the watcher already fired.
  bool SwapWatchAction(std::function<void(const std::string&)> on_open);

  const Context context_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::Store> watch_store_;
  CommunicatorFactory& factory_;
  const ElasticGroupOptions options_;
  std::unique_ptr<Communicator> comm_;
  std::vector<int> members_;
  bool replacement_ = false;
  int current_ = 0;  // The generation last built (or attempted).
  std::atomic<bool> pending_{false};
  BuildTimeline timeline_;              // Owned by the trainer thread.
  std::atomic<int64_t> noticed_ns_{0};  // Set by the watcher; 0: not yet.
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
  // std::mutex, not dgt::Mutex: this header is installed without dgt's common headers.
  std::mutex watch_mu_;
  std::function<void(const std::string&)> on_open_;  // Guarded by watch_mu_.
  bool fired_ = false;                               // Guarded by watch_mu_.
};

}  // namespace dgt::worker

#endif  // DGT_WORKER_ELASTIC_GROUP_H_
