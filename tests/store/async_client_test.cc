// dgt::store::AsyncClient against the real in-process store server (both protocol families), and
// against sockets that misbehave: one that never answers, one that closes mid-reply, one that
// claims a huge value. Every callback is counted: each must run exactly once.
#include "dgt/store/async_client.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "dgt/store/client.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::store {
namespace {

namespace asio = boost::asio;

// Runs `io` until `done()` or 10 s.
template <typename Pred>
void RunUntil(asio::io_context& io, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done() && absl::Now() < deadline) {
    io.restart();  // Run out of work before: stopped.
    io.run_for(std::chrono::milliseconds(5));
  }
}

// Runs `io` for `ms` milliseconds, whatever it did before.
void RunFor(asio::io_context& io, int ms) {
  io.restart();
  io.run_for(std::chrono::milliseconds(ms));
}

AsyncClientOptions OptionsFor(uint16_t port, Protocol protocol) {
  AsyncClientOptions o;
  o.port = port;
  o.protocol = protocol;
  return o;
}

class AsyncClientServerTest : public ::testing::TestWithParam<Protocol> {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start().ok()); }

  std::unique_ptr<AsyncClient> Connected(const std::string& prefix = "") {
    AsyncClientOptions o = OptionsFor(server_.port(), GetParam());
    o.key_prefix = prefix;
    auto c = std::make_unique<AsyncClient>(io_.get_executor(), o);
    std::optional<absl::Status> s;
    c->Connect(absl::Seconds(5), [&](const absl::Status& st) { s = st; });
    RunUntil(io_, [&] { return s.has_value(); });
    EXPECT_TRUE(s.has_value() && s->ok()) << (s ? s->ToString() : "no answer");
    return c;
  }

  Server server_{ServerOptions{}};
  asio::io_context io_;
};

TEST_P(AsyncClientServerTest, EveryOperationAnswersOnce) {
  auto c = Connected();
  const absl::Duration t = absl::Seconds(5);
  std::vector<std::string> log;
  c->Set("k", "v1", t,
         [&](const absl::Status& s) { log.push_back(absl::StrCat("set ", s.ToString())); });
  c->Get("k", t, [&](const absl::StatusOr<std::string>& v) { log.push_back("get " + *v); });
  c->CompareSet("k", "v1", "v2", t,
                [&](const absl::StatusOr<std::string>& v) { log.push_back("cas " + *v); });
  c->CompareSet("k", "nope", "v3", t,
                [&](const absl::StatusOr<std::string>& v) { log.push_back("cas " + *v); });
  c->Add("n", 5, t,
         [&](const absl::StatusOr<int64_t>& v) { log.push_back(absl::StrCat("add ", *v)); });
  c->Add("n", -2, t,
         [&](const absl::StatusOr<int64_t>& v) { log.push_back(absl::StrCat("add ", *v)); });
  c->Check({"k", "n"}, t,
           [&](const absl::StatusOr<bool>& v) { log.push_back(absl::StrCat("check ", *v)); });
  c->Check({"k", "x"}, t,
           [&](const absl::StatusOr<bool>& v) { log.push_back(absl::StrCat("check ", *v)); });
  c->Wait({"k"}, t, [&](const absl::Status& s) { log.push_back("wait " + s.ToString()); });
  c->DeleteKey("k", t,
               [&](const absl::StatusOr<bool>& v) { log.push_back(absl::StrCat("del ", *v)); });
  c->DeleteKey("k", t,
               [&](const absl::StatusOr<bool>& v) { log.push_back(absl::StrCat("del ", *v)); });
  c->Flush(t, [&](const absl::Status& s) { log.push_back("flush " + s.ToString()); });
  RunUntil(io_, [&] { return log.size() >= 12; });
  RunFor(io_, 50);  // Nothing more may come.
  // The flush is done once the DELETE_KEYs went out, before their answers.
  EXPECT_EQ(log, (std::vector<std::string>{"set OK", "get v1", "cas v2", "cas v2", "add 5", "add 3",
                                           "check 1", "check 0", "wait OK", "flush OK", "del 1",
                                           "del 0"}));
}

TEST_P(AsyncClientServerTest, KeyPrefixNamesKeysAsTorchClientsDo) {
  auto slash = Connected("/");
  auto raw = Connected();
  std::optional<absl::StatusOr<std::string>> v;
  slash->Set("dgt/x", "1", absl::Seconds(5));
  raw->Flush(absl::Seconds(5), nullptr);
  // The same connection's SET went out before this GET.
  slash->Flush(absl::Seconds(5), [&](const absl::Status&) {
    raw->Get("/dgt/x", absl::Seconds(5), [&](const absl::StatusOr<std::string>& r) { v = r; });
  });
  RunUntil(io_, [&] { return v.has_value(); });
  ASSERT_TRUE(v.has_value());
  ASSERT_TRUE(v->ok()) << v->status();
  EXPECT_EQ(**v, "1");
}

TEST_P(AsyncClientServerTest, AWaitHoldsBackLaterRequestsThatExpectAnAnswer) {
  auto watcher = Connected();
  auto writer = Connected();
  std::vector<std::string> log;
  watcher->Wait({"ready"}, absl::Seconds(5),
                [&](const absl::Status& s) { log.push_back("wait " + s.ToString()); });
  watcher->Check({"other"}, absl::Seconds(5),
                 [&](const absl::StatusOr<bool>& v) { log.push_back(absl::StrCat("check ", *v)); });
  RunFor(io_, 100);
  EXPECT_TRUE(log.empty());  // The CHECK's answer would have come first.
  writer->Set("ready", "1", absl::Seconds(5));
  RunUntil(io_, [&] { return log.size() >= 2; });
  EXPECT_EQ(log, (std::vector<std::string>{"wait OK", "check 0"}));
}

TEST_P(AsyncClientServerTest, AWaitPastItsDeadlineFailsAndDropsTheConnection) {
  auto c = Connected();
  std::vector<absl::Status> waits;
  c->Wait({"never"}, absl::Milliseconds(200), [&](const absl::Status& s) { waits.push_back(s); });
  const absl::Time start = absl::Now();
  RunUntil(io_, [&] { return !waits.empty(); });
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0], absl::DeadlineExceededError(absl::StrCat("store 127.0.0.1:", server_.port(),
                                                               ": no reply to WAIT within 200ms")));
  std::vector<absl::Status> later;
  c->Set("k", "v", absl::Seconds(1), [&](const absl::Status& s) { later.push_back(s); });
  EXPECT_TRUE(later.empty());  // Never inside the call.
  RunUntil(io_, [&] { return !later.empty(); });
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].code(), absl::StatusCode::kUnavailable);
}

TEST_P(AsyncClientServerTest, ServerStoppedFailsPendingOperationsWithUnavailable) {
  auto c = Connected();
  std::vector<absl::Status> results;
  c->Wait({"never"}, absl::InfiniteDuration(),
          [&](const absl::Status& s) { results.push_back(s); });
  RunFor(io_, 50);
  server_.Stop();
  RunUntil(io_, [&] { return !results.empty(); });
  RunFor(io_, 50);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0], absl::UnavailableError(absl::StrCat("store 127.0.0.1:", server_.port(),
                                                            ": connection lost: End of file")));
}

TEST_P(AsyncClientServerTest, CloseCancelsPendingOperationsInsideIt) {
  auto c = Connected();
  int calls = 0;
  absl::Status last;
  c->Wait({"never"}, absl::InfiniteDuration(), [&](const absl::Status& s) {
    ++calls;
    last = s;
  });
  RunFor(io_, 20);
  c->Close();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(last.code(), absl::StatusCode::kCancelled);
  c->Get("k", absl::Seconds(1), [&](const absl::StatusOr<std::string>& v) {
    ++calls;
    last = v.status();
  });
  EXPECT_EQ(calls, 1);
  RunFor(io_, 20);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(last.code(), absl::StatusCode::kCancelled);
}

TEST_P(AsyncClientServerTest, DestroyedWithPendingOperationsLeavesNothingBehind) {
  int calls = 0;
  {
    auto c = Connected();
    c->Wait({"never"}, absl::InfiniteDuration(), [&](const absl::Status&) { ++calls; });
    c->Get("k", absl::Seconds(5), [&](const absl::StatusOr<std::string>&) { ++calls; });
  }
  EXPECT_EQ(calls, 2);
  RunFor(io_, 50);  // The aborted socket handlers run (ASan: no leak).
  EXPECT_EQ(calls, 2);
}

INSTANTIATE_TEST_SUITE_P(BothFamilies, AsyncClientServerTest,
                         ::testing::Values(Protocol::kV2, Protocol::kV1),
                         [](const ::testing::TestParamInfo<Protocol>& p) {
                           return p.param == Protocol::kV2 ? std::string("V2") : std::string("V1");
                         });

TEST(AsyncClientTest, AppendNeedsTheV2Protocol) {
  Server server{ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  asio::io_context io;
  AsyncClient c(io.get_executor(), OptionsFor(server.port(), Protocol::kV1));
  std::optional<absl::Status> s;
  c.Append("k", "v", absl::Seconds(1), [&](const absl::Status& st) { s = st; });
  RunUntil(io, [&] { return s.has_value(); });
  EXPECT_EQ(*s, absl::UnimplementedError(absl::StrCat("store 127.0.0.1:", server.port(),
                                                      ": APPEND needs the torch 2.x protocol")));
}

TEST(AsyncClientTest, AppendOnV2) {
  Server server{ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  asio::io_context io;
  AsyncClient c(io.get_executor(), OptionsFor(server.port(), Protocol::kV2));
  std::optional<absl::StatusOr<std::string>> v;
  c.Connect(absl::Seconds(5), nullptr);
  c.Append("k", "1,", absl::Seconds(5));
  c.Append("k", "2,", absl::Seconds(5));
  c.Get("k", absl::Seconds(5), [&](const absl::StatusOr<std::string>& r) { v = r; });
  RunUntil(io, [&] { return v.has_value(); });
  ASSERT_TRUE(v->ok()) << v->status();
  EXPECT_EQ(**v, "1,2,");
}

// A port with nothing listening.
uint16_t DeadPort() {
  Server s(ServerOptions{});
  EXPECT_TRUE(s.Start().ok());
  const uint16_t port = s.port();
  s.Stop();
  return port;
}

TEST(AsyncClientTest, ConnectRetriesUntilItsDeadlineAndNamesTheStore) {
  asio::io_context io;
  const uint16_t port = DeadPort();
  AsyncClient c(io.get_executor(), OptionsFor(port, Protocol::kV1));
  std::vector<absl::Status> connects;
  std::vector<absl::Status> ops;
  const absl::Time start = absl::Now();
  c.Connect(absl::Milliseconds(300), [&](const absl::Status& s) { connects.push_back(s); });
  c.Set("k", "v", absl::Seconds(5), [&](const absl::Status& s) { ops.push_back(s); });
  RunUntil(io, [&] { return !connects.empty() && !ops.empty(); });
  const absl::Duration took = absl::Now() - start;
  RunFor(io, 50);
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(2));
  const std::string why =
      absl::StrCat("cannot reach the store at 127.0.0.1:", port, ": Connection refused");
  ASSERT_EQ(connects.size(), 1u);
  EXPECT_EQ(connects[0], absl::DeadlineExceededError(why));
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0], absl::UnavailableError(why));
}

TEST(AsyncClientTest, ConnectsToAStoreThatStartsLater) {
  asio::io_context io;
  const uint16_t port = DeadPort();
  AsyncClient c(io.get_executor(), OptionsFor(port, Protocol::kV2));
  std::optional<absl::Status> connected;
  c.Connect(absl::Seconds(5), [&](const absl::Status& s) { connected = s; });
  RunFor(io, 250);
  ServerOptions so;
  so.port = port;
  Server server(so);
  ASSERT_TRUE(server.Start().ok());
  RunUntil(io, [&] { return connected.has_value(); });
  ASSERT_TRUE(connected.has_value());
  EXPECT_TRUE(connected->ok()) << *connected;
}

// A peer that accepts and reads but behaves as `reply` says once it read `after` bytes.
class FakePeer {
 public:
  FakePeer(asio::io_context& io, std::string reply, size_t after, bool close_after_reply)
      : acceptor_(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        socket_(io),
        reply_(std::move(reply)),
        after_(after),
        close_(close_after_reply) {
    acceptor_.async_accept(socket_, [this](boost::system::error_code ec) {
      if (!ec) Read();
    });
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  size_t received() const { return received_; }

 private:
  void Read() {
    socket_.async_read_some(asio::buffer(buf_), [this](boost::system::error_code ec, size_t n) {
      if (ec) return;
      received_ += n;
      if (received_ >= after_ && !replied_) {
        replied_ = true;
        asio::async_write(socket_, asio::buffer(reply_), [this](boost::system::error_code, size_t) {
          boost::system::error_code ignored;
          if (close_) socket_.close(ignored);
        });
      }
      if (!close_ || !replied_) Read();
    });
  }

  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::socket socket_;
  std::string reply_;
  size_t after_;
  bool close_;
  bool replied_ = false;
  size_t received_ = 0;
  std::array<char, 1024> buf_{};
};

TEST(AsyncClientTest, APeerThatNeverAnswersHitsEachDeadlineOnce) {
  asio::io_context io;
  FakePeer peer(io, "", SIZE_MAX, false);
  AsyncClient c(io.get_executor(), OptionsFor(peer.port(), Protocol::kV1));
  std::vector<absl::Status> get;
  std::vector<absl::Status> check;
  c.Connect(absl::Seconds(5), nullptr);
  c.Get("k", absl::Milliseconds(200),
        [&](const absl::StatusOr<std::string>& v) { get.push_back(v.status()); });
  c.Check({"k"}, absl::Seconds(30),
          [&](const absl::StatusOr<bool>& v) { check.push_back(v.status()); });
  const absl::Time start = absl::Now();
  RunUntil(io, [&] { return !get.empty() && !check.empty(); });
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  RunFor(io, 50);
  const std::string store = absl::StrCat("store 127.0.0.1:", peer.port());
  ASSERT_EQ(get.size(), 1u);
  EXPECT_EQ(get[0], absl::DeadlineExceededError(store + ": no reply to GET within 200ms"));
  ASSERT_EQ(check.size(), 1u);
  EXPECT_EQ(check[0], absl::UnavailableError(
                          store + ": the connection was dropped after GET timed out (200ms)"));
}

TEST(AsyncClientTest, AV2OpeningNeverAnsweredFailsConnect) {
  asio::io_context io;
  FakePeer peer(io, "", SIZE_MAX, false);
  AsyncClient c(io.get_executor(), OptionsFor(peer.port(), Protocol::kV2));
  std::vector<absl::Status> connects;
  c.Connect(absl::Milliseconds(200), [&](const absl::Status& s) { connects.push_back(s); });
  RunUntil(io, [&] { return !connects.empty(); });
  RunFor(io, 50);
  ASSERT_EQ(connects.size(), 1u);
  EXPECT_EQ(connects[0],
            absl::DeadlineExceededError(absl::StrCat(
                "cannot reach the store at 127.0.0.1:", peer.port(),
                ": connected, but the torch 2.x VALIDATE/PING opening was not answered (a torch "
                "1.x store?)")));
}

TEST(AsyncClientTest, APeerClosingMidReplyFailsTheRequest) {
  asio::io_context io;
  // Half of a GET reply's u64 length, then the connection closes.
  FakePeer peer(io, std::string("\x05\x00\x00\x00", 4), 1, true);
  AsyncClient c(io.get_executor(), OptionsFor(peer.port(), Protocol::kV1));
  std::vector<absl::Status> get;
  c.Connect(absl::Seconds(5), nullptr);
  c.Get("k", absl::Seconds(5),
        [&](const absl::StatusOr<std::string>& v) { get.push_back(v.status()); });
  RunUntil(io, [&] { return !get.empty(); });
  RunFor(io, 50);
  ASSERT_EQ(get.size(), 1u);
  EXPECT_EQ(get[0], absl::UnavailableError(absl::StrCat("store 127.0.0.1:", peer.port(),
                                                        ": connection lost: End of file")));
}

TEST(AsyncClientTest, AReplyOverTheValueLimitIsRefusedBeforeAllocating) {
  asio::io_context io;
  std::string huge_length(8, '\xff');  // u64 2^64-1.
  FakePeer peer(io, huge_length, 1, false);
  AsyncClientOptions o = OptionsFor(peer.port(), Protocol::kV1);
  o.max_value_bytes = 1024;
  AsyncClient c(io.get_executor(), o);
  std::vector<absl::Status> get;
  c.Connect(absl::Seconds(5), nullptr);
  c.Get("k", absl::Seconds(5),
        [&](const absl::StatusOr<std::string>& v) { get.push_back(v.status()); });
  RunUntil(io, [&] { return !get.empty(); });
  ASSERT_EQ(get.size(), 1u);
  EXPECT_EQ(get[0], absl::DataLossError(absl::StrCat(
                        "store 127.0.0.1:", peer.port(),
                        ": bad reply to GET: value length 18446744073709551615 exceeds the limit "
                        "of 1024 bytes")));
}

TEST(AsyncClientTest, BytesNobodyAskedForBreakTheConnection) {
  asio::io_context io;
  FakePeer peer(io, "\x01", 1, false);
  AsyncClient c(io.get_executor(), OptionsFor(peer.port(), Protocol::kV1));
  std::vector<absl::Status> results;
  c.Connect(absl::Seconds(5), nullptr);
  c.Set("k", "v", absl::Seconds(5), [&](const absl::Status& s) { results.push_back(s); });
  RunUntil(io, [&] { return !results.empty(); });
  RunFor(io, 100);
  c.Flush(absl::Seconds(1), [&](const absl::Status& s) { results.push_back(s); });
  RunUntil(io, [&] { return results.size() >= 2; });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1],
            absl::UnavailableError(absl::StrCat("store 127.0.0.1:", peer.port(),
                                                ": 1 bytes arrived that answer no request")));
}

}  // namespace
}  // namespace dgt::store
