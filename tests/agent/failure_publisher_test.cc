#include "agent/failure_publisher.h"

#include <memory>
#include <string>
#include <vector>

#include "boost/asio.hpp"
#include "common/mutex.h"
#include "common/store_keys.h"
#include "dgt/store/client.h"
#include "dgt/store/memory_store.h"
#include "dgt/store/server.h"
#include "dgt/worker/recovery_keys.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

namespace recovery = worker::recovery;

// Forwards to a store the test keeps (the publisher owns what the connector returns).
class Borrowed final : public store::Store {
 public:
  explicit Borrowed(store::Store* s) : s_(s) {}
  absl::Status Set(absl::string_view k, absl::string_view v) override { return s_->Set(k, v); }
  absl::StatusOr<std::string> Get(absl::string_view k) override { return s_->Get(k); }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override { return s_->Add(k, d); }
  absl::StatusOr<std::string> CompareSet(absl::string_view k, absl::string_view e,
                                         absl::string_view d) override {
    return s_->CompareSet(k, e, d);
  }
  absl::StatusOr<bool> Check(const std::vector<std::string>& k) override { return s_->Check(k); }
  absl::Status Wait(const std::vector<std::string>& k, absl::Duration t) override {
    return s_->Wait(k, t);
  }
  absl::StatusOr<bool> DeleteKey(absl::string_view k) override { return s_->DeleteKey(k); }
  absl::StatusOr<int64_t> NumKeys() override { return s_->NumKeys(); }
  absl::Status Append(absl::string_view k, absl::string_view v) override {
    return s_->Append(k, v);
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& k) override {
    return s_->MultiGet(k);
  }
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& i) override {
    return s_->MultiSet(i);
  }

 private:
  store::Store* s_;
};

// absl::Notification's subset, on dgt::Mutex: TSan sees std::mutex, not Debian's uninstrumented
// Abseil.
class Event {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
    cv_.SignalAll();
  }
  bool HasBeenNotified() {
    MutexLock lock(&mu_);
    return notified_;
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (!notified_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
    }
    return notified_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<int> PublishAndWait(FailurePublisher& p, const std::string& host, int port,
                                   int rank) {
  Event done;
  absl::StatusOr<int> result = absl::UnknownError("not called");
  p.Publish(host, port, rank, "SIGKILL", [&](absl::StatusOr<int> r) {
    result = std::move(r);
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  return result;
}

TEST(FailurePublisherTest, OpensTheNextGenerationAndListsTheRank) {
  store::MemoryStore mem;
  std::vector<std::string> connects;
  FailurePublisher p(
      {},
      [&](const std::string& host, int port,
          absl::Duration timeout) -> absl::StatusOr<std::unique_ptr<store::Store>> {
        connects.push_back(absl::StrCat(host, ":", port, " ", absl::FormatDuration(timeout)));
        return std::make_unique<Borrowed>(&mem);
      });
  // Rank 2 last joined generation 3.
  ASSERT_TRUE(mem.Set(recovery::MemberKey("world", 2), "3").ok());
  ASSERT_TRUE(mem.Set(recovery::GenerationKey("world"), "3").ok());
  auto g = PublishAndWait(p, "10.0.0.1", 29500, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 4);
  EXPECT_EQ(*mem.Get(recovery::GenerationKey("world")), "4");
  EXPECT_EQ(*mem.Get(recovery::FailedKey("world", 4)), "2,");
  EXPECT_EQ(*mem.Get(recovery::OpenKey("world", 4)), "SIGKILL");
  // A second failure (rank 0, member of 4 now) reuses the connection.
  ASSERT_TRUE(mem.Set(recovery::MemberKey("world", 0), "4").ok());
  g = PublishAndWait(p, "10.0.0.1", 29500, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 5);
  EXPECT_EQ(*mem.Get(recovery::FailedKey("world", 5)), "0,");
  EXPECT_EQ(connects, std::vector<std::string>{"10.0.0.1:29500 5s"});
}

// torch TCPStore clients (the dgt Python package) see every key behind '/': the failure is
// published there too, from the generation their member key names.
TEST(FailurePublisherTest, AlsoPublishesTheKeysTorchClientsSee) {
  store::MemoryStore mem;
  FailurePublisher p({},
                     [&](const std::string&, int,
                         absl::Duration) -> absl::StatusOr<std::unique_ptr<store::Store>> {
                       return std::make_unique<Borrowed>(&mem);
                     });
  // A Python trainer's rank 2 last joined generation 5 (torch client: "/" + key).
  ASSERT_TRUE(mem.Set("/" + recovery::MemberKey("world", 2), "5").ok());
  ASSERT_TRUE(mem.Set("/" + recovery::GenerationKey("world"), "5").ok());
  auto g = PublishAndWait(p, "10.0.0.1", 29500, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 6);  // The torch namespace's generation, the later one.
  EXPECT_EQ(*mem.Get("/" + recovery::GenerationKey("world")), "6");
  EXPECT_EQ(*mem.Get("/" + recovery::FailedKey("world", 6)), "2,");
  EXPECT_EQ(*mem.Get("/" + recovery::OpenKey("world", 6)), "SIGKILL");
  // The C++ runtime's namespace got it too (no member key there: generation 0 -> 1).
  EXPECT_EQ(*mem.Get(recovery::FailedKey("world", 1)), "2,");
  EXPECT_EQ(*mem.Get(recovery::OpenKey("world", 1)), "SIGKILL");
}

TEST(FailurePublisherTest, PrepareConnectsAheadAndPublishReusesIt) {
  store::MemoryStore mem;
  Event connected;
  std::vector<std::string> connects;
  FailurePublisher p({},
                     [&](const std::string& host, int port,
                         absl::Duration) -> absl::StatusOr<std::unique_ptr<store::Store>> {
                       connects.push_back(absl::StrCat(host, ":", port));
                       if (!connected.HasBeenNotified()) connected.Notify();
                       return std::make_unique<Borrowed>(&mem);
                     });
  p.Prepare("10.0.0.1", 29500);
  // Connected before any failure.
  ASSERT_TRUE(connected.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(mem.Set(recovery::MemberKey("world", 1), "0").ok());
  auto g = PublishAndWait(p, "10.0.0.1", 29500, 1);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);
  EXPECT_EQ(*mem.Get(recovery::OpenKey("world", 1)), "SIGKILL");
  // A store at another address: connected anew.
  ASSERT_TRUE(mem.Set(recovery::MemberKey("world", 0), "1").ok());
  g = PublishAndWait(p, "10.0.0.2", 29501, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 2);
  EXPECT_EQ(connects, (std::vector<std::string>{"10.0.0.1:29500", "10.0.0.2:29501"}));
}

TEST(FailurePublisherTest, ConnectErrorsNameTheStore) {
  FailurePublisher p(
      {"world", absl::Milliseconds(50)},
      [](const std::string&, int, absl::Duration) -> absl::StatusOr<std::unique_ptr<store::Store>> {
        return absl::UnavailableError("connection refused");
      });
  auto g = PublishAndWait(p, "10.0.0.9", 1234, 1);
  EXPECT_EQ(g.status(), absl::UnavailableError("store at 10.0.0.9:1234: connection refused"));
}

TEST(FailurePublisherTest, RealClientAgainstTheServer) {
  store::Server server(store::ServerOptions{});
  ASSERT_TRUE(server.Start().ok());
  FailurePublisher p({"trainers", absl::Seconds(5)}, FailurePublisher::ClientConnector());
  auto g = PublishAndWait(p, "127.0.0.1", server.port(), 3);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);  // Rank 3 never joined: generation 0 -> 1.
  server.Stop();
}

TEST(FailurePublisherTest, DestructorDropsQueuedWork) {
  Event release;
  int calls = 0;
  {
    FailurePublisher p({},
                       [&](const std::string&, int,
                           absl::Duration) -> absl::StatusOr<std::unique_ptr<store::Store>> {
                         release.WaitForNotificationWithTimeout(absl::Seconds(10));
                         return absl::UnavailableError("down");
                       });
    p.Publish("h", 1, 0, "x", [&](const absl::StatusOr<int>&) { ++calls; });
    p.Publish("h", 1, 1, "x", [&](const absl::StatusOr<int>&) { ++calls; });
    release.Notify();
  }
  EXPECT_LE(calls, 2);  // The first may have finished; nothing runs after destruction.
}

// The event-loop way: a FailurePublisher on an io_context, against the real store server.
class AsyncFailurePublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    store::ClientOptions o;
    o.port = server_.port();
    auto c = store::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    store_ = std::move(*c);
  }

  // Runs io_ until `done()` or 10 s.
  template <typename Pred>
  void RunUntil(Pred done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < deadline) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(5));
    }
  }

  absl::StatusOr<int> Publish(FailurePublisher& p, int port, int rank) {
    std::vector<absl::StatusOr<int>> results;
    p.Publish("127.0.0.1", port, rank, "SIGKILL",
              [&](const absl::StatusOr<int>& r) { results.push_back(r); });
    RunUntil([&] { return !results.empty(); });
    io_.restart();
    io_.run_for(std::chrono::milliseconds(20));
    EXPECT_EQ(results.size(), 1u);
    return results.empty() ? absl::UnknownError("not called") : results[0];
  }

  store::Server server_{store::ServerOptions{}};
  std::unique_ptr<store::Client> store_;
  boost::asio::io_context io_;
};

TEST_F(AsyncFailurePublisherTest, OpensTheNextGenerationInBothNamespaces) {
  FailurePublisher p(io_.get_executor(), {});
  // Rank 2 of a C++ trainer last joined generation 3; of a Python one (keys behind '/'), 5.
  ASSERT_TRUE(store_->Set(recovery::MemberKey("world", 2), "3").ok());
  ASSERT_TRUE(store_->Set(recovery::GenerationKey("world"), "3").ok());
  ASSERT_TRUE(store_->Set("/" + recovery::MemberKey("world", 2), "5").ok());
  ASSERT_TRUE(store_->Set("/" + recovery::GenerationKey("world"), "5").ok());
  auto g = Publish(p, server_.port(), 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 6);  // The later one.
  EXPECT_EQ(*store_->Get(recovery::GenerationKey("world")), "4");
  EXPECT_EQ(*store_->Get(recovery::FailedKey("world", 4)), "2,");
  EXPECT_EQ(*store_->Get(recovery::OpenKey("world", 4)), "SIGKILL");
  EXPECT_EQ(*store_->Get("/" + recovery::GenerationKey("world")), "6");
  EXPECT_EQ(*store_->Get("/" + recovery::FailedKey("world", 6)), "2,");
  EXPECT_EQ(*store_->Get("/" + recovery::OpenKey("world", 6)), "SIGKILL");
  // A second failure (rank 0, member of 4 now) on the kept connection.
  ASSERT_TRUE(store_->Set(recovery::MemberKey("world", 0), "4").ok());
  g = Publish(p, server_.port(), 0);
  ASSERT_TRUE(g.ok()) << g.status();
  // '/' namespace: rank 0 never joined there, so its report joins the current generation 6.
  EXPECT_EQ(*g, 6);
  EXPECT_EQ(*store_->Get(recovery::FailedKey("world", 5)), "0,");
  EXPECT_EQ(*store_->Get("/" + recovery::FailedKey("world", 6)), "2,0,");
}

TEST_F(AsyncFailurePublisherTest, AStoreRestartedUnderAKeptConnectionIsTriedOnceMore) {
  FailurePublisher p(io_.get_executor(), {});
  p.Prepare("127.0.0.1", server_.port());
  io_.run_for(std::chrono::milliseconds(300));  // Prepare connects.
  const uint16_t port = server_.port();
  server_.Stop();
  store::ServerOptions again;
  again.port = port;
  store::Server restarted(again);
  ASSERT_TRUE(restarted.Start().ok());
  auto g = Publish(p, port, 1);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);
  restarted.Stop();
}

TEST_F(AsyncFailurePublisherTest, AnUnreachableStoreIsNamed) {
  FailurePublisher p(io_.get_executor(), {"world", absl::Milliseconds(200)});
  const uint16_t port = server_.port();
  server_.Stop();
  auto g = Publish(p, port, 1);
  EXPECT_EQ(g.status(), absl::UnavailableError(absl::StrCat(
                            "cannot reach the store at 127.0.0.1:", port, ": Connection refused")));
}

TEST_F(AsyncFailurePublisherTest, DestroyedWithAPublicationPendingCallsNothing) {
  int calls = 0;
  {
    FailurePublisher p(io_.get_executor(), {});
    p.Publish("127.0.0.1", server_.port(), 0, "x", [&](const absl::StatusOr<int>&) { ++calls; });
    p.Publish("127.0.0.1", server_.port(), 1, "x", [&](const absl::StatusOr<int>&) { ++calls; });
  }
  io_.restart();
  io_.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls, 0);
}

TEST_F(AsyncFailurePublisherTest, PublishRestartGenerationSetsTheKeyTorchClientsRead) {
  PublishRestartGeneration(io_.get_executor(), "127.0.0.1", server_.port(), 3, 2);
  const std::string key = "/" + keys::RestartKey(3);
  RunUntil([&] { return *store_->Check({key}); });
  EXPECT_EQ(*store_->Get(key), "2");
}

}  // namespace
}  // namespace dgt::agent
