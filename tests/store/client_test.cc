// dgt::store::Client behaviour beyond the shared Store suite: deadlines on connect, reconnect
// with backoff after the server restarts, what is and is not retried, and the 2.x-only calls.
#include "dgt/store/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
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

// A torch 1.x store reads the 2.x VALIDATE as the start of another request and never answers:
// the error says which protocol to use instead of only "timed out".
TEST(ClientTest, V2HandshakeWithoutAnswerNamesProtocolV1) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);  // The kernel accepts; nothing ever answers.
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto c = Client::Connect(OptionsFor(ntohs(addr.sin_port), absl::Milliseconds(300)));
  ::close(listener);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find(absl::StrCat(
                "no answer to the torch 2.x handshake (a torch 1.x store needs protocol v1)")),
            absl::string_view::npos)
      << c.status();
}

// The opening has a deadline of its own: against a torch 1.x store the error naming protocol v1
// comes after handshake_timeout, not after the whole (30 s default in `dgt store`) timeout, and
// without reconnect attempts until that timeout.
TEST(ClientTest, V2HandshakeHasItsOwnDeadline) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);  // The kernel accepts; nothing ever answers.
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClientOptions options = OptionsFor(ntohs(addr.sin_port), absl::Seconds(60));
  options.handshake_timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  auto c = Client::Connect(options);
  const absl::Duration took = absl::Now() - start;
  ::close(listener);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find(
                "no answer to the torch 2.x handshake (a torch 1.x store needs protocol v1)"),
            absl::string_view::npos)
      << c.status();
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(10)) << "waited for the whole timeout";
}

// A store that hangs up on the 2.x opening (as torch 1.x's may) is retried only within
// handshake_timeout, not until the whole timeout.
TEST(ClientTest, V2HandshakeHangUpsStopAfterTheHandshakeTimeout) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  // Accepts and closes each connection; ends when the listener is shut down.
  std::thread hang_up([listener] {
    while (true) {
      int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;
      ::close(fd);
    }
  });
  ClientOptions options = OptionsFor(ntohs(addr.sin_port), absl::Seconds(60));
  options.handshake_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto c = Client::Connect(options);
  const absl::Duration took = absl::Now() - start;
  ::shutdown(listener, SHUT_RDWR);
  hang_up.join();
  ::close(listener);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "no answer to the torch 2.x handshake (a torch 1.x store needs protocol v1)"),
            absl::string_view::npos)
      << c.status();
  EXPECT_LT(took, absl::Seconds(10)) << "retried until the whole timeout";
}

// An infinite (or far) timeout is a wait without a deadline, not an overflow: PollTimeoutMs once
// turned it into poll(0), so a reply not yet in the socket was "timed out" at once.
TEST(ClientTest, InfiniteAndHugeTimeoutsWait) {
  Server s(ServerOptions{});
  ASSERT_TRUE(s.Start().ok());
  for (absl::Duration timeout : {absl::InfiniteDuration(), absl::Seconds(1e18)}) {
    auto c = Client::Connect(OptionsFor(s.port(), timeout));
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string key = absl::StrCat("late-", absl::FormatDuration(timeout));
    // GET blocks in the server until the key exists; the client polls for the reply meanwhile.
    std::thread setter([&] {
      absl::Time give_up = absl::Now() + absl::Seconds(5);
      while (s.Stats().pending_waits < 1 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      auto other = Client::Connect(OptionsFor(s.port()));
      ASSERT_TRUE(other.ok());
      ASSERT_TRUE((*other)->Set(key, "v").ok());
    });
    auto v = (*c)->Get(key);
    setter.join();
    ASSERT_TRUE(v.ok()) << absl::FormatDuration(timeout) << ": " << v.status();
    EXPECT_EQ(*v, "v");
    EXPECT_TRUE((*c)->Wait({key}, timeout).ok());
  }
}

}  // namespace
}  // namespace dgt::store
