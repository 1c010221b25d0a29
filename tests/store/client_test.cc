// dgt::store::Client behaviour beyond the shared Store suite: deadlines on connect, reconnect
// with backoff after the server restarts, what is and is not retried, and the 2.x-only calls.
#include "dgt/store/client.h"

#include <atomic>
#include <memory>
#include <thread>

#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::store {
namespace {

ClientOptions OptionsFor(uint16_t port, absl::Duration timeout = absl::Seconds(2)) {
  ClientOptions o;
  o.port = port;
  o.timeout = timeout;
  return o;
}

// A port with nothing listening: bind a server, note its port, stop it.
uint16_t DeadPort() {
  Server s(ServerOptions{});
  EXPECT_TRUE(s.Start().ok());
  uint16_t port = s.port();
  s.Stop();
  return port;
}

TEST(ClientTest, ConnectHasADeadline) {
  absl::Time start = absl::Now();
  auto c = Client::Connect(OptionsFor(DeadPort(), absl::Milliseconds(300)));
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(ClientTest, RejectsPortZeroAndEmptyHost) {
  EXPECT_EQ(Client::Connect(OptionsFor(0)).status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions o = OptionsFor(1);
  o.host = "";
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClientTest, ConnectRetriesUntilTheServerComesUp) {
  uint16_t port = DeadPort();
  ServerOptions so;
  so.port = port;
  Server late(so);
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(150));
    EXPECT_TRUE(late.Start().ok());
  });
  auto c = Client::Connect(OptionsFor(port, absl::Seconds(5)));
  starter.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*(*c)->Add("n", 1), 1);
}

TEST(ClientTest, ReconnectsAfterServerRestartAndRetriesIdempotentCalls) {
  auto first = std::make_unique<Server>(ServerOptions{});
  ASSERT_TRUE(first->Start().ok());
  uint16_t port = first->port();
  auto c = Client::Connect(OptionsFor(port, absl::Seconds(5)));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Set("a", "1").ok());
  first.reset();  // Server gone; its data with it.

  ServerOptions so;
  so.port = port;
  Server second(so);
  ASSERT_TRUE(second.Start().ok());
  // NUM_KEYS is safe to repeat: the broken connection is replaced and the call succeeds.
  EXPECT_EQ(*(*c)->NumKeys(), 0);
  EXPECT_EQ(*(*c)->Add("a", 2), 2);
}

TEST(ClientTest, NonIdempotentCallOnBrokenConnectionIsUnavailable) {
  auto first = std::make_unique<Server>(ServerOptions{});
  ASSERT_TRUE(first->Start().ok());
  uint16_t port = first->port();
  auto c = Client::Connect(OptionsFor(port, absl::Seconds(5)));
  ASSERT_TRUE(c.ok());
  first.reset();
  ServerOptions so;
  so.port = port;
  Server second(so);
  ASSERT_TRUE(second.Start().ok());
  // ADD is not repeated on its own: the caller learns the connection broke...
  EXPECT_EQ((*c)->Add("n", 1).status().code(), absl::StatusCode::kUnavailable);
  // ...and the next call reconnects.
  EXPECT_EQ(*(*c)->Add("n", 1), 1);
}

TEST(ClientTest, AddOnNonIntegerClosesOnlyThatConnection) {
  Server s(ServerOptions{});
  ASSERT_TRUE(s.Start().ok());
  auto c = Client::Connect(OptionsFor(s.port()));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Set("text", "abc").ok());
  EXPECT_EQ((*c)->Add("text", 1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*(*c)->Get("text"), "abc");
}

TEST(ClientTest, V2OnlyCalls) {
  Server s(ServerOptions{});
  ASSERT_TRUE(s.Start().ok());
  auto c = Client::Connect(OptionsFor(s.port()));
  ASSERT_TRUE(c.ok());
  Client& client = **c;
  auto rtt = client.Ping(0xabcdef01);
  ASSERT_TRUE(rtt.ok()) << rtt.status();
  EXPECT_LT(*rtt, absl::Seconds(1));

  EXPECT_EQ(*client.QueueLen("q"), 0);
  EXPECT_EQ(*client.QueuePop("q"), std::nullopt);
  ASSERT_TRUE(client.QueuePush("q", "first").ok());
  ASSERT_TRUE(client.QueuePush("q", "").ok());
  EXPECT_EQ(*client.QueueLen("q"), 2);
  EXPECT_TRUE(*client.Check({"q"}));  // A non-empty queue counts as present.
  EXPECT_EQ(*client.NumKeys(), 0);    // ...but not as a key.
  EXPECT_EQ(*client.QueuePop("q"), std::optional<std::string>("first"));
  EXPECT_EQ(*client.QueuePop("q"), std::optional<std::string>(""));
  EXPECT_EQ(*client.QueuePop("q"), std::nullopt);

  ASSERT_TRUE(client.Set("b", "1").ok());
  ASSERT_TRUE(client.Set("a", "2").ok());
  EXPECT_EQ(*client.ListKeys(), (std::vector<std::string>{"a", "b"}));
}

TEST(ClientTest, V1RefusesV2OnlyCalls) {
  Server s(ServerOptions{});
  ASSERT_TRUE(s.Start().ok());
  ClientOptions o = OptionsFor(s.port());
  o.protocol = Protocol::kV1;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Ping().status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*c)->QueuePush("q", "x").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*c)->ListKeys().status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ClientTest, ManyClientsOneWaitWakesAll) {
  Server s(ServerOptions{});
  ASSERT_TRUE(s.Start().ok());
  constexpr int kWaiters = 16;
  std::vector<std::thread> waiters;
  std::atomic<int> woken{0};
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      auto c = Client::Connect(OptionsFor(s.port(), absl::Seconds(5)));
      ASSERT_TRUE(c.ok());
      if ((*c)->Wait({"go"}, absl::Seconds(5)).ok()) ++woken;
    });
  }
  // Set once every waiter is registered.
  absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (s.Stats().pending_waits < kWaiters && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto setter = Client::Connect(OptionsFor(s.port()));
  ASSERT_TRUE((*setter)->Set("go", "1").ok());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
  EXPECT_EQ(s.Stats().pending_waits, 0u);
}

}  // namespace
}  // namespace dgt::store
