// The RunStateBackend conformance suite (run_state_backend_suite.h).
#include "tests/rendezvous/run_state_backend_suite.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace dgt::rendezvous {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

// Records what a watch delivers; waits (bounded) for events that arrive on another thread.
class EventLog {
 public:
  std::function<void(const RunEvent&)> Callback() {
    return [this](const RunEvent& e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(e);
    };
  }
  // The events once there are at least `n`, or what arrived within 5 s.
  std::vector<RunEvent> Await(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] { return events_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5));
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<RunEvent> events_;
};

// A run with a value in every kind of field, so that a backend that drops or mangles one fails.
RunRecord SampleRun(const std::string& run_id) {
  RunRecord run;
  run.run_id = run_id;
  run.min_nodes = 2;
  run.max_nodes = 3;
  run.nproc_per_node = 4;
  run.max_restarts = 5;
  run.last_call_timeout = absl::Seconds(30);
  run.join_timeout = absl::Seconds(600);
  run.state = RunState::kRunning;
  NodeRecord node;
  node.node_id = "n1";
  node.session = 7;
  node.address = "10.0.0.1";
  node.nproc = 4;
  node.store_port = 29500;
  node.node_rank = 0;
  node.succeeded = true;
  node.last_contact = kT0;
  run.nodes.emplace("n1", node);
  node.node_id = "n2";
  node.node_rank = -1;
  node.succeeded = false;
  node.failed = true;
  run.nodes.emplace("n2", node);
  run.connected = 2;
  run.members = 1;
  run.succeeded = 1;
  run.round = 3;
  run.restart_count = 1;
  run.world_size = 4;
  run.master_addr = "10.0.0.1";
  run.master_port = 29500;
  run.last_call_deadline = kT0 + absl::Seconds(1);
  run.join_deadline = kT0 + absl::Seconds(2);
  run.scale_up_deadline = kT0 + absl::Seconds(3);
  WorkerFailure failure{3, 1, 134, 0, "n2", kT0 - absl::Milliseconds(250)};
  run.failures.push_back(failure);
  run.failure_messages.emplace_back("rank 3 exited with code 134");
  run.failure_deadline = kT0 + absl::Seconds(4);
  run.recovering = true;
  run.expected_members = 2;
  run.rank_rejoined = {true, false};
  run.rejoin_deadline = kT0 + absl::Seconds(5);
  run.deferred_restart = "node n2 failed";
  run.pending_reason = "scale-up";
  run.pending_restart_increment = 1;
  run.outcome = "failed: rank 3";
  run.finished = RunFinished{false, "rank 3", failure};
  run.closed_at = kT0 + absl::Seconds(6);
  return run;
}

TEST_P(RunStateBackendSuite, AnEmptyBackendHasNoRuns) {
  EXPECT_EQ(backend_->Find("job"), nullptr);
  EXPECT_EQ(backend_->RevisionOf("job"), 0);
  EXPECT_EQ(backend_->size(), 0u);
  int visited = 0;
  backend_->ForEach([&](const RunRecord&) { ++visited; });
  EXPECT_EQ(visited, 0);
  EXPECT_EQ(backend_->Mutable("job"), nullptr);
  EXPECT_EQ(backend_->Commit("job").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend_->Delete("job").code(), absl::StatusCode::kNotFound);
}

TEST_P(RunStateBackendSuite, CreateStagesARunAndCommitWritesItWhole) {
  absl::StatusOr<RunRecord*> created = backend_->Create("job");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->run_id, "job");
  **created = SampleRun("job");
  absl::StatusOr<Revision> revision = backend_->Commit("job");
  ASSERT_TRUE(revision.ok()) << revision.status();
  EXPECT_GT(*revision, 0);
  EXPECT_EQ(backend_->RevisionOf("job"), *revision);
  ASSERT_NE(backend_->Find("job"), nullptr);
  EXPECT_EQ(*backend_->Find("job"), SampleRun("job"));
  EXPECT_EQ(backend_->size(), 1u);
  absl::StatusOr<RunRecord*> again = backend_->Create("job");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "run 'job' already exists");
  // The refused create left the run as it was.
  EXPECT_EQ(*backend_->Find("job"), SampleRun("job"));
  EXPECT_EQ(backend_->RevisionOf("job"), *revision);
}

TEST_P(RunStateBackendSuite, EveryCommitGetsAHigherRevisionAcrossRuns) {
  ASSERT_TRUE(backend_->Create("a").ok());
  Revision a1 = backend_->Commit("a").value();
  ASSERT_TRUE(backend_->Create("b").ok());
  Revision b1 = backend_->Commit("b").value();
  RunRecord* a = backend_->Mutable("a");
  ASSERT_NE(a, nullptr);
  a->round = 7;
  Revision a2 = backend_->Commit("a").value();
  EXPECT_LT(a1, b1);
  EXPECT_LT(b1, a2);
  EXPECT_EQ(backend_->RevisionOf("a"), a2);
  EXPECT_EQ(backend_->RevisionOf("b"), b1);
  EXPECT_EQ(backend_->Find("a")->round, 7);
  EXPECT_EQ(backend_->Find("b")->round, -1);
}

TEST_P(RunStateBackendSuite, ForEachVisitsRunsInRunIdOrder) {
  for (const char* id : {"c", "a", "b"}) {
    ASSERT_TRUE(backend_->Create(id).ok());
    ASSERT_TRUE(backend_->Commit(id).ok());
  }
  std::vector<std::string> ids;
  backend_->ForEach([&](const RunRecord& run) { ids.push_back(run.run_id); });
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(backend_->size(), 3u);
}

TEST_P(RunStateBackendSuite, DeleteRemovesTheRun) {
  ASSERT_TRUE(backend_->Create("a").ok());
  ASSERT_TRUE(backend_->Commit("a").ok());
  ASSERT_TRUE(backend_->Create("b").ok());
  ASSERT_TRUE(backend_->Commit("b").ok());
  EXPECT_TRUE(backend_->Delete("a").ok());
  EXPECT_EQ(backend_->Find("a"), nullptr);
  EXPECT_EQ(backend_->RevisionOf("a"), 0);
  EXPECT_NE(backend_->Find("b"), nullptr);
  EXPECT_EQ(backend_->size(), 1u);
  EXPECT_EQ(backend_->Delete("a").message(), "no run 'a'");
  // The id is free again.
  EXPECT_TRUE(backend_->Create("a").ok());
}

TEST_P(RunStateBackendSuite, CompareAndPutWritesOnlyOverTheRevisionRead) {
  absl::StatusOr<Revision> first = backend_->CompareAndPut(SampleRun("job"), 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*backend_->Find("job"), SampleRun("job"));
  EXPECT_EQ(backend_->RevisionOf("job"), *first);

  // "Must not exist" fails once it exists.
  absl::StatusOr<Revision> create_again = backend_->CompareAndPut(SampleRun("job"), 0);
  EXPECT_EQ(create_again.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(create_again.status().message(),
            absl::StrCat("run 'job' is at revision ", *first, ", expected 0"));

  RunRecord changed = SampleRun("job");
  changed.round = 4;
  absl::StatusOr<Revision> second = backend_->CompareAndPut(changed, *first);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, *first);
  EXPECT_EQ(backend_->Find("job")->round, 4);

  // A writer that read the first revision lost the race: refused, nothing written.
  RunRecord stale = SampleRun("job");
  stale.round = 99;
  absl::StatusOr<Revision> lost = backend_->CompareAndPut(stale, *first);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(lost.status().message(),
            absl::StrCat("run 'job' is at revision ", *second, ", expected ", *first));
  EXPECT_EQ(backend_->Find("job")->round, 4);
  EXPECT_EQ(backend_->RevisionOf("job"), *second);

  // A staged commit moves the revision too: a CAS over the older one fails.
  backend_->Mutable("job")->round = 5;
  Revision third = backend_->Commit("job").value();
  EXPECT_EQ(backend_->CompareAndPut(changed, *second).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(backend_->RevisionOf("job"), third);
  EXPECT_EQ(backend_->Find("job")->round, 5);
}

TEST_P(RunStateBackendSuite, CompareAndDeleteDeletesOnlyAtTheRevisionRead) {
  Revision r1 = backend_->CompareAndPut(SampleRun("job"), 0).value();
  RunRecord changed = SampleRun("job");
  changed.round = 4;
  Revision r2 = backend_->CompareAndPut(changed, r1).value();
  absl::Status stale = backend_->CompareAndDelete("job", r1);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(stale.message(), absl::StrCat("run 'job' is at revision ", r2, ", expected ", r1));
  EXPECT_NE(backend_->Find("job"), nullptr);
  EXPECT_TRUE(backend_->CompareAndDelete("job", r2).ok());
  EXPECT_EQ(backend_->Find("job"), nullptr);
  EXPECT_EQ(backend_->CompareAndDelete("job", r2).code(), absl::StatusCode::kNotFound);
}

TEST_P(RunStateBackendSuite, WatchDeliversEveryChangeInRevisionOrderUntilCancelled) {
  EventLog log;
  WatchId watch = backend_->Watch(log.Callback());
  ASSERT_TRUE(backend_->Create("a").ok());
  Revision put1 = backend_->Commit("a").value();
  RunRecord b = SampleRun("b");
  Revision put2 = backend_->CompareAndPut(b, 0).value();
  ASSERT_TRUE(backend_->Delete("a").ok());
  std::vector<RunEvent> events = log.Await(3);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], (RunEvent{RunEvent::Type::kPut, "a", put1}));
  EXPECT_EQ(events[1], (RunEvent{RunEvent::Type::kPut, "b", put2}));
  EXPECT_EQ(events[2].type, RunEvent::Type::kDelete);
  EXPECT_EQ(events[2].run_id, "a");
  EXPECT_GT(events[2].revision, put2);

  backend_->CancelWatch(watch);
  backend_->Mutable("b")->round = 9;
  ASSERT_TRUE(backend_->Commit("b").ok());
  // Nothing more arrives: wait a moment for a late delivery, then check.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.Await(0).size(), 3u);
}

TEST_P(RunStateBackendSuite, ARunPutWithALeaseEndsWithTheLease) {
  const bool own_clock = GetParam().leases_on_own_clock;
  const absl::Duration ttl = absl::Seconds(own_clock ? 2 : 10);
  absl::Time now = own_clock ? absl::Now() : kT0;
  EXPECT_EQ(backend_->GrantLease(absl::ZeroDuration(), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->GrantLease(absl::ZeroDuration(), now).status().message(),
            "lease ttl must be > 0, got 0");
  absl::StatusOr<LeaseId> lease = backend_->GrantLease(ttl, now);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_NE(*lease, kNoLease);
  ASSERT_TRUE(backend_->CompareAndPut(SampleRun("leased"), 0, *lease).ok());
  ASSERT_TRUE(backend_->CompareAndPut(SampleRun("kept"), 0).ok());
  EventLog log;
  backend_->Watch(log.Callback());

  // Renewed half-way: still there after the first ttl has passed.
  if (own_clock) std::this_thread::sleep_for(absl::ToChronoMilliseconds(ttl / 2));
  now += ttl / 2;
  EXPECT_TRUE(backend_->KeepAlive(*lease, now).ok());
  if (own_clock) std::this_thread::sleep_for(absl::ToChronoMilliseconds(ttl * 3 / 4));
  now += ttl * 3 / 4;
  backend_->ExpireLeases(now);
  EXPECT_NE(backend_->Find("leased"), nullptr);

  // Not renewed: the lease ends and takes its run with it, and only that run.
  if (own_clock) std::this_thread::sleep_for(absl::ToChronoMilliseconds(ttl));
  now += ttl;
  backend_->ExpireLeases(now);
  std::vector<RunEvent> events = log.Await(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, RunEvent::Type::kDelete);
  EXPECT_EQ(events[0].run_id, "leased");
  EXPECT_EQ(backend_->Find("leased"), nullptr);
  EXPECT_NE(backend_->Find("kept"), nullptr);
  absl::Status renew = backend_->KeepAlive(*lease, now);
  EXPECT_EQ(renew.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(renew.message(), absl::StrCat("lease ", *lease, " does not exist (expired?)"));
  EXPECT_EQ(backend_->CompareAndPut(SampleRun("late"), 0, *lease).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(backend_->Find("late"), nullptr);
}

TEST_P(RunStateBackendSuite, RevokingALeaseDeletesItsRunsAtOnce) {
  const absl::Time now = GetParam().leases_on_own_clock ? absl::Now() : kT0;
  LeaseId one = backend_->GrantLease(absl::Seconds(60), now).value();
  LeaseId two = backend_->GrantLease(absl::Seconds(60), now).value();
  EXPECT_NE(one, two);
  ASSERT_TRUE(backend_->CompareAndPut(SampleRun("a"), 0, one).ok());
  ASSERT_TRUE(backend_->CompareAndPut(SampleRun("b"), 0, one).ok());
  ASSERT_TRUE(backend_->CompareAndPut(SampleRun("c"), 0, two).ok());
  EXPECT_TRUE(backend_->RevokeLease(one).ok());
  EXPECT_EQ(backend_->Find("a"), nullptr);
  EXPECT_EQ(backend_->Find("b"), nullptr);
  EXPECT_NE(backend_->Find("c"), nullptr);
  EXPECT_EQ(backend_->RevokeLease(one).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(backend_->KeepAlive(two, now).ok());
}

}  // namespace
}  // namespace dgt::rendezvous
