#include "dgt/worker/gloo_communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dgt/store/memory_store.h"
#include "gloo/transport/tcp/address.h"
#include "gtest/gtest.h"

namespace dgt::worker {
namespace {

CommunicatorOptions Opts(int rank, int size, int generation = 0) {
  CommunicatorOptions o;
  o.rank = rank;
  o.size = size;
  o.generation = generation;
  o.key_prefix = CommKeyPrefix("test", generation);
  o.init_timeout = absl::Seconds(10);
  o.op_timeout = absl::Seconds(10);
  return o;
}

// Runs fn(rank, comm) on `size` threads with communicators of one generation.
void RunGroup(int size, const std::function<void(int, Communicator&)>& fn, store::Store& store,
              int generation = 0) {
  GlooCommunicatorFactory factory;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = factory.Create(store, Opts(r, size, generation));
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), r);
      EXPECT_EQ((*comm)->size(), size);
      EXPECT_EQ((*comm)->generation(), generation);
      fn(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicatorTest, CollectivesGiveExactResults) {
  store::MemoryStore store;
  RunGroup(
      3,
      [](int r, Communicator& c) {
        std::vector<int64_t> v = {r + 1, 10 * (r + 1), -r};
        ASSERT_TRUE(c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
        EXPECT_EQ(v, (std::vector<int64_t>{6, 60, -3}));
        std::vector<float> f = {0.5f * (r + 1), 0.1f};
        ASSERT_TRUE(c.AllReduce(absl::MakeSpan(f), ReduceOp::kSum).ok());
        EXPECT_EQ(f[0], 3.0f);
        EXPECT_EQ(f[1], (0.1f + 0.1f) + 0.1f);  // Rank order on every rank.
        std::vector<int64_t> m = {r, r};
        ASSERT_TRUE(c.AllReduce(absl::MakeSpan(m.data(), 1), ReduceOp::kMin).ok());
        ASSERT_TRUE(c.AllReduce(absl::MakeSpan(m.data() + 1, 1), ReduceOp::kMax).ok());
        EXPECT_EQ(m, (std::vector<int64_t>{0, 2}));
        std::vector<int64_t> b = {r == 1 ? 42 : 0, r == 1 ? 7 : 0};
        ASSERT_TRUE(c.Broadcast(absl::MakeSpan(b), 1).ok());
        EXPECT_EQ(b, (std::vector<int64_t>{42, 7}));
        EXPECT_TRUE(c.Barrier().ok());
        EXPECT_EQ(c.Broadcast(absl::MakeSpan(b), 3).code(), absl::StatusCode::kInvalidArgument);
      },
      store);
}

TEST(GlooCommunicatorTest, SingleRankIsTrivial) {
  store::MemoryStore store;
  RunGroup(
      1,
      [](int, Communicator& c) {
        std::vector<int64_t> v = {5};
        ASSERT_TRUE(c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
        EXPECT_EQ(v[0], 5);
      },
      store);
}

TEST(GlooCommunicatorTest, AbortUnblocksACollectiveWaitingForAPeer) {
  store::MemoryStore store;
  RunGroup(
      2,
      [](int r, Communicator& c) {
        if (r == 1) {
          absl::SleepFor(absl::Milliseconds(200));
          c.Abort("test abort");
          EXPECT_TRUE(c.aborted());
          std::vector<int64_t> v = {1};
          EXPECT_EQ(c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum).code(),
                    absl::StatusCode::kAborted);
          // Stay connected until rank 0 is done: closing would fail its collective differently.
          absl::SleepFor(absl::Milliseconds(1500));
          return;
        }
        // Rank 0 waits for rank 1, which never joins this collective; its own Abort comes from
        // another thread.
        std::thread aborter([&c] {
          absl::SleepFor(absl::Milliseconds(300));
          c.Abort("watcher says so");
        });
        const absl::Time start = absl::Now();
        std::vector<int64_t> v = {1};
        absl::Status s = c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
        aborter.join();
        EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
        EXPECT_EQ(s.message(), "communicator generation 0 aborted: watcher says so");
        EXPECT_LT(absl::Now() - start, absl::Seconds(3));
        // Once failed, later calls fail at once.
        EXPECT_FALSE(c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
      },
      store);
}

TEST(GlooCommunicatorTest, OperationTimeoutIsDeadlineExceeded) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o = Opts(r, 2);
      o.op_timeout = absl::Milliseconds(300);
      auto c = factory.Create(store, o);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> v = {1};
  absl::Status s = comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

TEST(GlooCommunicatorTest, BootstrapWithoutPeersTimesOut) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  CommunicatorOptions o = Opts(0, 2);
  o.init_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto c = factory.Create(store, o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(factory.Create(store, Opts(2, 2)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, PeerDeathFailsTheCollective) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  std::vector<std::unique_ptr<Communicator>> comms(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto c = factory.Create(store, Opts(r, 3));
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  comms[2].reset();  // Rank 2 "dies": its sockets close.
  threads.clear();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int64_t> v = {1};
      absl::Status s = comms[r]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    });
  }
  for (auto& t : threads) t.join();
}

// What a rank that died right after publishing its pair addresses leaves in the store: rank
// `rank` of a 2-rank group at 127.0.0.2, which compares above 127.0.0.1, so rank 0 (on
// 127.0.0.1) takes the listening side of the pair and waits for a connection that never comes.
void PublishDeadPeer(store::Store& store, const CommunicatorOptions& o, int rank) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(9);
  ASSERT_EQ(::inet_pton(AF_INET, "127.0.0.2", &in->sin_addr), 1);
  const std::vector<char> bytes = gloo::transport::tcp::Address(ss).bytes();
  ASSERT_TRUE(
      store
          .Set(absl::StrCat(o.key_prefix, "/", rank), absl::string_view(bytes.data(), bytes.size()))
          .ok());
}

TEST(GlooCommunicatorTest, BootstrapWithADeadPeerHonoursItsDeadline) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  CommunicatorOptions o = Opts(0, 2, 1);
  o.init_timeout = absl::Milliseconds(800);
  PublishDeadPeer(store, o, 1);
  const absl::Time start = absl::Now();
  auto c = factory.Create(store, o);
  // Gloo alone waits 5 x its timeout for the peer to connect.
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(800 + 700));
}

TEST(GlooCommunicatorTest, CancelAbandonsABootstrapWaitingForADeadPeer) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  CommunicatorOptions o = Opts(0, 2, 1);
  o.init_timeout = absl::Seconds(30);
  o.cancel = std::make_shared<BootstrapCancel>();
  PublishDeadPeer(store, o, 1);
  std::thread canceller([cancel = o.cancel] {
    absl::SleepFor(absl::Milliseconds(300));
    cancel->Cancel("generation 2 was opened");
  });
  const absl::Time start = absl::Now();
  auto c = factory.Create(store, o);
  canceller.join();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(),
                                "gloo bootstrap of generation 1 rank 0/2: bootstrap cancelled: "
                                "generation 2 was opened"))
      << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(GlooCommunicatorTest, ABootstrapCancelledBeforeItStartsFailsAtOnce) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  CommunicatorOptions o = Opts(0, 3, 1);
  o.init_timeout = absl::Seconds(30);
  o.cancel = std::make_shared<BootstrapCancel>();
  o.cancel->Cancel("already over");  // Cancelled before it starts: fails at once.
  const absl::Time start = absl::Now();
  auto c = factory.Create(store, o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(GlooCommunicatorTest, AnUncancelledBootstrapStillWorks) {
  store::MemoryStore store;
  GlooCommunicatorFactory factory;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o = Opts(r, 3);
      o.cancel = std::make_shared<BootstrapCancel>();
      auto c = factory.Create(store, o);
      ASSERT_TRUE(c.ok()) << c.status();
      std::vector<int64_t> v = {r + 1};
      ASSERT_TRUE((*c)->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
      EXPECT_EQ(v[0], 6);
      o.cancel->Cancel("too late to matter");
      EXPECT_FALSE((*c)->aborted());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace dgt::worker
