// dgt::etcd::Client against a real three-member etcd cluster on loopback (EtcdCluster): exact
// compare-and-swap revisions, lease expiry, exact watch events, the leader killed, every member
// stopped and started again. Skipped when no etcd binary is installed, except under CI=true
// (scripts/install-deps.sh installs etcd-server there), where that fails.
#include "etcd/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "tests/etcd/etcd_cluster.h"

namespace dgt::etcd {
namespace {

using testing::EtcdCluster;
using ::testing::HasSubstr;

constexpr absl::Duration kFormTimeout = absl::Seconds(20);

// Events a Watcher delivered, for the test thread to wait on.
class EventLog {
 public:
  void Add(const std::vector<Event>& events) {
    MutexLock lock(&mu_);
    events_.insert(events_.end(), events.begin(), events.end());
    cv_.SignalAll();
  }
  // Waits up to `timeout` for at least `n` events; returns all seen so far.
  std::vector<Event> WaitFor(size_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (events_.size() < n && !cv_.WaitWithDeadline(&mu_, deadline)) {
    }
    return events_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

// "PUT key=value @rev" / "DELETE key @rev": one line per event, so a mismatch reads plainly.
std::vector<std::string> Describe(const std::vector<Event>& events) {
  std::vector<std::string> out;
  out.reserve(events.size());
  for (const Event& e : events) {
    out.push_back(e.type == Event::Type::kPut
                      ? absl::StrCat("PUT ", e.kv.key, "=", e.kv.value, " @", e.kv.mod_revision)
                      : absl::StrCat("DELETE ", e.kv.key, " @", e.kv.mod_revision));
  }
  return out;
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::FindEtcd().empty()) {
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") {
        FAIL() << "no etcd binary under CI=true; scripts/install-deps.sh installs etcd-server";
      }
      GTEST_SKIP() << "no etcd binary ($DGT_ETCD_BIN, PATH, /usr/bin/etcd): install etcd-server "
                      "(scripts/install-deps.sh) to run the etcd tests";
    }
    absl::Status started = cluster_.Start(3, kFormTimeout);
    ASSERT_TRUE(started.ok()) << started;
  }

  std::unique_ptr<Client> NewClient(std::vector<std::string> endpoints,
                                    absl::Duration call_timeout = absl::Seconds(5)) {
    ClientOptions options;
    options.endpoints = std::move(endpoints);
    options.call_timeout = call_timeout;
    options.attempt_timeout = absl::Seconds(1);
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  EtcdCluster cluster_;
};

TEST(EtcdClientOptionsTest, RejectsBadOptions) {
  ClientOptions options;
  auto none = Client::Create(options);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(), "etcd client: no endpoints given");
  options.endpoints = {"127.0.0.1"};
  auto no_port = Client::Create(options);
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_port.status().message(), "etcd client: endpoint must be host:port, got '127.0.0.1'");
  options.endpoints = {"127.0.0.1:1"};
  options.call_timeout = absl::ZeroDuration();
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, CompareAndSwapOnExactRevisions) {
  auto client = NewClient(cluster_.endpoints());
  ASSERT_NE(client, nullptr);
  auto r1 = client->Put("cas/k", "v1");
  ASSERT_TRUE(r1.ok()) << r1.status();
  auto kv = client->Get("cas/k");
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->value, "v1");
  EXPECT_EQ(kv->create_revision, *r1);
  EXPECT_EQ(kv->mod_revision, *r1);
  EXPECT_EQ(kv->version, 1);
  EXPECT_EQ(kv->lease, 0);

  // Create-if-absent on an existing key: the else branch reads it.
  auto absent = client->Txn({Compare::CreateRevisionIs("cas/k", 0)}, {Op::Put("cas/k", "x")},
                            {Op::Get("cas/k")});
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->succeeded);
  EXPECT_EQ(absent->revision, *r1);
  ASSERT_EQ(absent->results.size(), 1u);
  ASSERT_EQ(absent->results[0].kvs.size(), 1u);
  EXPECT_EQ(absent->results[0].kvs[0].value, "v1");

  // Swap on the revision read: applied, one revision later.
  auto swap = client->Txn({Compare::ModRevisionIs("cas/k", *r1)}, {Op::Put("cas/k", "v2")},
                          {Op::Get("cas/k")});
  ASSERT_TRUE(swap.ok()) << swap.status();
  EXPECT_TRUE(swap->succeeded);
  EXPECT_EQ(swap->revision, *r1 + 1);
  ASSERT_EQ(swap->results.size(), 1u);
  EXPECT_TRUE(swap->results[0].kvs.empty());

  // The same swap again: the revision moved, so it fails and reads the current value.
  auto stale = client->Txn({Compare::ModRevisionIs("cas/k", *r1)}, {Op::Put("cas/k", "v3")},
                           {Op::Get("cas/k")});
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_FALSE(stale->succeeded);
  EXPECT_EQ(stale->revision, *r1 + 1);
  ASSERT_EQ(stale->results[0].kvs.size(), 1u);
  EXPECT_EQ(stale->results[0].kvs[0].value, "v2");
  EXPECT_EQ(stale->results[0].kvs[0].mod_revision, *r1 + 1);
  EXPECT_EQ(stale->results[0].kvs[0].create_revision, *r1);
  EXPECT_EQ(stale->results[0].kvs[0].version, 2);

  // Compare on the value; delete in the same txn.
  auto del = client->Txn({Compare::ValueIs("cas/k", "v2")}, {Op::Delete("cas/k")});
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_TRUE(del->succeeded);
  EXPECT_EQ(del->revision, *r1 + 2);
  EXPECT_EQ(del->results[0].count, 1);
  auto gone = client->Get("cas/k");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("cas/k"));

  // Create-if-absent: the first wins, the second loses.
  auto first =
      client->Txn({Compare::CreateRevisionIs("cas/rank0", 0)}, {Op::Put("cas/rank0", "node-a")});
  auto second =
      client->Txn({Compare::CreateRevisionIs("cas/rank0", 0)}, {Op::Put("cas/rank0", "node-b")});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->succeeded);
  EXPECT_EQ(first->revision, *r1 + 3);
  EXPECT_FALSE(second->succeeded);
  EXPECT_EQ(second->revision, *r1 + 3);
  EXPECT_EQ(client->Get("cas/rank0")->value, "node-a");

  // Prefix reads and deletes, with a limit; "cas/" does not match "cas0".
  ASSERT_TRUE(client->Put("cas/b", "2").ok());
  ASSERT_TRUE(client->Put("cas0", "outside").ok());
  auto range = client->GetPrefix("cas/", 1);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->count, 2);
  EXPECT_TRUE(range->more);
  ASSERT_EQ(range->kvs.size(), 1u);
  EXPECT_EQ(range->kvs[0].key, "cas/b");
  EXPECT_EQ(range->revision, *r1 + 5);
  EXPECT_EQ(*client->DeletePrefix("cas/"), 2);
  EXPECT_EQ(client->GetPrefix("cas/")->count, 0);
  EXPECT_EQ(client->Get("cas0")->value, "outside");
  EXPECT_EQ(client->Put("", "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, LeaseExpiryRemovesKeyAndKeepAliveKeepsIt) {
  auto client = NewClient(cluster_.endpoints());
  ASSERT_NE(client, nullptr);
  auto expiring = client->LeaseGrant(1);
  auto kept = client->LeaseGrant(1);
  ASSERT_TRUE(expiring.ok() && kept.ok());
  EXPECT_EQ(expiring->ttl_seconds, 1);
  ASSERT_TRUE(client->Put("lease/expiring", "a", expiring->id).ok());
  ASSERT_TRUE(client->Put("lease/kept", "b", kept->id).ok());
  EXPECT_EQ(client->Get("lease/expiring")->lease, expiring->id);

  // Renew one lease every 200 ms; leave the other alone. After 3 s (three TTLs) the renewed key
  // is there and the other is gone.
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(3)) {
    auto ttl = client->LeaseKeepAliveOnce(kept->id);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    EXPECT_EQ(*ttl, 1);
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(client->Get("lease/kept")->value, "b");
  EXPECT_EQ(client->Get("lease/expiring").status().code(), absl::StatusCode::kNotFound);
  auto renew = client->LeaseKeepAliveOnce(expiring->id);
  EXPECT_EQ(renew.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->LeaseTimeToLive(expiring->id).status().code(), absl::StatusCode::kNotFound);

  // Revoking deletes the key at once; revoking again is NOT_FOUND.
  ASSERT_TRUE(client->LeaseRevoke(kept->id).ok());
  EXPECT_EQ(client->Get("lease/kept").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->LeaseRevoke(kept->id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->LeaseGrant(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, LeaseKeeperKeepsLeaseUntilDestroyedAndReportsRevocation) {
  auto client = NewClient(cluster_.endpoints());
  ASSERT_NE(client, nullptr);
  auto lease = client->LeaseGrant(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client->Put("keeper/k", "v", lease->id).ok());
  {
    auto keeper = client->KeepAlive(lease->id, lease->ttl_seconds);
    ASSERT_TRUE(keeper.ok()) << keeper.status();
    absl::SleepFor(absl::Seconds(2.5));
    EXPECT_EQ(client->Get("keeper/k")->value, "v");
    EXPECT_TRUE((*keeper)->status().ok()) << (*keeper)->status();
    EXPECT_GE((*keeper)->renewals(), 4);
  }
  // No longer renewed: gone within the TTL and etcd's expiry check (500 ms), bounded here by 4 s.
  const absl::Time stopped = absl::Now();
  while (client->Get("keeper/k").ok() && absl::Now() - stopped < absl::Seconds(4)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(client->Get("keeper/k").status().code(), absl::StatusCode::kNotFound);

  // A revoked lease is reported lost (NOT_FOUND), once.
  auto revoked = client->LeaseGrant(2);
  ASSERT_TRUE(revoked.ok());
  Mutex mu;
  CondVar cv;
  std::vector<absl::Status> losses;
  auto keeper = client->KeepAlive(revoked->id, revoked->ttl_seconds, [&](const absl::Status& s) {
    MutexLock lock(&mu);
    losses.push_back(s);
    cv.SignalAll();
  });
  ASSERT_TRUE(keeper.ok());
  ASSERT_TRUE(client->LeaseRevoke(revoked->id).ok());
  {
    const absl::Time deadline = absl::Now() + absl::Seconds(3);
    MutexLock lock(&mu);
    while (losses.empty() && !cv.WaitWithDeadline(&mu, deadline)) {
    }
    ASSERT_EQ(losses.size(), 1u);
    EXPECT_EQ(losses[0].code(), absl::StatusCode::kNotFound) << losses[0];
  }
  EXPECT_EQ((*keeper)->status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->KeepAlive(revoked->id, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every member gone: the keeper reports the loss about a TTL after its last renewal, not after
// a renewal's whole call_timeout (5 s here), which a leader replica would serve through.
TEST_F(EtcdClientTest, LeaseKeeperReportsLossWithinTheTtlWhenNoMemberAnswers) {
  auto client = NewClient(cluster_.endpoints());
  ASSERT_NE(client, nullptr);
  auto lease = client->LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  Mutex mu;
  CondVar cv;
  std::vector<absl::Status> losses;
  auto keeper = client->KeepAlive(lease->id, lease->ttl_seconds, [&](const absl::Status& s) {
    MutexLock lock(&mu);
    losses.push_back(s);
    cv.SignalAll();
  });
  ASSERT_TRUE(keeper.ok()) << keeper.status();
  absl::SleepFor(absl::Seconds(1));
  ASSERT_GE((*keeper)->renewals(), 1);
  for (int i = 0; i < 3; ++i) cluster_.Kill(i);
  const absl::Time killed = absl::Now();
  {
    const absl::Time deadline = killed + absl::Seconds(8);
    MutexLock lock(&mu);
    while (losses.empty() && !cv.WaitWithDeadline(&mu, deadline)) {
    }
    ASSERT_EQ(losses.size(), 1u);
    EXPECT_EQ(losses[0].code(), absl::StatusCode::kDeadlineExceeded) << losses[0];
    EXPECT_TRUE(absl::StartsWith(
        losses[0].message(),
        absl::StrCat("etcd lease ", lease->id, " not renewed within its ttl of 2s (last error: ")))
        << losses[0];
  }
  // The last renewal was at most ttl/3 before the kill: lost 2 s after it, plus scheduling.
  const absl::Duration lost_after = absl::Now() - killed;
  EXPECT_LT(lost_after, absl::Milliseconds(2600)) << lost_after;
}

// etcd's leader hangs (SIGSTOP: its connections stay open and it answers nothing) while the
// keeper renews there. Each renewal must move on to the other members within the lease's TTL, so
// the lease is kept through etcd's election. The client has dgt-rendezvous's timeouts: 5 s a call
// and 2 s an attempt, more than the whole 2 s TTL.
TEST_F(EtcdClientTest, LeaseKeeperKeepsTheLeaseWhenTheEtcdLeaderIsPaused) {
  auto leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(leader.ok()) << leader.status();
  // The leader first, so the keeper renews at the member that hangs.
  ClientOptions options;
  options.endpoints = {cluster_.endpoints()[*leader]};
  for (int i = 0; i < 3; ++i) {
    if (i != *leader) options.endpoints.push_back(cluster_.endpoints()[i]);
  }
  options.call_timeout = absl::Seconds(5);
  options.attempt_timeout = absl::Seconds(2);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto lease = (*client)->LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  Mutex mu;
  CondVar cv;
  std::vector<absl::Status> losses;
  auto keeper = (*client)->KeepAlive(lease->id, lease->ttl_seconds, [&](const absl::Status& s) {
    MutexLock lock(&mu);
    losses.push_back(s);
    cv.SignalAll();
  });
  ASSERT_TRUE(keeper.ok()) << keeper.status();
  absl::SleepFor(absl::Seconds(1));
  ASSERT_GE((*keeper)->renewals(), 1);

  cluster_.Pause(*leader);
  const int64_t before = (*keeper)->renewals();
  {
    // Three TTLs: etcd elects another leader within 1 s (election timeout 500 ms) and the keeper
    // renews there.
    const absl::Time deadline = absl::Now() + absl::Seconds(6);
    MutexLock lock(&mu);
    while (losses.empty() && !cv.WaitWithDeadline(&mu, deadline)) {
    }
    EXPECT_TRUE(losses.empty()) << losses[0];
  }
  EXPECT_TRUE((*keeper)->status().ok()) << (*keeper)->status();
  // A renewal every ttl/3 (667 ms): 9 in 6 s without the election.
  EXPECT_GE((*keeper)->renewals() - before, 4);
  // etcd agrees: the lease lives, asked of the members that answer.
  auto ttl = (*client)->LeaseTimeToLive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  cluster_.Resume(*leader);
}

TEST_F(EtcdClientTest, WatchDeliversExactEventsFromARevision) {
  auto client = NewClient(cluster_.endpoints());
  ASSERT_NE(client, nullptr);
  auto r0 = client->Put("w/a", "1");
  ASSERT_TRUE(r0.ok()) << r0.status();
  EventLog log;
  // From r0: the put before the watch started is replayed from history.
  auto watcher =
      client->Watch("w/", /*prefix=*/true, *r0, [&](const std::vector<Event>& e) { log.Add(e); });
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  ASSERT_TRUE(client->Put("w/b", "2").ok());
  ASSERT_TRUE(client->Delete("w/a").ok());
  ASSERT_TRUE(client->Put("x/outside", "no").ok());
  auto txn = client->Txn({}, {Op::Put("w/b", "3"), Op::Put("w/c", "4")});
  ASSERT_TRUE(txn.ok()) << txn.status();
  const int64_t r = *r0;
  EXPECT_THAT(Describe(log.WaitFor(5, absl::Seconds(5))),
              ::testing::ElementsAre(
                  absl::StrCat("PUT w/a=1 @", r), absl::StrCat("PUT w/b=2 @", r + 1),
                  absl::StrCat("DELETE w/a @", r + 2), absl::StrCat("PUT w/b=3 @", r + 4),
                  absl::StrCat("PUT w/c=4 @", r + 4)));
  EXPECT_EQ((*watcher)->next_revision(), r + 5);
  EXPECT_EQ((*watcher)->streams_opened(), 1);
  // A single-key watch from now sees only its key.
  EventLog one;
  auto single =
      client->Watch("w/c", /*prefix=*/false, 0, [&](const std::vector<Event>& e) { one.Add(e); });
  ASSERT_TRUE(single.ok());
  // The watch is created asynchronously: wait until it has pinned its start revision.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((*single)->next_revision() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ((*single)->next_revision(), r + 5);
  ASSERT_TRUE(client->Put("w/b", "5").ok());
  ASSERT_TRUE(client->Put("w/c", "6").ok());
  EXPECT_THAT(Describe(one.WaitFor(1, absl::Seconds(5))),
              ::testing::ElementsAre(absl::StrCat("PUT w/c=6 @", r + 6)));
  watcher->reset();  // Cancels and joins.
  single->reset();
}

TEST_F(EtcdClientTest, LeaderKilledClientContinuesOnOtherMembers) {
  auto leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(leader.ok()) << leader.status();
  // The leader first, so the client's calls and its watch start on the member that dies.
  std::vector<std::string> endpoints = {cluster_.endpoints()[*leader]};
  for (int i = 0; i < 3; ++i) {
    if (i != *leader) endpoints.push_back(cluster_.endpoints()[i]);
  }
  auto client = NewClient(endpoints);
  ASSERT_NE(client, nullptr);
  auto before = client->Put("ha/before", "1");
  ASSERT_TRUE(before.ok()) << before.status();
  EventLog log;
  auto watcher =
      client->Watch("ha/", true, *before, [&](const std::vector<Event>& e) { log.Add(e); });
  ASSERT_TRUE(watcher.ok());
  ASSERT_EQ(log.WaitFor(1, absl::Seconds(5)).size(), 1u);

  cluster_.Kill(*leader);
  const absl::Time killed = absl::Now();
  // As the backend will: claim with a create-if-absent Txn; when its outcome is unknown
  // (DEADLINE_EXCEEDED: a member forwarded it to the dead leader), claim again, and a failed
  // compare whose value is ours means an earlier attempt was applied.
  int64_t claimed_revision = 0;
  int attempts = 0;
  while (claimed_revision == 0 && absl::Now() - killed < absl::Seconds(10)) {
    ++attempts;
    auto txn = client->Txn({Compare::CreateRevisionIs("ha/rank0", 0)}, {Op::Put("ha/rank0", "a")},
                           {Op::Get("ha/rank0")});
    if (!txn.ok()) {
      ASSERT_EQ(txn.status().code(), absl::StatusCode::kDeadlineExceeded) << txn.status();
      continue;
    }
    if (txn->succeeded) {
      claimed_revision = txn->revision;
    } else {
      ASSERT_EQ(txn->results[0].kvs.size(), 1u);
      ASSERT_EQ(txn->results[0].kvs[0].value, "a");
      claimed_revision = txn->results[0].kvs[0].mod_revision;
    }
  }
  const absl::Duration took = absl::Now() - killed;
  ASSERT_NE(claimed_revision, 0) << "no txn succeeded within 10 s of the leader's death";
  EXPECT_LT(took, absl::Seconds(5)) << "txn after the leader died took " << took;
  EXPECT_LE(attempts, 3);
  std::cout << "txn after killing the leader: " << absl::FormatDuration(took) << " (" << attempts
            << " attempt(s))\n";
  EXPECT_EQ(client->Get("ha/rank0")->mod_revision, claimed_revision);

  // The watch moved to a surviving member and resumed: the put before, the txn after, once each.
  EXPECT_THAT(Describe(log.WaitFor(2, absl::Seconds(10))),
              ::testing::ElementsAre(absl::StrCat("PUT ha/before=1 @", *before),
                                     absl::StrCat("PUT ha/rank0=a @", claimed_revision)));
  EXPECT_GE((*watcher)->streams_opened(), 2);
  auto new_leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(new_leader.ok()) << new_leader.status();
  EXPECT_NE(*new_leader, *leader);
}

TEST_F(EtcdClientTest, AllMembersStoppedGiveUnavailableThenRecover) {
  auto client = NewClient(cluster_.endpoints(), absl::Seconds(2));
  ASSERT_NE(client, nullptr);
  auto kept = client->Put("down/kept", "1");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EventLog log;
  auto watcher = client->Watch("down/", true, 0, [&](const std::vector<Event>& e) { log.Add(e); });
  ASSERT_TRUE(watcher.ok());
  // The watch is created asynchronously: wait until it has pinned its start revision.
  const absl::Time created = absl::Now() + absl::Seconds(5);
  while ((*watcher)->next_revision() == 0 && absl::Now() < created) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ((*watcher)->next_revision(), *kept + 1);

  for (int i = 0; i < 3; ++i) cluster_.Kill(i);
  const absl::Time stopped = absl::Now();
  auto put = client->Put("down/x", "2");
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable) << put.status();
  EXPECT_LT(took, absl::Seconds(3)) << took;
  for (const std::string& e : cluster_.endpoints()) {
    EXPECT_THAT(put.status().message(), HasSubstr(e));
  }
  EXPECT_THAT(put.status().message(), HasSubstr("etcd put: no member answered within 2s"));
  EXPECT_EQ(client->Get("down/kept").status().code(), absl::StatusCode::kUnavailable);

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster_.Restart(i).ok());
  absl::Status healthy = cluster_.WaitHealthy(kFormTimeout);
  ASSERT_TRUE(healthy.ok()) << healthy;
  // The same client works again, on the data written before the stop.
  auto kv = client->Get("down/kept");
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->value, "1");
  EXPECT_EQ(kv->mod_revision, *kept);
  auto after = client->Put("down/after", "3");
  ASSERT_TRUE(after.ok()) << after.status();
  // The watch rode out the outage and delivers what came after it.
  EXPECT_THAT(Describe(log.WaitFor(1, absl::Seconds(10))),
              ::testing::ElementsAre(absl::StrCat("PUT down/after=3 @", *after)));
}

}  // namespace
}  // namespace dgt::etcd
