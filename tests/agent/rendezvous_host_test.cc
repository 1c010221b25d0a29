#include "agent/coord/rendezvous_host.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

// A loopback port that was free a moment ago.
uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(RendezvousHostTest, FirstAgentHostsAndTheNextOneConnects) {
  const uint16_t port = FreePort();
  auto first = MaybeHostRendezvous("127.0.0.1", port, RendezvousHostOptions{});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(*first, nullptr);
  EXPECT_EQ((*first)->port(), port);
  EXPECT_FALSE(CanBindHere("127.0.0.1", port));
  auto second = MaybeHostRendezvous("127.0.0.1", port, RendezvousHostOptions{});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, nullptr);

  RendezvousHostOptions must;
  must.is_host = true;
  auto forced = MaybeHostRendezvous("127.0.0.1", port, must);
  EXPECT_EQ(forced.status(),
            absl::FailedPreconditionError(absl::StrCat(
                "--rdzv-conf is_host=1, but 127.0.0.1:", port,
                " cannot be served here (not an address of this host, or the port is in use)")));
}

TEST(RendezvousHostTest, IsHostFalseAndTlsNeverHost) {
  const uint16_t port = FreePort();
  RendezvousHostOptions off;
  off.is_host = false;
  auto a = MaybeHostRendezvous("127.0.0.1", port, off);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, nullptr);
  RendezvousHostOptions tls;
  tls.tls = true;
  auto b = MaybeHostRendezvous("127.0.0.1", port, tls);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, nullptr);
  EXPECT_TRUE(CanBindHere("127.0.0.1", port));  // Nothing was left listening.
}

TEST(RendezvousHostTest, AnAddressOfAnotherHostIsNotHosted) {
  // 192.0.2.0/24 is TEST-NET-1: never an address of this host. Bind only, no traffic.
  EXPECT_FALSE(CanBindHere("192.0.2.1", 29400));
  auto r = MaybeHostRendezvous("192.0.2.1", 29400, RendezvousHostOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, nullptr);
}

}  // namespace
}  // namespace dgt::agent
