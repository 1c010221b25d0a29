#include "common/resolve_wait.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dgt {
namespace {

// A resolver that fails until the simulated clock reaches `appears_at`.
struct FakeDns {
  absl::Time now = absl::UnixEpoch();
  absl::Time appears_at = absl::InfiniteFuture();
  int lookups = 0;
  std::vector<std::string> lines;

  ResolveWaitEnv Env() {
    ResolveWaitEnv env;
    env.resolve = [this](absl::string_view) -> absl::StatusOr<std::string> {
      ++lookups;
      if (now >= appears_at) return std::string("10.1.2.3");
      return absl::UnavailableError("cannot resolve 'job-0.svc': Name or service not known");
    };
    env.now = [this] { return now; };
    env.sleep = [this](absl::Duration d) { now += d; };
    env.log = [this](const std::string& line) { lines.push_back(line); };
    return env;
  }
};

TEST(ResolveWaitTest, ResolvesAtOnce) {
  FakeDns dns;
  dns.appears_at = absl::UnixEpoch();
  auto ip = ResolveWithin("job-0.svc", "node rank 0's name", absl::Seconds(600), "--join-timeout",
                          dns.Env());
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(*ip, "10.1.2.3");
  EXPECT_EQ(dns.lookups, 1);
  EXPECT_TRUE(dns.lines.empty());
}

TEST(ResolveWaitTest, WaitsForALateNameAndLogsEveryTenSeconds) {
  FakeDns dns;
  dns.appears_at = absl::UnixEpoch() + absl::Seconds(25);
  auto ip = ResolveWithin("job-0.svc", "node rank 0's name", absl::Seconds(600), "--join-timeout",
                          dns.Env());
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(*ip, "10.1.2.3");
  EXPECT_EQ(dns.now, absl::UnixEpoch() + absl::Seconds(25));
  EXPECT_EQ(dns.lookups, 26);
  EXPECT_EQ(dns.lines,
            (std::vector<std::string>{
                "waiting for node rank 0's name 'job-0.svc' to resolve (10 s of 600 s, "
                "--join-timeout): cannot resolve 'job-0.svc': Name or service not known",
                "waiting for node rank 0's name 'job-0.svc' to resolve (20 s of 600 s, "
                "--join-timeout): cannot resolve 'job-0.svc': Name or service not known"}));
}

TEST(ResolveWaitTest, GivesUpAtTheTimeout) {
  FakeDns dns;
  auto ip = ResolveWithin("job-0.svc", "node rank 0's name", absl::Seconds(2.5), "--join-timeout",
                          dns.Env());
  ASSERT_FALSE(ip.ok());
  EXPECT_EQ(ip.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ip.status().message(),
            "node rank 0's name 'job-0.svc' did not resolve within 2.5 s (--join-timeout): "
            "cannot resolve 'job-0.svc': Name or service not known");
  EXPECT_EQ(dns.now, absl::UnixEpoch() + absl::Seconds(2.5));
  EXPECT_EQ(dns.lookups, 4);  // at 0, 1, 2 and 2.5 s
  EXPECT_TRUE(dns.lines.empty());
}

TEST(ResolveWaitTest, ClockThatStandsStillStillEnds) {
  FakeDns dns;
  ResolveWaitEnv env = dns.Env();
  env.sleep = [](absl::Duration) {};
  auto ip = ResolveWithin("job-0.svc", "x", absl::Seconds(3), "--join-timeout", env);
  ASSERT_FALSE(ip.ok());
  EXPECT_EQ(ip.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(dns.lookups, 5);
}

}  // namespace
}  // namespace dgt
