#include "dgt/store/client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "store/wire.h"

namespace dgt::store {
namespace {

using wire::Family;
using wire::Op;

// How long a client waits for WAIT_CANCELED after sending CANCEL_WAIT before it gives the
// connection up (the server answers at once; this only bounds a dead peer).
constexpr absl::Duration kCancelGrace = absl::Seconds(5);

int PollTimeoutMs(absl::Time deadline) {
  // One poll() waits at most this long (about 12 days); the callers poll again while the
  // deadline is ahead. Compared as Durations: with an infinite or far deadline (timeout
  // absl::InfiniteDuration(), or 1e18 s) the milliseconds saturate at INT64_MAX, and "+ 1"
  // wrapped to a negative number, i.e. poll(0) or an endless poll(-1).
  constexpr int kMaxPollMs = 1 << 30;
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  if (left >= absl::Milliseconds(kMaxPollMs)) return kMaxPollMs;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options)
      : options_(std::move(options)),
        family_(options_.protocol == Protocol::kV2 ? Family::kV2 : Family::kV1) {}
  ~Impl() { Drop(); }

  const ClientOptions& options() const { return options_; }
  bool v2() const { return family_ == Family::kV2; }

  absl::Status EnsureConnected(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fd_ >= 0) return absl::OkStatus();
    absl::Duration backoff = options_.initial_backoff;
    absl::Status last;
    std::optional<absl::Time> first_handshake_failure;
    while (true) {
      last = ConnectOnce(deadline);
      if (last.ok()) return last;
      if (handshake_failed_) {
        // Connected, but the 2.x opening was not answered (in time, or at all: a torch 1.x store
        // may hang up on it): a store of the other protocol, which more attempts would not
        // change. Retried only within handshake_timeout (a store shedding connections).
        if (!first_handshake_failure) first_handshake_failure = absl::Now();
        if (handshake_unanswered_ ||
            absl::Now() - *first_handshake_failure >= options_.handshake_timeout) {
          return last;
        }
      }
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      absl::SleepFor(std::min(backoff, left));
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    return absl::DeadlineExceededError(absl::StrCat("store ", Endpoint(), ": no connection within ",
                                                    absl::FormatDuration(options_.timeout), ": ",
                                                    last.message()));
  }

  // Runs `call` on a connected socket. When the connection breaks under an idempotent call, it
  // reconnects and runs it once more.
  template <typename T>
  absl::StatusOr<T> Run(bool idempotent, const std::function<absl::StatusOr<T>(absl::Time)>& call)
      ABSL_LOCKS_EXCLUDED(mu_) {
    dgt::MutexLock lock(&mu_);
    absl::Time deadline = absl::Now() + options_.timeout;
    for (int attempt = 0;; ++attempt) {
      bool was_connected = fd_ >= 0;
      DGT_RETURN_IF_ERROR(EnsureConnected(deadline));
      broken_ = false;
      absl::StatusOr<T> r = call(deadline);
      if (!broken_) return r;
      Drop();
      if (!idempotent || attempt > 0 || !was_connected || absl::Now() >= deadline ||
          absl::IsDeadlineExceeded(r.status())) {
        return r;
      }
    }
  }

  std::string Endpoint() const {
    return options_.host.find(':') != std::string::npos
               ? absl::StrCat("[", options_.host, "]:", options_.port)
               : absl::StrCat(options_.host, ":", options_.port);
  }

  // --- I/O on the current socket; failures mark the connection broken. ---

  absl::Status SendAll(absl::string_view bytes, absl::Time deadline) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        DGT_RETURN_IF_ERROR(PollFor(POLLOUT, deadline, "sending"));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return Broken(absl::UnavailableError(
          absl::StrCat("store ", Endpoint(), ": send failed: ", std::strerror(errno))));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> RecvExact(size_t n, absl::Time deadline) {
    std::string out(n, '\0');
    size_t off = 0;
    while (off < n) {
      ssize_t r = ::recv(fd_, out.data() + off, n - off, 0);
      if (r > 0) {
        off += static_cast<size_t>(r);
        continue;
      }
      if (r == 0) {
        return Broken(absl::UnavailableError(
            absl::StrCat("store ", Endpoint(), ": the server closed the connection")));
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        DGT_RETURN_IF_ERROR(PollFor(POLLIN, deadline, "waiting for a reply"));
        continue;
      }
      if (errno == EINTR) continue;
      return Broken(absl::UnavailableError(
          absl::StrCat("store ", Endpoint(), ": receive failed: ", std::strerror(errno))));
    }
    return out;
  }

  template <typename T>
  absl::StatusOr<T> RecvPod(absl::Time deadline) {
    DGT_ASSIGN_OR_RETURN(std::string bytes, RecvExact(sizeof(T), deadline));
    T v;
    std::memcpy(&v, bytes.data(), sizeof v);
    return v;
  }

  absl::StatusOr<std::string> RecvBytes(absl::Time deadline) {
    DGT_ASSIGN_OR_RETURN(uint64_t len, RecvPod<uint64_t>(deadline));
    if (len > kMaxReplyBytes) {
      return Broken(absl::InternalError(absl::StrCat("store ", Endpoint(), ": reply claims ", len,
                                                     " bytes, over ", kMaxReplyBytes)));
    }
    return RecvExact(len, deadline);
  }

  // Blocks on a WAIT already sent, until STOP_WAITING or `deadline`; on timeout cancels it (2.x)
  // or drops the connection (1.x, whose server keeps the wait until the connection closes).
  absl::Status AwaitWait(absl::Time deadline, absl::Time call_deadline) {
    absl::StatusOr<uint8_t> reply = RecvPod<uint8_t>(deadline);
    if (reply.ok()) {
      if (*reply != wire::kStopWaiting) {
        return Broken(absl::InternalError(
            absl::StrCat("store ", Endpoint(), ": unexpected WAIT reply ", *reply)));
      }
      return absl::OkStatus();
    }
    if (!absl::IsDeadlineExceeded(reply.status())) return reply.status();
    // A one-byte reply cannot be half-read: the stream is still in step.
    broken_ = false;
    absl::Status timeout =
        absl::DeadlineExceededError(absl::StrCat("store ", Endpoint(), ": wait timed out"));
    if (!v2()) return Broken(timeout);
    std::string req;
    wire::AppendOpcode(&req, family_, Op::kCancelWait);
    absl::Time grace = absl::Now() + kCancelGrace;
    DGT_RETURN_IF_ERROR(SendAll(req, grace));
    // A STOP_WAITING that raced ahead of the cancel arrives first, then WAIT_CANCELED.
    for (int i = 0; i < 2; ++i) {
      DGT_ASSIGN_OR_RETURN(uint8_t b, RecvPod<uint8_t>(grace));
      if (b == wire::kWaitCanceled) return timeout;
    }
    return Broken(absl::InternalError(
        absl::StrCat("store ", Endpoint(), ": no WAIT_CANCELED after CANCEL_WAIT")));
  }

  std::string Frame(Op op) {
    std::string req;
    wire::AppendOpcode(&req, family_, op);
    return req;
  }

  dgt::Mutex mu_;

 private:
  static constexpr uint64_t kMaxReplyBytes = 1ull << 32;

  absl::Status Broken(absl::Status s) {
    broken_ = true;
    return s;
  }

  absl::Status PollFor(short events, absl::Time deadline, absl::string_view what) {
    while (true) {
      pollfd p{fd_, events, 0};
      int r = ::poll(&p, 1, PollTimeoutMs(deadline));
      if (r > 0) return absl::OkStatus();
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        // The request may be half-sent or its reply half-read: the stream is out of step.
        return Broken(
            absl::DeadlineExceededError(absl::StrCat("store ", Endpoint(), ": timed out ", what)));
      }
      return Broken(absl::UnavailableError(
          absl::StrCat("store ", Endpoint(), ": poll failed: ", std::strerror(errno))));
    }
  }

  absl::Status ConnectOnce(absl::Time deadline) {
    handshake_unanswered_ = false;
    handshake_failed_ = false;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = absl::StrCat(options_.port);
    int gai = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &res);
    if (gai != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot resolve '", options_.host, "': ", ::gai_strerror(gai)));
    }
    absl::Status last = absl::UnavailableError("no address");
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) {
        last = absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
        continue;
      }
      int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        rc = ::poll(&p, 1, PollTimeoutMs(deadline));
        int err = ETIMEDOUT;
        if (rc > 0) {
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {
        last = absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
        ::close(fd);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = fd;
      break;
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) return last;
    if (v2()) {
      // torch 2.x's opening: VALIDATE with the magic, then PING (echoed).
      std::string req = Frame(Op::kValidate);
      wire::AppendU32(&req, wire::kValidationMagic);
      const uint32_t nonce = static_cast<uint32_t>(::getpid());
      req += Frame(Op::kPing);
      wire::AppendU32(&req, nonce);
      broken_ = false;
      const absl::Time handshake_deadline =
          options_.handshake_timeout == absl::InfiniteDuration()
              ? deadline
              : std::min(deadline, absl::Now() + options_.handshake_timeout);
      absl::Status s = SendAll(req, handshake_deadline);
      absl::StatusOr<uint32_t> echo =
          s.ok() ? RecvPod<uint32_t>(handshake_deadline) : absl::StatusOr<uint32_t>(s);
      handshake_unanswered_ = absl::IsDeadlineExceeded(echo.status());
      handshake_failed_ = !echo.ok() || *echo != nonce;
      if (!echo.ok() || *echo != nonce) {
        Drop();
        // A torch 1.x server reads VALIDATE as another request and waits for more bytes, or
        // hangs up: say so, since "timed out" alone sends people looking at the network.
        absl::Status cause = echo.ok() ? absl::UnavailableError("PING not echoed") : echo.status();
        return absl::Status(
            cause.code(),
            absl::StrCat("store ", Endpoint(), ": no answer to the torch 2.x ",
                         "handshake (a torch 1.x store needs protocol v1): ", cause.message()));
      }
    }
    return absl::OkStatus();
  }

  void Drop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  ClientOptions options_;
  Family family_;
  // The last ConnectOnce connected but got no answer to the 2.x opening within its deadline
  // (unanswered), or none that echoed the PING (failed, which includes unanswered).
  bool handshake_unanswered_ = false;
  bool handshake_failed_ = false;
  int fd_ = -1;
  bool broken_ = false;
};

namespace {

void AppendKeys(std::string* req, const std::vector<std::string>& keys) {
  wire::AppendU64(req, keys.size());
  for (const std::string& k : keys) wire::AppendBytes(req, k);
}

absl::Status NeedV2(bool v2, absl::string_view op) {
  if (v2) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(op, " is not part of the torch 1.x store protocol"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.port == 0) return absl::InvalidArgumentError("store client: port must be 1..65535");
  if (options.host.empty()) return absl::InvalidArgumentError("store client: host is empty");
  auto impl = std::make_unique<Impl>(std::move(options));
  {
    dgt::MutexLock lock(&impl->mu_);
    DGT_RETURN_IF_ERROR(impl->EnsureConnected(absl::Now() + impl->options().timeout));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
const ClientOptions& Client::options() const { return impl_->options(); }

absl::Status Client::Set(absl::string_view key, absl::string_view value) {
  Impl& c = *impl_;
  return c
      .Run<bool>(true,
                 [&](absl::Time deadline) -> absl::StatusOr<bool> {
                   std::string req = c.Frame(Op::kSet);
                   wire::AppendBytes(&req, key);
                   wire::AppendBytes(&req, value);
                   DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
                   return true;
                 })
      .status();
}

absl::StatusOr<std::string> Client::Get(absl::string_view key) {
  Impl& c = *impl_;
  return c.Run<std::string>(true, [&](absl::Time deadline) -> absl::StatusOr<std::string> {
    // torch's get: WAIT for the key, then GET (a 1.x server drops a GET of a missing key).
    std::string req = c.Frame(Op::kWait);
    AppendKeys(&req, {std::string(key)});
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_RETURN_IF_ERROR(c.AwaitWait(deadline, deadline));
    req = c.Frame(Op::kGet);
    wire::AppendBytes(&req, key);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    return c.RecvBytes(deadline);
  });
}

absl::StatusOr<int64_t> Client::Add(absl::string_view key, int64_t delta) {
  Impl& c = *impl_;
  return c.Run<int64_t>(false, [&](absl::Time deadline) -> absl::StatusOr<int64_t> {
    std::string req = c.Frame(Op::kAdd);
    wire::AppendBytes(&req, key);
    wire::AppendI64(&req, delta);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    return c.RecvPod<int64_t>(deadline);
  });
}

absl::StatusOr<std::string> Client::CompareSet(absl::string_view key, absl::string_view expected,
                                               absl::string_view desired) {
  Impl& c = *impl_;
  return c.Run<std::string>(false, [&](absl::Time deadline) -> absl::StatusOr<std::string> {
    std::string req = c.Frame(Op::kCompareSet);
    wire::AppendBytes(&req, key);
    wire::AppendBytes(&req, expected);
    wire::AppendBytes(&req, desired);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    return c.RecvBytes(deadline);
  });
}

absl::StatusOr<bool> Client::Check(const std::vector<std::string>& keys) {
  Impl& c = *impl_;
  return c.Run<bool>(true, [&](absl::Time deadline) -> absl::StatusOr<bool> {
    std::string req = c.Frame(Op::kCheck);
    AppendKeys(&req, keys);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_ASSIGN_OR_RETURN(uint8_t r, c.RecvPod<uint8_t>(deadline));
    return r == wire::kCheckReady;
  });
}

absl::Status Client::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  Impl& c = *impl_;
  absl::Time wait_deadline = absl::Now() + timeout;
  return c
      .Run<bool>(true,
                 [&](absl::Time deadline) -> absl::StatusOr<bool> {
                   std::string req = c.Frame(Op::kWait);
                   AppendKeys(&req, keys);
                   DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
                   DGT_RETURN_IF_ERROR(c.AwaitWait(wait_deadline, deadline));
                   return true;
                 })
      .status();
}

absl::StatusOr<bool> Client::DeleteKey(absl::string_view key) {
  Impl& c = *impl_;
  return c.Run<bool>(false, [&](absl::Time deadline) -> absl::StatusOr<bool> {
    std::string req = c.Frame(Op::kDeleteKey);
    wire::AppendBytes(&req, key);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_ASSIGN_OR_RETURN(int64_t n, c.RecvPod<int64_t>(deadline));
    return n != 0;
  });
}

absl::StatusOr<int64_t> Client::NumKeys() {
  Impl& c = *impl_;
  return c.Run<int64_t>(true, [&](absl::Time deadline) -> absl::StatusOr<int64_t> {
    DGT_RETURN_IF_ERROR(c.SendAll(c.Frame(Op::kGetNumKeys), deadline));
    return c.RecvPod<int64_t>(deadline);
  });
}

absl::Status Client::Append(absl::string_view key, absl::string_view value) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "APPEND"));
  return c
      .Run<bool>(false,
                 [&](absl::Time deadline) -> absl::StatusOr<bool> {
                   std::string req = c.Frame(Op::kAppend);
                   wire::AppendBytes(&req, key);
                   wire::AppendBytes(&req, value);
                   DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
                   return true;
                 })
      .status();
}

absl::StatusOr<std::vector<std::string>> Client::MultiGet(const std::vector<std::string>& keys) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "MULTI_GET"));
  using Values = std::vector<std::string>;
  return c.Run<Values>(true, [&](absl::Time deadline) -> absl::StatusOr<Values> {
    std::string req = c.Frame(Op::kWait);
    AppendKeys(&req, keys);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_RETURN_IF_ERROR(c.AwaitWait(deadline, deadline));
    req = c.Frame(Op::kMultiGet);
    AppendKeys(&req, keys);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    Values values;
    values.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      DGT_ASSIGN_OR_RETURN(std::string v, c.RecvBytes(deadline));
      values.push_back(std::move(v));
    }
    return values;
  });
}

absl::Status Client::MultiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "MULTI_SET"));
  return c
      .Run<bool>(true,
                 [&](absl::Time deadline) -> absl::StatusOr<bool> {
                   std::string req = c.Frame(Op::kMultiSet);
                   wire::AppendU64(&req, items.size());
                   for (const auto& [k, v] : items) {
                     wire::AppendBytes(&req, k);
                     wire::AppendBytes(&req, v);
                   }
                   DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
                   return true;
                 })
      .status();
}

absl::StatusOr<absl::Duration> Client::Ping(uint32_t nonce) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "PING"));
  return c.Run<absl::Duration>(true, [&](absl::Time deadline) -> absl::StatusOr<absl::Duration> {
    absl::Time start = absl::Now();
    std::string req = c.Frame(Op::kPing);
    wire::AppendU32(&req, nonce);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_ASSIGN_OR_RETURN(uint32_t echo, c.RecvPod<uint32_t>(deadline));
    if (echo != nonce) {
      return absl::InternalError(absl::StrCat("PING: sent nonce ", nonce, ", got ", echo));
    }
    return absl::Now() - start;
  });
}

absl::Status Client::QueuePush(absl::string_view key, absl::string_view value) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "QUEUE_PUSH"));
  return c
      .Run<bool>(false,
                 [&](absl::Time deadline) -> absl::StatusOr<bool> {
                   std::string req = c.Frame(Op::kQueuePush);
                   wire::AppendBytes(&req, key);
                   wire::AppendBytes(&req, value);
                   DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
                   return true;
                 })
      .status();
}

absl::StatusOr<std::optional<std::string>> Client::QueuePop(absl::string_view key) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "QUEUE_POP"));
  using Item = std::optional<std::string>;
  return c.Run<Item>(false, [&](absl::Time deadline) -> absl::StatusOr<Item> {
    std::string req = c.Frame(Op::kQueuePop);
    wire::AppendBytes(&req, key);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    DGT_ASSIGN_OR_RETURN(int64_t len, c.RecvPod<int64_t>(deadline));
    if (len == 0) return Item();
    DGT_ASSIGN_OR_RETURN(std::string item, c.RecvBytes(deadline));
    return Item(std::move(item));
  });
}

absl::StatusOr<int64_t> Client::QueueLen(absl::string_view key) {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "QUEUE_LEN"));
  return c.Run<int64_t>(true, [&](absl::Time deadline) -> absl::StatusOr<int64_t> {
    std::string req = c.Frame(Op::kQueueLen);
    wire::AppendBytes(&req, key);
    DGT_RETURN_IF_ERROR(c.SendAll(req, deadline));
    return c.RecvPod<int64_t>(deadline);
  });
}

absl::StatusOr<std::vector<std::string>> Client::ListKeys() {
  Impl& c = *impl_;
  DGT_RETURN_IF_ERROR(NeedV2(c.v2(), "LIST_KEYS"));
  using Keys = std::vector<std::string>;
  return c.Run<Keys>(true, [&](absl::Time deadline) -> absl::StatusOr<Keys> {
    DGT_RETURN_IF_ERROR(c.SendAll(c.Frame(Op::kListKeys), deadline));
    DGT_ASSIGN_OR_RETURN(int64_t n, c.RecvPod<int64_t>(deadline));
    Keys keys;
    for (int64_t i = 0; i < n; ++i) {
      DGT_ASSIGN_OR_RETURN(std::string k, c.RecvBytes(deadline));
      keys.push_back(std::move(k));
    }
    return keys;
  });
}

}  // namespace dgt::store
