// Hostile and broken input against the wire server: each bad connection is closed with a logged
// reason, other clients carry on, nothing stored is lost, and memory does not follow a claimed
// length. Runs the server in this process so the test can read its log and its RSS.
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dgt/store/client.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testutil/hex.h"
#include "tests/testutil/raw_client.h"

namespace dgt::store {
namespace {

using ::dgt::testing::Hex;
using ::dgt::testing::RawClient;
using ::dgt::testing::Unhex;

// Resident set size of this process in bytes.
size_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink_));
    ServerOptions options;
    options.max_key_bytes = 1024;
    options.max_value_bytes = 64ull * 1024 * 1024;
    options.max_keys_per_request = 16;
    options.idle_timeout = absl::Milliseconds(400);
    server_ = std::make_unique<Server>(options);
    ASSERT_TRUE(server_->Start().ok());
    // A good client that stores something first and must keep it.
    good_ = std::make_unique<RawClient>(server_->port());
    ASSERT_TRUE(
        good_->Send(Unhex("00"
                          "0100000000000000"
                          "6b"
                          "0100000000000000"
                          "76")));
  }
  void TearDown() override {
    server_.reset();
    spdlog::set_default_logger(previous_);
  }
  std::string Log() {
    sink_->flush();
    return log_.str();
  }
  // The good client still reads its value (GET k → "v"); also keeps it from going idle.
  void ExpectGoodClientIntact() {
    ASSERT_TRUE(
        good_->Send(Unhex("02"
                          "0100000000000000"
                          "6b")));
    auto r = good_->Recv(9);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(Hex(*r), "010000000000000076");
  }
  // Sends `bytes` on a fresh connection and expects the server to close it.
  void ExpectClosed(const std::string& bytes, const std::string& logged) {
    RawClient c(server_->port());
    ASSERT_TRUE(c.Send(bytes));
    EXPECT_TRUE(c.ClosedByPeer()) << Hex(bytes);
    if (!logged.empty()) {
      EXPECT_NE(Log().find(logged), std::string::npos) << "log lacks '" << logged << "':\n"
                                                       << Log();
    }
    ExpectGoodClientIntact();
  }

  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<RawClient> good_;
};

TEST_F(HostileTest, OverLimitLengthsAndCounts) {
  // 1.x GET, key length 2^40.
  ExpectClosed(Unhex("02"
                     "0000000000010000"),
               "key length 1099511627776 exceeds the limit of 1024 bytes");
  // 1.x SET, value length 64 MiB + 1.
  ExpectClosed(Unhex("00"
                     "0100000000000000"
                     "61"
                     "0100000400000000"),
               "value length 67108865 exceeds the limit of 67108864 bytes");
  // 2.x MULTI_GET of 17 keys.
  ExpectClosed(Unhex("00cef7853c"
                     "0a"
                     "1100000000000000"),
               "key count 17 exceeds the limit of 16");
  // 1.x WAIT with a count of 2^64-1.
  ExpectClosed(Unhex("05"
                     "ffffffffffffffff"),
               "key count 18446744073709551615 exceeds the limit of 16");
}

TEST_F(HostileTest, UnknownOpcodes) {
  ExpectClosed(Unhex("09"), "unknown opcode 9 for the torch 1.x protocol");
  // 19 is past torch 2.13's last opcode (BARRIER 18).
  ExpectClosed(Unhex("00cef7853c"
                     "13"),
               "unknown opcode 19 for the torch 2.x protocol");
  // WATCH_KEY (1.x only) is refused by name.
  ExpectClosed(Unhex("07"
                     "0100000000000000"
                     "61"),
               "WATCH_KEY is not supported");
  // A 2.x-only opcode number on a 1.x stream.
  ExpectClosed(Unhex("0d"
                     "01020304"),
               "unknown opcode 13 for the torch 1.x protocol");
}

TEST_F(HostileTest, PortScannerProbes) {
  {
    RawClient c(server_->port());  // connect, close
    ASSERT_TRUE(c.connected());
  }
  ExpectClosed("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
               "unknown opcode 71 for the torch 1.x protocol");
  ExpectClosed("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  // TLS ClientHello start.
               "unknown opcode 22 for the torch 1.x protocol");
  ExpectClosed("SSH-2.0-OpenSSH_9.2\r\n", "unknown opcode 83 for the torch 1.x protocol");
}

TEST_F(HostileTest, TruncatedFrameThenHangUp) {
  {
    RawClient c(server_->port());
    // SET with a 5-byte key of which 2 arrive, then the client goes away.
    ASSERT_TRUE(
        c.Send(Unhex("00"
                     "0500000000000000"
                     "6162")));
  }
  ExpectGoodClientIntact();
  // Nothing half-applied: only k is stored.
  ASSERT_TRUE(good_->Send(Unhex("06")));
  EXPECT_EQ(Hex(*good_->Recv(8)), "0100000000000000");
}

TEST_F(HostileTest, RandomBytesNeverHurtOthers) {
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 40; ++i) {
    std::string junk(1 + rng() % 300, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    RawClient c(server_->port(), /*timeout_ms=*/1000);
    c.Send(junk);
    // Either closed (bad input) or waiting for more bytes that never come: both are fine; the
    // idle timeout reaps the second kind.
  }
  ExpectGoodClientIntact();
  ASSERT_TRUE(good_->Send(Unhex("06")));
  auto n = good_->Recv(8);
  ASSERT_TRUE(n.has_value());
  // Random frames may have stored keys of their own, but k is still there with its value.
  ExpectGoodClientIntact();
}

TEST_F(HostileTest, SilentClientIsClosedForIdlenessOthersCarryOn) {
  RawClient silent(server_->port(), /*timeout_ms=*/3000);
  ASSERT_TRUE(silent.connected());
  // A client blocked in WAIT is not idle: it must survive the sweep.
  RawClient waiter(server_->port(), /*timeout_ms=*/3000);
  ASSERT_TRUE(
      waiter.Send(Unhex("05"
                        "0100000000000000"
                        "0100000000000000"
                        "77")));
  for (int i = 0; i < 4; ++i) {  // Keep the good client active across the timeout.
    absl::SleepFor(absl::Milliseconds(200));
    ExpectGoodClientIntact();
  }
  absl::Time start = absl::Now();
  EXPECT_TRUE(silent.ClosedByPeer());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_NE(Log().find("(idle timeout)"), std::string::npos) << Log();
  // The waiter is still registered and is woken normally.
  ASSERT_TRUE(
      good_->Send(Unhex("00"
                        "0100000000000000"
                        "77"
                        "0100000000000000"
                        "31")));
  EXPECT_EQ(Hex(*waiter.Recv(1)), "00");
  ExpectGoodClientIntact();
}

TEST_F(HostileTest, MemoryDoesNotFollowAClaimedLength) {
  size_t before = RssBytes();
  std::vector<std::unique_ptr<RawClient>> liars;
  for (int i = 0; i < 20; ++i) {
    liars.push_back(std::make_unique<RawClient>(server_->port()));
    // SET k' with a claimed 60 MiB value (under the limit), of which 16 bytes arrive.
    ASSERT_TRUE(liars.back()->Send(Unhex("00"
                                         "0100000000000000"
                                         "78"
                                         "0000c00300000000") +
                                   std::string(16, 'x')));
  }
  ExpectGoodClientIntact();  // A round trip: the server has read the liars' bytes by now.
  absl::SleepFor(absl::Milliseconds(50));
  size_t grown = RssBytes() > before ? RssBytes() - before : 0;
  // 20 × 60 MiB claimed; allow a few MiB of noise.
  EXPECT_LT(grown, 8u * 1024 * 1024);
  EXPECT_EQ(server_->Stats().connections, 21u);
}

TEST_F(HostileTest, ConnectionLimitClosesTheExtraOnesWithAReason) {
  ServerOptions options;
  options.max_connections = 2;
  Server small(options);
  ASSERT_TRUE(small.Start().ok());
  RawClient a(small.port()), b(small.port()), c(small.port());
  EXPECT_TRUE(c.ClosedByPeer());
  EXPECT_NE(Log().find("limit of 2 connections reached"), std::string::npos) << Log();
  ASSERT_TRUE(a.Send(Unhex("06")));
  EXPECT_EQ(Hex(*a.Recv(8)), "0000000000000000");
}

// Out of file descriptors, accept fails while the connection stays queued: the server logs it
// once, pauses accepting instead of retrying in a busy loop, serves the connections it has, and
// accepts the queued one once descriptors are free again.
TEST_F(HostileTest, DescriptorExhaustionPausesAcceptsAndRecovers) {
  // Takes every free descriptor under a lowered RLIMIT_NOFILE; gives them and the limit back.
  struct Exhaustion {
    rlimit saved{};
    std::vector<int> fillers;
    ~Exhaustion() { Release(); }
    void Release() {
      for (int fd : fillers) ::close(fd);
      fillers.clear();
      ::setrlimit(RLIMIT_NOFILE, &saved);
    }
  } exhaustion;
  ExpectGoodClientIntact();  // Accepted before the descriptors run out.
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &exhaustion.saved), 0);
  const int highest = ::dup(0);
  ASSERT_GE(highest, 0);
  ::close(highest);
  rlimit low = exhaustion.saved;
  low.rlim_cur = static_cast<rlim_t>(highest) + 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  for (int fd = ::dup(0); fd >= 0; fd = ::dup(0)) exhaustion.fillers.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ASSERT_GE(exhaustion.fillers.size(), 2u);
  ::close(exhaustion.fillers.back());  // One descriptor for the client, none for the accept.
  exhaustion.fillers.pop_back();
  RawClient queued(server_->port());
  ASSERT_TRUE(queued.connected());
  ASSERT_TRUE(queued.Send(Unhex("06")));  // GETNUMKEYS (1.x)
  ExpectGoodClientIntact();               // Also keeps it under the fixture's 400 ms idle timeout.
  absl::SleepFor(absl::Milliseconds(250));  // Two pauses and retries at least.
  const std::string log = Log();
  size_t failures = 0;
  for (size_t at = log.find("accept failed"); at != std::string::npos;
       at = log.find("accept failed", at + 1)) {
    ++failures;
  }
  EXPECT_EQ(failures, 1u) << log;
  EXPECT_NE(log.find("accept failed: Too many open files (1 connections open); pausing accepts "
                     "for 100 ms"),
            std::string::npos)
      << log;
  ExpectGoodClientIntact();

  exhaustion.Release();
  auto reply = queued.Recv(8);  // Within the client's 5 s read deadline.
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Hex(*reply), "0100000000000000");  // The good client's key.
}

}  // namespace
}  // namespace dgt::store
