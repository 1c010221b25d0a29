#include "dgt/worker/elastic_group.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "dgt/store/client.h"
#include "dgt/worker/recovery_keys.h"

namespace dgt::worker {

StoreConnector ConnectToJobStore(const Context& context, absl::Duration timeout) {
  store::ClientOptions o;
  o.host = context.master_addr;
  o.port = context.master_port;
  o.timeout = timeout;
  return [o]() -> absl::StatusOr<std::unique_ptr<store::Store>> {
    DGT_ASSIGN_OR_RETURN(auto client, store::Client::Connect(o));
    return std::unique_ptr<store::Store>(std::move(client));
  };
}

ElasticGroup::ElasticGroup(const Context& context, std::unique_ptr<store::Store> store,
                           std::unique_ptr<store::Store> watch_store, CommunicatorFactory& factory,
                           ElasticGroupOptions options)
    : context_(context),
      store_(std::move(store)),
      watch_store_(std::move(watch_store)),
      factory_(factory),
      options_(std::move(options)) {}

ElasticGroup::~ElasticGroup() { StopWatcher(); }

absl::StatusOr<std::unique_ptr<ElasticGroup>> ElasticGroup::Join(const Context& context,
                                                                 const StoreConnector& connect,
                                                                 CommunicatorFactory& factory,
                                                                 ElasticGroupOptions options) {
  const absl::Time started = absl::Now();
  DGT_ASSIGN_OR_RETURN(auto store, connect());
  DGT_ASSIGN_OR_RETURN(auto watch_store, connect());
  std::unique_ptr<ElasticGroup> g(new ElasticGroup(
      context, std::move(store), std::move(watch_store), factory, std::move(options)));
  g->timeline_.started = started;
  g->timeline_.connected = absl::Now();
  const std::string& group = g->options_.group;
  const std::string member_key = recovery::MemberKey(group, context.rank);
  DGT_ASSIGN_OR_RETURN(bool was_member, g->store_->Check({member_key}));
  int target = 0;
  if (was_member) {
    // A replacement: the generation its predecessor was in is over.
    DGT_ASSIGN_OR_RETURN(std::string v, g->store_->Get(member_key));
    int previous = 0;
    if (!absl::SimpleAtoi(v, &previous)) {
      return absl::InternalError(absl::StrCat("store key ", member_key, " holds '", v, "'"));
    }
    g->replacement_ = true;
    DGT_ASSIGN_OR_RETURN(target,
                         recovery::OpenNextGeneration(
                             *g->store_, group, previous,
                             absl::StrCat("rank ", context.rank, " replaced (restart count ",
                                          context.generation, ")")));
  } else {
    const std::string gen_key = recovery::GenerationKey(group);
    DGT_ASSIGN_OR_RETURN(bool started, g->store_->Check({gen_key}));
    if (started) {
      DGT_ASSIGN_OR_RETURN(std::string v, g->store_->Get(gen_key));
      if (!absl::SimpleAtoi(v, &target)) target = 0;
    }
  }
  std::vector<int> all(context.world_size);
  for (int r = 0; r < context.world_size; ++r) all[r] = r;
  g->timeline_.opened = absl::Now();
  spdlog::info("rank {}: joining generation {}{}", context.rank, target,
               g->replacement_ ? " as a replacement" : "");
  for (int attempt = 1;; ++attempt) {
    absl::Status s = g->Build(target, all);
    if (s.ok()) break;
    // Not everyone came (e.g. the others gave up on this generation and moved on), or a newer
    // generation was opened while this one formed (Aborted): try the generation after, which is
    // where everyone converges (each joins max(current, from+1)). An abandoned generation does
    // not count as an attempt: that only happens when another generation was opened.
    const bool abandoned = s.code() == absl::StatusCode::kAborted && g->recovery_pending();
    if (abandoned) --attempt;
    if ((s.code() != absl::StatusCode::kDeadlineExceeded && !abandoned) ||
        attempt >= g->options_.join_attempts) {
      return s;
    }
    spdlog::warn("rank {}: generation {} did not form ({}); trying the next", context.rank, target,
                 s.message());
    DGT_ASSIGN_OR_RETURN(
        target, recovery::OpenNextGeneration(*g->store_, group, target,
                                             absl::StrCat("rank ", context.rank, " retried")));
  }
  return g;
}

CommunicatorOptions ElasticGroup::OptionsFor(int target, const std::vector<int>& members) const {
  CommunicatorOptions co;
  co.rank =
      static_cast<int>(std::find(members.begin(), members.end(), context_.rank) - members.begin());
  co.size = static_cast<int>(members.size());
  co.generation = target;
  co.key_prefix = CommKeyPrefix(options_.group, target);
  co.init_timeout = options_.init_timeout;
  co.op_timeout = options_.op_timeout;
  return co;
}

absl::Status ElasticGroup::Build(int target, std::vector<int> members,
                                 std::unique_ptr<Communicator> ready) {
  StopWatcher();
  comm_.reset();
  current_ = target;
  if (std::find(members.begin(), members.end(), context_.rank) == members.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", context_.rank, " is not a member of generation ", target, " (reported failed)"));
  }
  DGT_RETURN_IF_ERROR(
      store_->Set(recovery::MemberKey(options_.group, context_.rank), absl::StrCat(target)));
  timeline_.bootstrap = absl::Now();
  if (ready != nullptr) {
    comm_ = std::move(ready);
    pending_ = false;
    noticed_ns_ = 0;
    Communicator* comm = comm_.get();
    StartWatcher(comm->generation() + 1, [comm](const std::string& why) { comm->Abort(why); });
  } else {
    // Generation target+1 may open while this one forms (a member died after joining it): the
    // watcher then cancels the bootstrap, which would otherwise wait for the dead member.
    CommunicatorOptions co = OptionsFor(target, members);
    co.cancel = std::make_shared<BootstrapCancel>();
    StartWatcher(target + 1, [cancel = co.cancel](const std::string& why) { cancel->Cancel(why); });
    auto created = factory_.Create(*store_, co);
    // The built communicator's watcher is this one (same key, target + 1): only its action
    // changes. Stopping and restarting it would wait for its store wait to end, up to
    // watch_period (200 ms in the trainer) on every build.
    if (created.ok()) {
      Communicator* comm = created->get();
      if (!SwapWatchAction([comm](const std::string& why) { comm->Abort(why); })) {
        created = absl::AbortedError(
            absl::StrCat("generation ", target, " abandoned: ", co.cancel->reason()));
      }
    }
    if (!created.ok()) {
      StopWatcher();
      spdlog::warn("rank {}: generation {} did not form: {}", context_.rank, target,
                   created.status().ToString());
      return created.status();
    }
    comm_ = std::move(*created);
  }
  timeline_.built = absl::Now();
  members_ = std::move(members);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ElasticGroup::ShrinkMembers(int target) {
  std::set<int> failed;
  const std::string failed_key = recovery::FailedKey(options_.group, target);
  absl::Status report = store_->Wait({failed_key}, options_.report_timeout);
  if (report.ok()) {
    DGT_ASSIGN_OR_RETURN(std::string v, store_->Get(failed_key));
    for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
      int r = 0;
      if (absl::SimpleAtoi(part, &r)) failed.insert(r);
    }
  } else if (report.code() == absl::StatusCode::kDeadlineExceeded) {
    // No report: the members are who announced themselves alive by now.
    for (int m : members_) {
      DGT_ASSIGN_OR_RETURN(bool alive,
                           store_->Check({recovery::AliveKey(options_.group, target, m)}));
      if (!alive) failed.insert(m);
    }
    spdlog::warn("rank {}: no failure report for generation {} in {}; shrinking by who joined",
                 context_.rank, target, absl::FormatDuration(options_.report_timeout));
  } else {
    return report;
  }
  std::vector<int> out;
  for (int m : members_) {
    if (!failed.count(m)) out.push_back(m);
  }
  return out;
}

BuildTimeline ElasticGroup::last_build() const { return timeline_; }

absl::StatusOr<Communicator*> ElasticGroup::Recover() {
  const int from = current_;
  timeline_ = BuildTimeline{};
  timeline_.started = absl::Now();
  if (const int64_t noticed = noticed_ns_.load(); noticed != 0) {
    timeline_.noticed = absl::FromUnixNanos(noticed);
  }
  if (comm_) comm_->Abort("recovering");
  DGT_ASSIGN_OR_RETURN(int target,
                       recovery::OpenNextGeneration(
                           *store_, options_.group, from,
                           absl::StrCat("rank ", context_.rank, " left generation ", from)));
  timeline_.opened = absl::Now();
  DGT_RETURN_IF_ERROR(store_->Set(recovery::AliveKey(options_.group, target, context_.rank), "1"));
  std::vector<int> members;
  if (options_.mode == RecoveryMode::kShrink) {
    DGT_ASSIGN_OR_RETURN(members, ShrinkMembers(target));
  } else {
    members.resize(context_.world_size);
    for (int r = 0; r < context_.world_size; ++r) members[r] = r;
  }
  spdlog::info("rank {}: rebuilding at generation {} with {} ranks", context_.rank, target,
               members.size());
  std::unique_ptr<Communicator> shrunk;
  if (options_.mode == RecoveryMode::kShrink && comm_ != nullptr && factory_.CanShrink() &&
      std::find(members.begin(), members.end(), context_.rank) != members.end()) {
    std::vector<int> exclude;  // In the current communicator's numbering.
    for (size_t i = 0; i < members_.size(); ++i) {
      if (std::find(members.begin(), members.end(), members_[i]) == members.end()) {
        exclude.push_back(static_cast<int>(i));
      }
    }
    auto s = factory_.Shrink(*comm_, exclude, OptionsFor(target, members));
    if (s.ok()) {
      shrunk = std::move(*s);
    } else {
      spdlog::warn("rank {}: in-place shrink failed ({}); bootstrapping generation {} instead",
                   context_.rank, s.status().ToString(), target);
    }
  }
  DGT_RETURN_IF_ERROR(Build(target, std::move(members), std::move(shrunk)));
  return comm_.get();
}

void ElasticGroup::StartWatcher(int next, std::function<void(const std::string&)> on_open) {
  stop_watch_ = false;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    on_open_ = std::move(on_open);
    fired_ = false;
  }
  watcher_ = std::thread([this, next] {
    const std::string key = recovery::OpenKey(options_.group, next);
    while (!stop_watch_.load()) {
      absl::Status s = watch_store_->Wait({key}, options_.watch_period);
      if (s.ok()) {
        // Under the lock: the action runs entirely before or after a SwapWatchAction().
        std::lock_guard<std::mutex> lock(watch_mu_);
        fired_ = true;
        noticed_ns_ = absl::ToUnixNanos(absl::Now());
        pending_ = true;
        on_open_(absl::StrCat("generation ", next, " was opened"));
        return;
      }
      if (s.code() != absl::StatusCode::kDeadlineExceeded) {
        spdlog::warn("rank {}: recovery watcher: {}", context_.rank, s.ToString());
        absl::SleepFor(options_.watch_period);
      }
    }
  });
}

void ElasticGroup::StopWatcher() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
}

bool ElasticGroup::SwapWatchAction(std::function<void(const std::string&)> on_open) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (fired_) return false;
  on_open_ = std::move(on_open);
  pending_ = false;
  noticed_ns_ = 0;
  return true;
}

}  // namespace dgt::worker
