// EtcdRunStateBackend (rendezvous/etcd_run_state_backend.h) on a real three-member etcd cluster on
// loopback (EtcdCluster). It runs the RunStateBackend conformance suite, each test on a fresh key
// prefix of one cluster shared by the suite. On a cluster of its own, it kills the etcd leader
// between two commits (the next commit succeeds or fails cleanly within a bound, never written
// twice) and stops every member (UNAVAILABLE naming the endpoints, then the backend carries on
// once they return). Skipped when no etcd binary is installed, except under CI=true, where that
// fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "rendezvous/etcd_run_state_backend.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/rendezvous/run_state_backend_suite.h"

namespace dgt::rendezvous {
namespace {

using etcd::testing::EtcdCluster;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kFormTimeout = absl::Seconds(20);

// Skips the current test when there is no etcd binary (fails under CI=true). Void: GTEST_SKIP.
void SkipWithoutEtcd() {
  if (!EtcdCluster::FindEtcd().empty()) return;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    FAIL() << "no etcd binary under CI=true; scripts/install-deps.sh installs etcd-server";
  }
  GTEST_SKIP() << "no etcd binary ($DGT_ETCD_BIN, PATH, /usr/bin/etcd): install etcd-server "
                  "(scripts/install-deps.sh) to run the etcd tests";
}

// One cluster for the whole suite (started by the first test that needs it; killed at exit).
EtcdCluster* SharedCluster() {
  static EtcdCluster* cluster = [] {
    auto* c = new EtcdCluster();
    absl::Status started = c->Start(3, kFormTimeout);
    if (!started.ok()) {
      ADD_FAILURE() << started;
      delete c;
      return static_cast<EtcdCluster*>(nullptr);
    }
    std::atexit([] { delete SharedCluster(); });
    return c;
  }();
  return cluster;
}

void MakeEtcdBackend(std::unique_ptr<RunStateBackend>* out) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  static int next_prefix = 0;
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = absl::StrCat("/dgt-test/", ++next_prefix, "/runs/");
  auto backend = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  *out = *std::move(backend);
}

INSTANTIATE_TEST_SUITE_P(Etcd, RunStateBackendSuite,
                         ::testing::Values(BackendFactory{"Etcd",
                                                          [] {
                                                            std::unique_ptr<RunStateBackend> b;
                                                            MakeEtcdBackend(&b);
                                                            return b;
                                                          },
                                                          /*leases_on_own_clock=*/true}),
                         [](const ::testing::TestParamInfo<BackendFactory>& info) {
                           return info.param.name;
                         });

// Events one backend's watch delivered, for the test thread to wait on (bounded).
class Events {
 public:
  std::function<void(const RunEvent&)> Callback() {
    return [this](const RunEvent& e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(e);
    };
  }
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

// Two replicas on one prefix: each sees the other's writes through its watch, a commit over a
// revision the other moved past is Aborted (nothing written) and refreshes the view, and a key
// this dgt cannot read (another record version) is invisible rather than an error.
TEST(EtcdBackendReplicasTest, TwoBackendsOnOnePrefixSeeEachOtherAndConflictCleanly) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = "/dgt-test/replicas/runs/";
  auto raw = etcd::Client::Create(options.client);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(
      (*raw)->Put(options.prefix + "future", R"({"version":3,"writer":"x","run":{}})").ok());

  // Declared before the backends: destroyed after their watches stop.
  Events a_events;
  Events b_events;
  auto a = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->Find("future"), nullptr);
  EXPECT_EQ((*a)->size(), 0u);
  (*b)->Watch(b_events.Callback());

  ASSERT_TRUE((*a)->Create("job").ok());
  (*a)->Mutable("job")->round = 1;
  Revision r1 = (*a)->Commit("job").value();
  std::vector<RunEvent> seen = b_events.Await(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (RunEvent{RunEvent::Type::kPut, "job", r1}));
  ASSERT_NE((*b)->Find("job"), nullptr);
  EXPECT_EQ((*b)->Find("job")->round, 1);
  EXPECT_EQ((*b)->RevisionOf("job"), r1);

  // Both stage over r1; a commits first, b loses.
  (*a)->Mutable("job")->round = 2;
  (*b)->Mutable("job")->round = 20;
  Revision r2 = (*a)->Commit("job").value();
  absl::StatusOr<Revision> lost = (*b)->Commit("job");
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(lost.status().message(),
            absl::StrCat("run 'job' is at revision ", r2, ", expected ", r1));
  // b's view holds a's write now (read back by the failed Txn), whatever its watch did.
  EXPECT_EQ((*b)->RevisionOf("job"), r2);
  EXPECT_EQ((*b)->Find("job")->round, 2);
  // Handled again over the fresh read, b's commit goes through and a sees it.
  (*a)->Watch(a_events.Callback());
  (*b)->Mutable("job")->round = 3;
  Revision r3 = (*b)->Commit("job").value();
  seen = a_events.Await(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (RunEvent{RunEvent::Type::kPut, "job", r3}));
  EXPECT_EQ((*a)->Find("job")->round, 3);
  absl::StatusOr<etcd::KeyValue> kv = (*raw)->Get(options.prefix + "job");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->version, 3);
  EXPECT_EQ(kv->mod_revision, r3);

  ASSERT_TRUE((*b)->Delete("job").ok());
  seen = a_events.Await(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].type, RunEvent::Type::kDelete);
  EXPECT_EQ((*a)->Find("job"), nullptr);
  ASSERT_TRUE((*raw)->DeletePrefix(options.prefix).ok());
}

// A run of 10,000 nodes is committed in one Txn of the run key and 100 node buckets, under etcd's
// 1.5 MiB request limit and 128 ops (the run as one JSON value would be over 1.5 MiB). A change
// to one node writes the run key and that node's bucket only. Another replica's view follows
// every change through its watch. A run id with the separator byte is refused.
TEST(EtcdBackendScaleTest, ATenThousandNodeRunCommitsOnlyTheBucketsThatChanged) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = "/dgt-test/scale/runs/";
  auto raw = etcd::Client::Create(options.client);
  ASSERT_TRUE(raw.ok());
  Events b_events;
  auto a = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  (*b)->Watch(b_events.Callback());

  constexpr int kNodes = 10'000;
  RunRecord* run = (*a)->Create("big").value();
  run->min_nodes = kNodes - 1;
  run->max_nodes = kNodes;
  for (int i = 0; i < kNodes; ++i) {
    NodeRecord n{absl::StrCat("node-", 100000 + i),
                 static_cast<SessionId>(i + 1),
                 absl::StrCat("10.", i / 65536 % 256, ".", i / 256 % 256, ".", i % 256),
                 8,
                 20000 + i,
                 -1,
                 false,
                 false,
                 absl::FromUnixSeconds(1'700'000'000 + i)};
    run->nodes.emplace(n.node_id, n);
  }
  run->connected = kNodes;
  absl::StatusOr<Revision> r1 = (*a)->Commit("big");
  ASSERT_TRUE(r1.ok()) << r1.status();
  absl::StatusOr<etcd::RangeResult> keys = (*raw)->GetPrefix(options.prefix);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->kvs.size(), 101u);  // The run key and 100 buckets.
  ASSERT_EQ(b_events.Await(1).size(), 1u);
  ASSERT_NE((*b)->Find("big"), nullptr);
  EXPECT_EQ(*(*b)->Find("big"), *(*a)->Find("big"));

  // One node changes: the run key and one bucket are written.
  (*a)->Mutable("big")->nodes.at("node-104242").session = 0;
  (*a)->Mutable("big")->connected = kNodes - 1;
  absl::StatusOr<Revision> r2 = (*a)->Commit("big");
  ASSERT_TRUE(r2.ok()) << r2.status();
  keys = (*raw)->GetPrefix(options.prefix);
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::vector<std::string> written;
  for (const etcd::KeyValue& kv : keys->kvs) {
    if (kv.mod_revision == *r2) written.push_back(kv.key);
  }
  EXPECT_EQ(written, (std::vector<std::string>{
                         options.prefix + "big",
                         absl::StrCat(options.prefix, "big", std::string(1, kNodeBucketSeparator),
                                      NodeBucket("node-104242", 100))}));
  ASSERT_EQ(b_events.Await(2).size(), 2u);
  EXPECT_EQ(*(*b)->Find("big"), *(*a)->Find("big"));
  EXPECT_EQ((*b)->Find("big")->nodes.at("node-104242").session, 0);

  // A round start: every node gets a rank (every bucket rewritten, one Txn); a node leaves.
  RunRecord* round = (*a)->Mutable("big");
  round->nodes.erase("node-100007");
  int rank = 0;
  for (auto& [id, n] : round->nodes) n.node_rank = rank++;
  round->members = rank;
  round->round = 0;
  absl::StatusOr<Revision> r3 = (*a)->Commit("big");
  ASSERT_TRUE(r3.ok()) << r3.status();
  ASSERT_EQ(b_events.Await(3).size(), 3u);
  EXPECT_EQ((*b)->Find("big")->nodes.size(), static_cast<size_t>(kNodes - 1));
  EXPECT_EQ(*(*b)->Find("big"), *(*a)->Find("big"));
  EXPECT_EQ((*b)->RevisionOf("big"), *r3);

  // Read from the keys without a backend, and by a third replica opened now.
  absl::StatusOr<RunRecord> read = EtcdRunStateBackend::ReadRun(**raw, options.prefix, "big");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *(*a)->Find("big"));
  EXPECT_EQ(EtcdRunStateBackend::ReadRun(**raw, options.prefix, "none").status().message(),
            "no run key " + options.prefix + "none");
  auto c = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_NE((*c)->Find("big"), nullptr);
  EXPECT_EQ(*(*c)->Find("big"), *(*a)->Find("big"));

  // Deleted with its buckets.
  ASSERT_TRUE((*b)->Delete("big").ok());
  keys = (*raw)->GetPrefix(options.prefix);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->kvs.empty());

  absl::StatusOr<RunRecord*> bad = (*a)->Create("x\x1fy");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "run id 'x\\x1fy' has the byte 0x1f, which the etcd backend's keys reserve");
}

// etcd often delivers a replica's own put on the watch before the Txn answers; the view then takes
// the record written (recognised by its writer id) rather than decoding every bucket back and
// merging it under the view's mutex. Forced here: each put's answer is held until the watch
// delivered it. Another replica, following by the watch, merges the changed buckets.
// 2,000 nodes: about 120 KB of buckets, over a 100,000-byte limit and under etcd's 1.5 MiB.
void FillWideRun(RunRecord* run) {
  run->min_nodes = 2000;
  run->max_nodes = 2000;
  for (int i = 0; i < 2000; ++i) {
    NodeRecord n;
    n.node_id = absl::StrCat("node-", 100000 + i);
    n.address = "10.0.0.1";
    run->nodes.emplace(n.node_id, n);
  }
}

TEST(EtcdBackendScaleTest, AWriteOverTheRequestLimitFailsBeforeItIsSent) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = "/dgt-test/limit/runs/";
  options.max_request_bytes = 100'000;
  auto a = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(a.ok()) << a.status();
  // The backend's own check: 100,000 bytes leave no room beside the 256 KiB reserve.
  EXPECT_EQ((*a)->CheckRunFits(1, "n1", "10.0.0.1").code(), absl::StatusCode::kInvalidArgument);

  FillWideRun((*a)->Create("wide").value());
  absl::StatusOr<Revision> written = (*a)->Commit("wide");
  ASSERT_EQ(written.status().code(), absl::StatusCode::kResourceExhausted) << written.status();
  EXPECT_THAT(std::string(written.status().message()),
              ::testing::MatchesRegex("etcd backend: commit of run 'wide' \\(key "
                                      "/dgt-test/limit/runs/wide\\): the write needs [0-9]+ bytes "
                                      "in one etcd Txn, more than --etcd-max-request-bytes "
                                      "\\(100000, as etcd's --max-request-bytes\\)"));
  EXPECT_EQ((*a)->Find("wide"), nullptr);  // Nothing written.
  // The same run at the limit etcd runs with here (its default, 1.5 MiB) is written.
  options.max_request_bytes = kEtcdDefaultMaxRequestBytes;
  auto b = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  FillWideRun((*b)->Create("wide").value());
  EXPECT_TRUE((*b)->Commit("wide").ok());
}

TEST(EtcdBackendScaleTest, AnOwnPutTheWatchDeliversFirstIsTakenAsWritten) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = "/dgt-test/own-first/runs/";
  auto raw = etcd::Client::Create(options.client);
  ASSERT_TRUE(raw.ok());
  auto b = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  Events a_events;
  Events b_events;
  size_t puts = 0;
  options.after_put_txn_for_test = [&] { a_events.Await(++puts); };
  auto a = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->Watch(a_events.Callback());
  (*b)->Watch(b_events.Callback());

  constexpr int kNodes = 100;  // 4 buckets.
  ASSERT_EQ(NodeBuckets(kNodes), 4);
  RunRecord* run = (*a)->Create("own").value();
  run->max_nodes = kNodes;
  for (int i = 0; i < kNodes; ++i) {
    NodeRecord n{absl::StrCat("node-", i),
                 static_cast<SessionId>(i + 1),
                 "10.0.0.1",
                 8,
                 0,
                 -1,
                 false,
                 false,
                 absl::FromUnixSeconds(1'700'000'000 + i)};
    run->nodes.emplace(n.node_id, n);
  }
  run->connected = kNodes;
  const RunRecord first = *run;
  absl::StatusOr<Revision> r1 = (*a)->Commit("own");
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ((*a)->own_writes_from_watch(), 1);
  EXPECT_EQ((*a)->RevisionOf("own"), *r1);
  EXPECT_EQ(*(*a)->Find("own"), first);
  EXPECT_EQ(EtcdRunStateBackend::ReadRun(**raw, options.prefix, "own").value(), first);

  // Nodes in three buckets change, one node goes.
  RunRecord* next = (*a)->Mutable("own");
  next->nodes.at("node-3").node_rank = 0;
  next->nodes.at("node-40").store_port = 29500;
  next->nodes.at("node-77").session = 0;
  next->nodes.erase("node-12");
  next->connected = kNodes - 2;
  const RunRecord second = *next;
  absl::StatusOr<Revision> r2 = (*a)->Commit("own");
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*a)->own_writes_from_watch(), 2);
  EXPECT_EQ((*a)->RevisionOf("own"), *r2);
  EXPECT_EQ(*(*a)->Find("own"), second);
  EXPECT_EQ(EtcdRunStateBackend::ReadRun(**raw, options.prefix, "own").value(), second);
  ASSERT_EQ(b_events.Await(2).size(), 2u);
  EXPECT_EQ((*b)->RevisionOf("own"), *r2);
  EXPECT_EQ(*(*b)->Find("own"), second);
  EXPECT_EQ((*b)->Find("own")->nodes.size(), static_cast<size_t>(kNodes - 1));
  EXPECT_EQ((*b)->own_writes_from_watch(), 0);
}

// A bucket left empty is deleted (by Commit and by CompareAndPut, which writes every bucket), and
// another replica's view, following the watch, loses the nodes with it.
TEST(EtcdBackendScaleTest, ABucketLeftEmptyIsDeletedAndTheOtherReplicaFollows) {
  SkipWithoutEtcd();
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
  EtcdCluster* cluster = SharedCluster();
  ASSERT_NE(cluster, nullptr);
  EtcdRunStateBackend::Options options;
  options.client.endpoints = cluster->endpoints();
  options.prefix = "/dgt-test/empty-bucket/runs/";
  auto raw = etcd::Client::Create(options.client);
  ASSERT_TRUE(raw.ok());
  Events b_events;
  auto a = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  (*b)->Watch(b_events.Callback());
  const std::string bucket_key = options.prefix + "small" + kNodeBucketSeparator + "0";

  RunRecord* run = (*a)->Create("small").value();
  run->max_nodes = 2;  // One bucket.
  run->nodes["n1"].node_id = "n1";
  run->nodes["n2"].node_id = "n2";
  ASSERT_TRUE((*a)->Commit("small").ok());
  ASSERT_TRUE((*raw)->Get(bucket_key).ok());

  (*a)->Mutable("small")->nodes.clear();
  ASSERT_TRUE((*a)->Commit("small").ok());
  EXPECT_EQ((*raw)->Get(bucket_key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(b_events.Await(2).size(), 2u);
  EXPECT_TRUE((*b)->Find("small")->nodes.empty());

  // CompareAndPut: the nodes back, then none again over the revision read.
  RunRecord whole = *(*a)->Find("small");
  whole.nodes["n3"].node_id = "n3";
  absl::StatusOr<Revision> put = (*a)->CompareAndPut(whole, (*a)->RevisionOf("small"));
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(b_events.Await(3).size(), 3u);
  EXPECT_EQ((*b)->Find("small")->nodes.size(), 1u);
  whole.nodes.clear();
  put = (*a)->CompareAndPut(whole, *put);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ((*raw)->Get(bucket_key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(b_events.Await(4).size(), 4u);
  EXPECT_TRUE((*b)->Find("small")->nodes.empty());
  EXPECT_EQ(*(*b)->Find("small"), *(*a)->Find("small"));
  ASSERT_TRUE((*raw)->DeletePrefix(options.prefix).ok());
}

class EtcdBackendFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SkipWithoutEtcd();
    if (IsSkipped() || HasFailure()) return;
    absl::Status started = cluster_.Start(3, kFormTimeout);
    ASSERT_TRUE(started.ok()) << started;
  }
  EtcdCluster cluster_;
};

// The etcd leader dies between two commits of one run. The commit after it either succeeds
// (written once: the key's version counts the puts) or fails with Aborted or Unavailable, within
// a bound; then the backend commits again. Then every member stops: UNAVAILABLE naming the three
// endpoints, within the call timeout; they start again and the backend carries on.
TEST_F(EtcdBackendFailureTest, LeaderKilledBetweenCommitsNeverWritesTwice) {
  absl::StatusOr<int> leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(leader.ok()) << leader.status();
  EtcdRunStateBackend::Options options;
  // Followers first: the commit after the kill goes to a member that may still forward it to
  // the dead leader (its answer then lost: decided by reading back).
  for (int i = 0; i < 3; ++i) {
    if (i != *leader) options.client.endpoints.push_back(cluster_.endpoints()[i]);
  }
  options.client.endpoints.push_back(cluster_.endpoints()[*leader]);
  options.client.attempt_timeout = absl::Seconds(1);
  options.client.call_timeout = absl::Seconds(3);
  options.decide_timeout = absl::Seconds(8);
  auto opened = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EtcdRunStateBackend& backend = **opened;

  ASSERT_TRUE(backend.Create("job").ok());
  ASSERT_TRUE(backend.Commit("job").ok());
  backend.Mutable("job")->round = 1;
  absl::StatusOr<Revision> second = backend.Commit("job");
  ASSERT_TRUE(second.ok()) << second.status();

  cluster_.Kill(*leader);
  backend.Mutable("job")->round = 2;
  const absl::Time start = absl::Now();
  absl::StatusOr<Revision> third = backend.Commit("job");
  const absl::Duration took = absl::Now() - start;
  std::cout << "commit after the leader was killed: " << third.status() << " in " << took
            << " (answers lost and decided by reading back: " << backend.decided_after_lost_answer()
            << ")\n";
  // Bound: decide_timeout plus one call.
  EXPECT_LT(took, absl::Seconds(12));
  ASSERT_TRUE(third.ok() || third.status().code() == absl::StatusCode::kAborted ||
              third.status().code() == absl::StatusCode::kUnavailable)
      << third.status();

  // What etcd holds, read by a client of its own on the surviving members.
  etcd::ClientOptions reader_options;
  for (int i = 0; i < 3; ++i) {
    if (i != *leader) reader_options.endpoints.push_back(cluster_.endpoints()[i]);
  }
  auto reader = etcd::Client::Create(reader_options);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<etcd::KeyValue> kv = (*reader)->Get(backend.KeyOf("job"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  absl::StatusOr<RunRecord> stored = DecodeRunRecord(kv->value);
  ASSERT_TRUE(stored.ok()) << stored.status();
  if (third.ok()) {
    EXPECT_EQ(kv->version, 3);  // Create, round 1, round 2: each put once.
    EXPECT_EQ(kv->mod_revision, *third);
    EXPECT_EQ(stored->round, 2);
    EXPECT_EQ(backend.RevisionOf("job"), *third);
  } else {
    // Not applied, or (Unavailable: outcome unknown) applied once.
    EXPECT_TRUE(kv->version == 2 || (kv->version == 3 && stored->round == 2)) << kv->version;
  }

  // The backend carries on: the next commit succeeds (a second try after an Aborted that
  // refreshed the view).
  absl::StatusOr<Revision> fourth = absl::AbortedError("not tried");
  for (int attempt = 0; attempt < 2 && !fourth.ok(); ++attempt) {
    RunRecord* run = backend.Mutable("job");
    ASSERT_NE(run, nullptr);
    run->round = 3;
    fourth = backend.Commit("job");
  }
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  kv = (*reader)->Get(backend.KeyOf("job"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->mod_revision, *fourth);
  EXPECT_EQ(DecodeRunRecord(kv->value)->round, 3);

  // Every member stopped: a clean UNAVAILABLE naming each endpoint, within a bound.
  for (int i = 0; i < 3; ++i) cluster_.Kill(i);
  backend.Mutable("job")->round = 4;
  const absl::Time down_start = absl::Now();
  absl::StatusOr<Revision> down = backend.Commit("job");
  const absl::Duration down_took = absl::Now() - down_start;
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
  EXPECT_THAT(down.status().message(),
              HasSubstr("etcd backend: commit of run 'job' (key " + backend.KeyOf("job") + "): "));
  for (const std::string& endpoint : cluster_.endpoints()) {
    EXPECT_THAT(down.status().message(), HasSubstr(endpoint));
  }
  EXPECT_LT(down_took, absl::Seconds(5));
  // Reads are served from the view meanwhile.
  ASSERT_NE(backend.Find("job"), nullptr);
  EXPECT_EQ(backend.Find("job")->round, 3);

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster_.Restart(i).ok());
  ASSERT_TRUE(cluster_.WaitHealthy(kFormTimeout).ok());
  RunRecord* run = backend.Mutable("job");
  ASSERT_NE(run, nullptr);
  run->round = 5;
  absl::StatusOr<Revision> back = backend.Commit("job");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(backend.Find("job")->round, 5);
}

// The backend's only member is down while others write and compact the history past its
// watch's resume revision: the watch ends (OUT_OF_RANGE) when the member returns, and the next
// write re-reads the runs (the watchers told of what changed) and watches again.
TEST_F(EtcdBackendFailureTest, AWatchCompactedAwayIsResyncedAtTheNextWrite) {
  std::string etcdctl = EtcdCluster::FindEtcd();
  etcdctl = etcdctl.substr(0, etcdctl.rfind('/') + 1) + "etcdctl";
  if (access(etcdctl.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << etcdctl << " to compact with";
  // The backend's member is a follower, so that the writes meanwhile never wait for its return.
  absl::StatusOr<int> leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(leader.ok()) << leader.status();
  const int lone = (*leader + 1) % 3;
  Events events;  // Before the backend: outlives its watch.
  EtcdRunStateBackend::Options options;
  options.client.endpoints = {cluster_.endpoints()[lone]};
  options.client.call_timeout = absl::Seconds(3);
  options.prefix = "/dgt-test/resync/runs/";
  auto opened = EtcdRunStateBackend::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EtcdRunStateBackend& backend = **opened;
  backend.Watch(events.Callback());

  cluster_.Kill(lone);
  etcd::ClientOptions writer_options;
  writer_options.endpoints = {cluster_.endpoints()[*leader],
                              cluster_.endpoints()[3 - lone - *leader]};
  auto writer = etcd::Client::Create(writer_options);
  ASSERT_TRUE(writer.ok());
  RunRecord job;
  job.run_id = "job";
  job.round = 7;
  absl::StatusOr<int64_t> r_job =
      (*writer)->Put(options.prefix + "job", EncodeRunRecord(job, "w:1"));
  ASSERT_TRUE(r_job.ok()) << r_job.status();
  RunRecord other;
  other.run_id = "other";
  absl::StatusOr<int64_t> r_other =
      (*writer)->Put(options.prefix + "other", EncodeRunRecord(other, "w:2"));
  ASSERT_TRUE(r_other.ok()) << r_other.status();
  // Through etcdctl (the client has no Compact), on the two running members; a few tries, the
  // machine may be loaded.
  const std::string compact =
      absl::StrCat("ETCDCTL_API=3 ", etcdctl, " --dial-timeout=5s --command-timeout=10s",
                   " --endpoints=", writer_options.endpoints[0], ",", writer_options.endpoints[1],
                   " compact ", *r_other, " >/dev/null");
  int compacted = -1;
  for (int attempt = 0; attempt < 3 && compacted != 0; ++attempt) {
    compacted = std::system(compact.c_str());
  }
  ASSERT_EQ(compacted, 0) << compact;
  ASSERT_TRUE(cluster_.Restart(lone).ok());
  ASSERT_TRUE(cluster_.WaitHealthy(kFormTimeout).ok());

  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (!backend.watch_ended() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(backend.watch_ended());
  EXPECT_EQ(backend.Find("job"), nullptr);  // Not seen: the view lags until the next write.
  EXPECT_EQ(backend.resyncs(), 0);

  ASSERT_TRUE(backend.Create("mine").ok());
  EXPECT_FALSE(backend.watch_ended());
  EXPECT_EQ(backend.resyncs(), 1);
  ASSERT_NE(backend.Find("job"), nullptr);
  EXPECT_EQ(backend.Find("job")->round, 7);
  EXPECT_EQ(backend.RevisionOf("job"), *r_job);
  EXPECT_EQ(backend.RevisionOf("other"), *r_other);
  std::vector<RunEvent> seen = events.Await(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (RunEvent{RunEvent::Type::kPut, "job", *r_job}));
  EXPECT_EQ(seen[1], (RunEvent{RunEvent::Type::kPut, "other", *r_other}));

  // Watching again: this replica's commit and another writer's put both arrive.
  absl::StatusOr<Revision> mine = backend.Commit("mine");
  ASSERT_TRUE(mine.ok()) << mine.status();
  job.round = 8;
  absl::StatusOr<int64_t> r_job2 =
      (*writer)->Put(options.prefix + "job", EncodeRunRecord(job, "w:3"));
  ASSERT_TRUE(r_job2.ok());
  seen = events.Await(4);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[2], (RunEvent{RunEvent::Type::kPut, "mine", *mine}));
  EXPECT_EQ(seen[3], (RunEvent{RunEvent::Type::kPut, "job", *r_job2}));
  EXPECT_EQ(backend.Find("job")->round, 8);
}

}  // namespace
}  // namespace dgt::rendezvous
