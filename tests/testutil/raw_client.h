// A blocking TCP client for byte-level tests, with a receive deadline on every read.
#ifndef DGT_TESTS_TESTUTIL_RAW_CLIENT_H_
#define DGT_TESTS_TESTUTIL_RAW_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

namespace dgt::testing {

class RawClient {
 public:
  // Connects to 127.0.0.1:port; reads time out after `timeout_ms`.
  explicit RawClient(uint16_t port, int timeout_ms = 5000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }

  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Exactly n bytes, or nullopt on timeout, EOF or error.
  std::optional<std::string> Recv(size_t n) {
    std::string out(n, '\0');
    size_t off = 0;
    while (off < n) {
      ssize_t r = ::recv(fd_, out.data() + off, n - off, 0);
      if (r <= 0) return std::nullopt;
      off += static_cast<size_t>(r);
    }
    return out;
  }

  // True when the peer closed the connection (EOF or reset) within the read timeout.
  bool ClosedByPeer() {
    char c;
    ssize_t r = ::recv(fd_, &c, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace dgt::testing

#endif  // DGT_TESTS_TESTUTIL_RAW_CLIENT_H_
