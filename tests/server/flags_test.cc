// dgt-rendezvous's flags (server/flags.h) into the server layer's options: the defaults, the etcd
// options with their prefixes normalised, and the usage errors' exit statuses.
#include "server/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dgt::server {
namespace {

ParsedFlags Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dgt-rendezvous");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(ServerFlagsTest, DefaultsServeJobsInMemory) {
  ParsedFlags parsed = Parse({"--listen=127.0.0.1:0"});
  ASSERT_FALSE(parsed.exit_code.has_value());
  const ServerOptions& o = parsed.options;
  EXPECT_EQ(o.rendezvous.listen, "127.0.0.1:0");
  EXPECT_TRUE(o.serve_jobs);
  EXPECT_FALSE(o.etcd.has_value());
  EXPECT_EQ(o.rendezvous.rounds.default_last_call_timeout, absl::Seconds(30));
  EXPECT_EQ(o.rendezvous.rounds.default_join_timeout, absl::Seconds(600));
  EXPECT_EQ(o.rendezvous.max_sessions_per_peer, 1024);
  EXPECT_EQ(o.rendezvous.replica_id, "");
  EXPECT_EQ(o.rendezvous.token, "");
  EXPECT_FALSE(o.jobs.allow_unauthenticated_submit);
}

TEST(ServerFlagsTest, EtcdOptionsWithPrefixesEndingInASlash) {
  ParsedFlags parsed = Parse(
      {"--listen=127.0.0.1:0", "--backend=etcd", "--etcd-endpoints=10.0.0.1:2379,e2:2379",
       "--etcd-prefix=/qa/runs", "--etcd-jobs-prefix=/qa/jobs", "--replica-id=r1",
       "--advertise-address=h1:29400", "--leader-lease-s=3", "--etcd-max-request-bytes=8388608"});
  ASSERT_FALSE(parsed.exit_code.has_value());
  const ServerOptions& o = parsed.options;
  ASSERT_TRUE(o.etcd.has_value());
  EXPECT_EQ(o.etcd->endpoints, (std::vector<std::string>{"10.0.0.1:2379", "e2:2379"}));
  EXPECT_EQ(o.etcd->prefix, "/qa/runs/");
  EXPECT_EQ(o.etcd->jobs_prefix, "/qa/jobs/");
  EXPECT_EQ(o.etcd->advertise_address, "h1:29400");
  EXPECT_EQ(o.etcd->lease_ttl_s, 3);
  EXPECT_EQ(o.etcd->max_request_bytes, 8388608);
  EXPECT_EQ(o.rendezvous.replica_id, "r1");
}

TEST(ServerFlagsTest, UsageErrorsExitWith2) {
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--backend=etcd"}).exit_code, 2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--backend=disk"}).exit_code, 2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--replica-id=r1"}).exit_code, 2);
  EXPECT_EQ(
      Parse({"--listen=127.0.0.1:0", "--backend=etcd", "--etcd-endpoints=http://e:2379"}).exit_code,
      2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--backend=etcd", "--etcd-endpoints=e:2379",
                   "--etcd-jobs-prefix=/dgt/runs/jobs"})
                .exit_code,
            2);
  EXPECT_EQ(
      Parse({"--listen=127.0.0.1:0", "--backend=etcd", "--etcd-endpoints=e1:2379,e2:2379,e1:2379"})
          .exit_code,
      2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--join-timeout=0"}).exit_code, 2);
  // Below 512 KiB, and only with etcd.
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--backend=etcd", "--etcd-endpoints=e:2379",
                   "--etcd-max-request-bytes=524287"})
                .exit_code,
            2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--etcd-max-request-bytes=1572864"}).exit_code, 2);
  EXPECT_EQ(Parse({"--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--token-file=/nonexistent/token"}).exit_code, 2);
}

// dgt-run gets --advertise-endpoint as its --rdzv-endpoint: what dgt-run refuses, so does this.
TEST(ServerFlagsTest, AdvertiseEndpointIsCheckedAsDgtRunWould) {
  EXPECT_EQ(
      Parse({"--listen=127.0.0.1:0", "--advertise-endpoint=127.0.0.1:1,127.0.0.1:1"}).exit_code, 2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--advertise-endpoint=127.0.0.1:1,"}).exit_code, 2);
  EXPECT_EQ(Parse({"--listen=127.0.0.1:0", "--advertise-endpoint=127.0.0.1:99999"}).exit_code, 2);
  ParsedFlags ok = Parse({"--listen=127.0.0.1:0", "--advertise-endpoint=h1:29400,h2"});
  EXPECT_FALSE(ok.exit_code.has_value());
  EXPECT_EQ(ok.options.jobs.scheduler.rdzv_endpoint, "h1:29400,h2");
}

TEST(ServerFlagsTest, VersionExitsWith0) { EXPECT_EQ(Parse({"--version"}).exit_code, 0); }

TEST(ServerFlagsTest, ExitCodes) {
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("x")), 2);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), 1);
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("x")), 1);
}

}  // namespace
}  // namespace dgt::server
