#include "common/host_port.h"

#include "gtest/gtest.h"

namespace dgt {
namespace {

TEST(ParseHostPortTest, HostAndPort) {
  auto hp = ParseHostPort("node-0:29400", -1, "--rdzv-endpoint");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "node-0");
  EXPECT_EQ(hp->port, 29400);
}

TEST(ParseHostPortTest, DefaultPort) {
  auto hp = ParseHostPort("10.0.0.1", 29400, "--rdzv-endpoint");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "10.0.0.1");
  EXPECT_EQ(hp->port, 29400);
}

TEST(ParseHostPortTest, BracketedIpv6) {
  auto hp = ParseHostPort("[fe80::1]:1234", 29400, "x");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "fe80::1");
  EXPECT_EQ(hp->port, 1234);
  auto no_port = ParseHostPort("[::1]", 29400, "x");
  ASSERT_TRUE(no_port.ok());
  EXPECT_EQ(no_port->host, "::1");
  EXPECT_EQ(no_port->port, 29400);
}

TEST(ParseHostPortTest, Errors) {
  auto big = ParseHostPort("host:99999", 29400, "--rdzv-endpoint");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.status().message(), "--rdzv-endpoint: port must be 1..65535, got 'host:99999'");
  EXPECT_EQ(ParseHostPort("host:", 1, "x").status().message(), "x: empty port, got 'host:'");
  EXPECT_EQ(ParseHostPort("::1:80", 1, "x").status().message(),
            "x: IPv6 addresses must be written as [addr]:port, got '::1:80'");
  EXPECT_EQ(ParseHostPort("[::1", 1, "x").status().message(),
            "x: missing ']' after IPv6 address, got '[::1'");
  EXPECT_EQ(ParseHostPort("", 1, "x").status().message(), "x: expected host[:port], got ''");
  EXPECT_EQ(ParseHostPort(":80", 1, "x").status().message(), "x: empty host, got ':80'");
  EXPECT_EQ(ParseHostPort("h", -1, "x").status().message(), "x: a port is required, got 'h'");
  EXPECT_EQ(ParseHostPort("h:0", 1, "x").status().message(), "x: port must be 1..65535, got 'h:0'");
}

// torchrun 2.x's "--rdzv-endpoint HOST:0" (a free port) parses; anything else as ParseHostPort.
TEST(ParseHostPortTest, OrFreeAcceptsPortZero) {
  auto free = ParseHostPortOrFree("localhost:0", 29400, "--rdzv-endpoint");
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_EQ(free->host, "localhost");
  EXPECT_EQ(free->port, 0);
  auto v6 = ParseHostPortOrFree("[::1]:0", 29400, "x");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_EQ(ParseHostPortOrFree("h", 29400, "x")->port, 29400);
  EXPECT_EQ(ParseHostPortOrFree("h:-1", 1, "x").status().message(),
            "x: port must be 0..65535, got 'h:-1'");
}

TEST(FormatHostPortTest, BracketsIpv6) {
  EXPECT_EQ(FormatHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(FormatHostPort("::1", 80), "[::1]:80");
}

TEST(ResolveTest, Literals) {
  EXPECT_EQ(*ResolveToIp("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(*ResolveToIp("::1"), "::1");
  EXPECT_EQ(ResolveToIp("no-such-host.invalid").status().code(), absl::StatusCode::kUnavailable);
}

TEST(RoutedLocalAddressTest, LoopbackRoutesToLoopback) {
  EXPECT_EQ(*RoutedLocalAddress("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(RoutedLocalAddress("not-an-ip").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IsLoopbackTest, Values) {
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_TRUE(IsLoopback("127.1.2.3"));
  EXPECT_TRUE(IsLoopback("::1"));
  EXPECT_FALSE(IsLoopback("10.0.0.1"));
}

// An address to advertise must be this host's: 192.0.2.0/24 (TEST-NET-1) never is.
TEST(HostPortTest, CheckLocalAddress) {
  EXPECT_TRUE(CheckLocalAddress("127.0.0.1").ok());
  EXPECT_TRUE(CheckLocalAddress("127.0.0.2").ok());  // All of 127/8 is local on Linux.
  absl::Status foreign = CheckLocalAddress("192.0.2.7");
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(foreign.message(), "192.0.2.7 is not an address of this host");
  absl::Status name = CheckLocalAddress("localhost");
  EXPECT_EQ(name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(name.message(), "not an IP address: 'localhost'");
}

}  // namespace
}  // namespace dgt
