#include "agent/coord/failure_publisher.h"

#include <memory>
#include <string>
#include <vector>

#include "boost/asio.hpp"
#include "common/store_keys.h"
#include "dgt/store/client.h"
#include "dgt/store/server.h"
#include "dgt/worker/recovery_keys.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

namespace recovery = worker::recovery;

// A FailurePublisher on an io_context, against the real store server.
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
  // One connection for both publications (and the test's own).
  EXPECT_EQ(server_.Stats().connections, 2u);
}

// A trainer that never joined in the C++ runtime's namespace (no member key there): generation
// 0 -> 1 there, while the torch namespace moves from the generation its member key names.
TEST_F(AsyncFailurePublisherTest, AlsoPublishesTheKeysTorchClientsSee) {
  FailurePublisher p(io_.get_executor(), {});
  ASSERT_TRUE(store_->Set("/" + recovery::MemberKey("world", 2), "5").ok());
  ASSERT_TRUE(store_->Set("/" + recovery::GenerationKey("world"), "5").ok());
  auto g = Publish(p, server_.port(), 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 6);  // The torch namespace's generation, the later one.
  EXPECT_EQ(*store_->Get("/" + recovery::GenerationKey("world")), "6");
  EXPECT_EQ(*store_->Get("/" + recovery::FailedKey("world", 6)), "2,");
  EXPECT_EQ(*store_->Get("/" + recovery::OpenKey("world", 6)), "SIGKILL");
  EXPECT_EQ(*store_->Get(recovery::GenerationKey("world")), "1");
  EXPECT_EQ(*store_->Get(recovery::FailedKey("world", 1)), "2,");
  EXPECT_EQ(*store_->Get(recovery::OpenKey("world", 1)), "SIGKILL");
}

TEST_F(AsyncFailurePublisherTest, PrepareConnectsAheadAndPublishReusesIt) {
  FailurePublisher p(io_.get_executor(), {});
  p.Prepare("127.0.0.1", server_.port());
  // Connected before any failure (the test's own connection is the first).
  RunUntil([&] { return server_.Stats().connections == 2; });
  ASSERT_EQ(server_.Stats().connections, 2u);
  ASSERT_TRUE(store_->Set(recovery::MemberKey("world", 1), "0").ok());
  auto g = Publish(p, server_.port(), 1);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);
  EXPECT_EQ(*store_->Get(recovery::OpenKey("world", 1)), "SIGKILL");
  EXPECT_EQ(server_.Stats().connections, 2u);  // The prepared one.
  // A store at another address: connected anew, the first connection closed.
  store::Server other{store::ServerOptions{}};
  ASSERT_TRUE(other.Start().ok());
  g = Publish(p, other.port(), 0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);
  EXPECT_EQ(other.Stats().connections, 1u);
  RunUntil([&] { return server_.Stats().connections == 1; });
  EXPECT_EQ(server_.Stats().connections, 1u);
  other.Stop();
}

TEST_F(AsyncFailurePublisherTest, TheGroupNamesTheKeys) {
  FailurePublisher p(io_.get_executor(), {"trainers", absl::Seconds(5)});
  auto g = Publish(p, server_.port(), 3);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 1);  // Rank 3 never joined: generation 0 -> 1.
  EXPECT_EQ(*store_->Get(recovery::OpenKey("trainers", 1)), "SIGKILL");
  EXPECT_EQ(*store_->Get(recovery::FailedKey("trainers", 1)), "3,");
  EXPECT_FALSE(*store_->Check({recovery::GenerationKey("world")}));
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
