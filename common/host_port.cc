#include "common/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/errno_status.h"

namespace dgt {

namespace {

absl::StatusOr<HostPort> Parse(absl::string_view text, int default_port, int min_port,
                               absl::string_view what) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why, ", got '", text, "'"));
  };
  if (text.empty()) return bad("expected host[:port]");
  HostPort out;
  absl::string_view port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) return bad("missing ']' after IPv6 address");
    out.host = std::string(text.substr(1, close - 1));
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected ':' after ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != absl::string_view::npos && text.find(':') != colon) {
      return bad("IPv6 addresses must be written as [addr]:port");
    }
    if (colon == absl::string_view::npos) {
      out.host = std::string(text);
    } else {
      out.host = std::string(text.substr(0, colon));
      port_text = text.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
  }
  if (out.host.empty()) return bad("empty host");
  if (port_text.empty()) {
    if (default_port < 0) return bad("a port is required");
    out.port = static_cast<uint16_t>(default_port);
    return out;
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < min_port || port > 65535) {
    return bad(absl::StrCat("port must be ", min_port, "..65535"));
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       absl::string_view what) {
  return Parse(text, default_port, 1, what);
}

absl::StatusOr<HostPort> ParseHostPortOrFree(absl::string_view text, int default_port,
                                             absl::string_view what) {
  return Parse(text, default_port, 0, what);
}

absl::StatusOr<HostPort> ParseListenAddress(absl::string_view text, absl::string_view what) {
  return Parse(text, -1, 0, what);
}

std::string FormatHostPort(absl::string_view host, uint16_t port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> ResolveToIp(absl::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  std::string host_str(host);
  int rc = getaddrinfo(host_str.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  std::string v4, v6;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, buf, sizeof buf);
      v4 = buf;
    } else if (ai->ai_family == AF_INET6 && v6.empty()) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, buf,
                sizeof buf);
      v6 = buf;
    }
  }
  freeaddrinfo(result);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::UnavailableError(absl::StrCat("host '", host, "' has no IP address"));
}

absl::StatusOr<std::string> RoutedLocalAddress(absl::string_view remote_ip) {
  std::string ip(remote_ip);
  sockaddr_storage remote{};
  socklen_t remote_len = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&remote);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&remote);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);
    remote_len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    remote_len = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not an IP address: '", remote_ip, "'"));
  }
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&remote), remote_len) != 0) {
    int err = errno;
    close(fd);
    return ErrnoToStatus(err, absl::StrCat("no route to ", remote_ip));
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  int rc = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len);
  int err = errno;
  close(fd);
  if (rc != 0) return ErrnoToStatus(err, "getsockname");
  char buf[INET6_ADDRSTRLEN] = {};
  if (local.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof buf);
  }
  return std::string(buf);
}

absl::Status CheckLocalAddress(absl::string_view ip) {
  std::string text(ip);
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not an IP address: '", ip, "'"));
  }
  // Port 0 and no listen(): nothing is reserved beyond this call.
  int fd = socket(addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  int err = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  if (err == EADDRNOTAVAIL) {
    return absl::InvalidArgumentError(absl::StrCat(ip, " is not an address of this host"));
  }
  return ErrnoToStatus(err, absl::StrCat("bind to ", ip));
}

bool IsLoopback(absl::string_view ip) { return ip == "::1" || ip.substr(0, 4) == "127."; }

}  // namespace dgt
