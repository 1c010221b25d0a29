#include "dgt/worker/elastic_group.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dgt/store/memory_store.h"
#include "dgt/worker/gloo_communicator.h"
#include "dgt/worker/recovery_keys.h"
#include "gloo/transport/tcp/address.h"
#include "gtest/gtest.h"
#include "tests/worker_runtime/fake_store_ref.h"

namespace dgt::worker {
namespace {

using testing::ConnectorTo;

Context Ctx(int rank, int world, int restart_count = 0) {
  Context c;
  c.rank = rank;
  c.world_size = world;
  c.local_world_size = world;
  c.local_rank = rank;
  c.master_addr = "127.0.0.1";
  c.master_port = 1;
  c.generation = restart_count;
  return c;
}

ElasticGroupOptions Fast(RecoveryMode mode = RecoveryMode::kReplace) {
  ElasticGroupOptions o;
  o.mode = mode;
  o.init_timeout = absl::Seconds(10);
  o.op_timeout = absl::Seconds(10);
  o.report_timeout = absl::Seconds(2);
  o.watch_period = absl::Milliseconds(100);
  return o;
}

// Joins `n` ranks concurrently.
std::vector<std::unique_ptr<ElasticGroup>> JoinAll(int n, store::Store& store,
                                                   CommunicatorFactory& f, ElasticGroupOptions o) {
  std::vector<std::unique_ptr<ElasticGroup>> groups(n);
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) {
    t.emplace_back([&, r] {
      auto g = ElasticGroup::Join(Ctx(r, n), ConnectorTo(store), f, o);
      ASSERT_TRUE(g.ok()) << g.status();
      groups[r] = std::move(*g);
    });
  }
  for (auto& th : t) th.join();
  return groups;
}

int64_t SumOnce(ElasticGroup& g, int64_t mine, absl::Status* status) {
  std::vector<int64_t> v = {mine};
  *status = g.comm().AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
  return v[0];
}

TEST(RecoveryKeysTest, ConcurrentDetectorsAgreeOnTheNextGeneration) {
  store::MemoryStore store;
  EXPECT_EQ(*recovery::OpenNextGeneration(store, "world", 0, "a"), 1);
  EXPECT_EQ(*recovery::OpenNextGeneration(store, "world", 0, "b"), 1);
  EXPECT_EQ(*store.Get("dgt/recovery/world/generation"), "1");
  EXPECT_EQ(*store.Get("dgt/recovery/world/g1/open"), "b");
  EXPECT_EQ(*recovery::OpenNextGeneration(store, "world", 1, "c"), 2);
  // A detector that is behind is sent to the current generation.
  EXPECT_EQ(*recovery::OpenNextGeneration(store, "world", 0, "late"), 2);
}

TEST(RecoveryKeysTest, PublishRankFailureOpensTheGenerationAfterTheRanksLast) {
  store::MemoryStore store;
  ASSERT_TRUE(store.Set(recovery::MemberKey("world", 2), "3").ok());
  ASSERT_TRUE(store.Set(recovery::GenerationKey("world"), "3").ok());
  EXPECT_EQ(*recovery::PublishRankFailure(store, "world", 2, "exit -9"), 4);
  EXPECT_EQ(*recovery::PublishRankFailure(store, "world", 3, "exit -9"), 1 + 3);
  EXPECT_EQ(*store.Get("dgt/recovery/world/g4/failed"), "2,3,");
  EXPECT_EQ(*store.Get("dgt/recovery/world/g4/open"), "exit -9");
  EXPECT_EQ(*store.Get("dgt/recovery/world/member/2"), "3");
}

TEST(ElasticGroupTest, ReplacementJoinsAndSurvivorsRebuildInPlace) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  auto groups = JoinAll(3, store, factory, Fast());
  for (auto& g : groups) EXPECT_EQ(g->generation(), 0);
  absl::Status s;
  std::vector<std::thread> t;
  for (int r = 0; r < 3; ++r) {
    t.emplace_back([&, r] {
      absl::Status st;
      EXPECT_EQ(SumOnce(*groups[r], r + 1, &st), 6);
      EXPECT_TRUE(st.ok()) << st;
    });
  }
  for (auto& th : t) th.join();
  t.clear();

  ElasticGroup* survivor0 = groups[0].get();
  groups[1].reset();  // Rank 1 dies.
  // Survivors notice (their collective fails, or the watcher aborts it) and recover; the
  // replacement joins with the same rank.
  std::unique_ptr<ElasticGroup> replacement;
  for (int r : {0, 2}) {
    t.emplace_back([&, r] {
      absl::Status st;
      SumOnce(*groups[r], r + 1, &st);
      EXPECT_FALSE(st.ok());
      auto c = groups[r]->Recover();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->generation(), 1);
      EXPECT_EQ(SumOnce(*groups[r], r + 1, &st), 6);
      EXPECT_TRUE(st.ok()) << st;
    });
  }
  t.emplace_back([&] {
    absl::SleepFor(absl::Milliseconds(200));
    auto g = ElasticGroup::Join(Ctx(1, 3, 1), ConnectorTo(store), factory, Fast());
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE((*g)->is_replacement());
    EXPECT_EQ((*g)->generation(), 1);
    absl::Status st;
    EXPECT_EQ(SumOnce(**g, 2, &st), 6);
    EXPECT_TRUE(st.ok()) << st;
    replacement = std::move(*g);
  });
  for (auto& th : t) th.join();
  EXPECT_EQ(survivor0, groups[0].get());
  EXPECT_EQ(*store.Get("dgt/recovery/world/member/1"), "1");
}

TEST(ElasticGroupTest, WatcherAbortsASurvivorThatIsNotInACollective) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  auto groups = JoinAll(2, store, factory, Fast());
  ASSERT_TRUE(recovery::PublishRankFailure(store, "world", 1, "test").ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  // The watcher marks recovery pending just before it aborts the communicator.
  while (!(groups[0]->recovery_pending() && groups[0]->comm().aborted()) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(groups[0]->recovery_pending());
  EXPECT_TRUE(groups[0]->comm().aborted());
}

TEST(ElasticGroupTest, LastBuildTimesJoinAndRecoverInOrder) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  const absl::Time before = absl::Now();
  auto groups = JoinAll(2, store, factory, Fast(RecoveryMode::kShrink));
  for (const auto& g : groups) {
    const BuildTimeline t = g->last_build();
    EXPECT_EQ(t.noticed, absl::InfinitePast());  // Nothing to notice at a first join.
    EXPECT_LE(before, t.started);
    EXPECT_LE(t.started, t.connected);
    EXPECT_LE(t.connected, t.opened);
    EXPECT_LE(t.opened, t.bootstrap);
    EXPECT_LE(t.bootstrap, t.built);
  }
  // Rank 1 is reported failed; rank 0's watcher notices, then rank 0 recovers alone.
  const absl::Time published = absl::Now();
  ASSERT_TRUE(recovery::PublishRankFailure(store, "world", 1, "test").ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!groups[0]->recovery_pending() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(groups[0]->recovery_pending());
  auto c = groups[0]->Recover();
  ASSERT_TRUE(c.ok()) << c.status();
  const BuildTimeline t = groups[0]->last_build();
  EXPECT_LE(published, t.noticed);
  EXPECT_LE(t.noticed, t.started);
  EXPECT_EQ(t.connected, absl::InfinitePast());  // Recover() keeps its connections.
  EXPECT_LE(t.started, t.opened);
  EXPECT_LE(t.opened, t.bootstrap);
  EXPECT_LE(t.bootstrap, t.built);
}

// The watcher started for the bootstrap keeps watching the same key once the communicator is
// built: the build does not wait for its store wait (watch_period) to end. Waiting would put the
// trainer's 200 ms watch period into every join and every recovery.
TEST(ElasticGroupTest, BuildDoesNotWaitForTheWatchersStoreWait) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  ElasticGroupOptions o = Fast();
  o.watch_period = absl::Seconds(20);
  auto groups = JoinAll(2, store, factory, o);
  for (const auto& g : groups) {
    const BuildTimeline t = g->last_build();
    EXPECT_LT(t.built - t.bootstrap, absl::Seconds(5));
  }
  // The built communicators are watched: opening generation 1 aborts them (and ends the
  // watchers, so that destruction does not wait for their 20 s store waits either).
  ASSERT_TRUE(recovery::OpenNextGeneration(store, "world", 0, "test").ok());
  for (const auto& g : groups) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!g->recovery_pending() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_TRUE(g->recovery_pending());
  }
}

TEST(ElasticGroupTest, ShrinkContinuesWithRenumberedSurvivors) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  auto groups = JoinAll(4, store, factory, Fast(RecoveryMode::kShrink));
  groups[1].reset();
  ASSERT_TRUE(recovery::PublishRankFailure(store, "world", 1, "killed").ok());
  std::vector<std::thread> t;
  for (int r : {0, 2, 3}) {
    t.emplace_back([&, r] {
      auto c = groups[r]->Recover();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->size(), 3);
      EXPECT_EQ(groups[r]->members(), (std::vector<int>{0, 2, 3}));
      EXPECT_EQ((*c)->rank(), r == 0 ? 0 : r - 1);
      absl::Status st;
      EXPECT_EQ(SumOnce(*groups[r], r + 1, &st), 1 + 3 + 4);
      EXPECT_TRUE(st.ok()) << st;
    });
  }
  for (auto& th : t) th.join();
}

TEST(ElasticGroupTest, ShrinkWithoutReportUsesWhoJoined) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  ElasticGroupOptions o = Fast(RecoveryMode::kShrink);
  o.report_timeout = absl::Milliseconds(500);
  auto groups = JoinAll(3, store, factory, o);
  groups[2].reset();
  std::vector<std::thread> t;
  for (int r : {0, 1}) {
    t.emplace_back([&, r] {
      auto c = groups[r]->Recover();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(groups[r]->members(), (std::vector<int>{0, 1}));
    });
  }
  for (auto& th : t) th.join();
}

TEST(ElasticGroupTest, RecoverTimesOutWhenTheReplacementNeverComes) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  ElasticGroupOptions o = Fast();
  o.init_timeout = absl::Milliseconds(500);
  auto groups = JoinAll(2, store, factory, o);
  groups[1].reset();
  const absl::Time start = absl::Now();
  auto c = groups[0]->Recover();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A survivor gave up on generation 1 (no replacement in time) and moved to 2; the replacement
// that comes late joins the survivor's generation, not its predecessor's + 1.
TEST(ElasticGroupTest, LateReplacementConvergesOnTheCurrentGeneration) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  ElasticGroupOptions o = Fast();
  o.init_timeout = absl::Milliseconds(500);
  auto groups = JoinAll(2, store, factory, o);
  groups[1].reset();
  EXPECT_EQ(groups[0]->Recover().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(groups[0]->generation(), 1);
  o.init_timeout = absl::Seconds(10);
  std::unique_ptr<ElasticGroup> replacement;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(200));
    auto g = ElasticGroup::Join(Ctx(1, 2, 1), ConnectorTo(store), factory, o);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)->generation(), 2);
    replacement = std::move(*g);
  });
  auto c = groups[0]->Recover();
  late.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->generation(), 2);
  ASSERT_NE(replacement, nullptr);
  std::thread t([&] {
    absl::Status st;
    EXPECT_EQ(SumOnce(*replacement, 2, &st), 3);
    EXPECT_TRUE(st.ok()) << st;
  });
  absl::Status st;
  EXPECT_EQ(SumOnce(*groups[0], 1, &st), 3);
  EXPECT_TRUE(st.ok()) << st;
  t.join();
}

// Issue 6's livelock: rank 1 joined generation 1's bootstrap (published its Gloo address) and
// died; its agent opened generation 2. Rank 0, bootstrapping generation 1, waited in Gloo for
// rank 1 to connect (5 x init_timeout) while the others moved on. Now the opening of generation
// 2 abandons generation 1 at once, and rank 0 and the replacement meet at generation 2.
TEST(ElasticGroupTest, GenerationOpenedMidBootstrapAbandonsIt) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  ElasticGroupOptions o = Fast();
  o.init_timeout = absl::Seconds(10);
  auto groups = JoinAll(2, store, factory, o);
  groups[1].reset();  // Rank 1 dies...
  // ... after joining generation 1 and publishing its address there. 127.0.0.2 compares above
  // rank 0's 127.0.0.1, so rank 0 is the pair's listening side and waits for a connection.
  ASSERT_EQ(*recovery::OpenNextGeneration(store, "world", 0, "rank 1 failed"), 1);
  ASSERT_TRUE(store.Set(recovery::MemberKey("world", 1), "1").ok());
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(9);
  ASSERT_EQ(::inet_pton(AF_INET, "127.0.0.2", &in->sin_addr), 1);
  const std::vector<char> dead = gloo::transport::tcp::Address(ss).bytes();
  ASSERT_TRUE(store
                  .Set(absl::StrCat(CommKeyPrefix("world", 1), "/1"),
                       absl::string_view(dead.data(), dead.size()))
                  .ok());
  std::thread agent([&] {
    absl::SleepFor(absl::Milliseconds(300));
    auto g = recovery::PublishRankFailure(store, "world", 1, "exit -9");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(*g, 2);
  });
  const absl::Time start = absl::Now();
  auto c = groups[0]->Recover();
  agent.join();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(groups[0]->generation(), 1);
  EXPECT_TRUE(groups[0]->recovery_pending());
  EXPECT_FALSE(groups[0]->ready());

  std::unique_ptr<ElasticGroup> replacement;
  std::thread joiner([&] {
    auto g = ElasticGroup::Join(Ctx(1, 2, 1), ConnectorTo(store), factory, o);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)->generation(), 2);
    replacement = std::move(*g);
  });
  c = groups[0]->Recover();
  joiner.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->generation(), 2);
  ASSERT_NE(replacement, nullptr);
  std::thread t([&] {
    absl::Status st;
    EXPECT_EQ(SumOnce(*replacement, 2, &st), 3);
    EXPECT_TRUE(st.ok()) << st;
  });
  absl::Status st;
  EXPECT_EQ(SumOnce(*groups[0], 1, &st), 3);
  EXPECT_TRUE(st.ok()) << st;
  t.join();
}

}  // namespace
}  // namespace dgt::worker
