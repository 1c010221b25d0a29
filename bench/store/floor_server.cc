// A TCPStore server stripped to what bench/store/store_bench.cc measures, to find the floor of
// server CPU per operation on loopback: the store's engine and wire parser (store/engine.h,
// store/wire.h) behind a bare loop, with no limits, no logging and no Asio. Two loops:
//   epoll  per readable connection one recv into a shared buffer and one send of every reply;
//          the calls torch 2.x's libuv server and dgt's Asio server make.
//   uring  io_uring: multishot accept, multishot receive into a ring of provided buffers, and
//          the replies of a whole pass of completions submitted together with the next wait
//          (one io_uring_enter for many operations; DEFER_TASKRUN runs completions only there).
// Not a server for use: it answers the ops store_bench sends (VALIDATE, PING, SET, GET, ADD,
// COMPARE_SET, CHECK, MULTI_GET, GETNUMKEYS, in either family) and closes a connection on any
// other op, on a parse error and on ADD to a value that is not an integer.
//   floor_server epoll|uring   prints "floor server listening on port N" and serves
//                              127.0.0.1:N until killed
// Exits 2 on a bad argument, 1 when it cannot listen or set up its loop.
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"
#include "store/engine.h"
#include "store/wire.h"

namespace {

using dgt::store::Engine;
namespace wire = dgt::store::wire;

struct Connection {
  int fd = -1;
  wire::Family family = wire::Family::kUnknown;
  std::string partial;     // An incomplete request's bytes.
  std::string out;         // Replies not yet handed to the kernel.
  std::string in_flight;   // uring: the replies of the send in progress.
  bool sending = false;    // uring: a send is in progress.
  bool receiving = false;  // uring: the multishot receive is armed.
  bool queued = false;     // uring: on this pass's list of connections with replies.
  bool closed = false;
};

class Server {
 public:
  // Answers the complete requests of `data` (read from `c`) into c->out; keeps an incomplete
  // tail in c->partial. Returns false when the connection must be closed.
  bool Consume(Connection* c, absl::string_view data) {
    if (c->partial.empty()) {
      size_t used = 0;
      if (!Process(c, data, &used)) return false;
      if (used < data.size()) c->partial.assign(data.data() + used, data.size() - used);
      return true;
    }
    c->partial.append(data.data(), data.size());
    size_t used = 0;
    if (!Process(c, c->partial, &used)) return false;
    c->partial.erase(0, used);
    return true;
  }

 private:
  bool Process(Connection* c, absl::string_view input, size_t* used) {
    while (*used < input.size()) {
      absl::string_view data = input.substr(*used);
      if (c->family == wire::Family::kUnknown) {
        c->family = wire::DetectFamily(data);
        if (c->family == wire::Family::kUnknown) return true;
      }
      wire::ParseResult r = wire::ParseRequest(data, c->family, limits_, &request_);
      if (r.status == wire::ParseStatus::kNeedMore) return true;
      if (r.status == wire::ParseStatus::kError) return false;
      *used += r.consumed;
      if (!Execute(c)) return false;
    }
    return true;
  }

  bool Execute(Connection* c) {
    const wire::Request& req = request_;
    std::string* out = &c->out;
    switch (req.op) {
      case wire::Op::kValidate:
        return req.u32 == wire::kValidationMagic;
      case wire::Op::kPing:
        wire::AppendU32(out, req.u32);
        return true;
      case wire::Op::kSet:
        engine_.Set(req.keys[0], req.values[0]);
        return true;
      case wire::Op::kGet: {
        const std::string* value = engine_.Get(req.keys[0]);
        wire::AppendBytes(out, value != nullptr ? absl::string_view(*value) : "");
        return true;
      }
      case wire::Op::kAdd: {
        absl::StatusOr<int64_t> sum = engine_.Add(req.keys[0], req.integer);
        if (!sum.ok()) return false;
        wire::AppendI64(out, *sum);
        return true;
      }
      case wire::Op::kCompareSet:
        wire::AppendBytes(out, engine_.CompareSet(req.keys[0], req.values[0], req.values[1]));
        return true;
      case wire::Op::kCheck:
        wire::AppendU8(out, engine_.Check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
        return true;
      case wire::Op::kMultiGet:
        for (const std::string& key : req.keys) {
          const std::string* value = engine_.Get(key);
          wire::AppendBytes(out, value != nullptr ? absl::string_view(*value) : "");
        }
        return true;
      case wire::Op::kGetNumKeys:
        wire::AppendI64(out, engine_.NumKeys());
        return true;
      default:
        return false;
    }
  }

  Engine engine_;
  wire::Limits limits_;
  wire::Request request_;
};

int Listen() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4096) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::fprintf(stderr, "floor_server: cannot listen on 127.0.0.1: %s\n", std::strerror(errno));
    return -1;
  }
  std::printf("floor server listening on port %d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  return fd;
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int RunEpoll(int listener) {
  Server server;
  std::unordered_map<int, std::unique_ptr<Connection>> connections;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev) != 0) {
    std::fprintf(stderr, "floor_server: epoll: %s\n", std::strerror(errno));
    return 1;
  }
  std::vector<char> buffer(64 * 1024);
  std::vector<epoll_event> events(512);
  for (;;) {
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listener) {
        int c = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) continue;
        NoDelay(c);
        auto conn = std::make_unique<Connection>();
        conn->fd = c;
        epoll_event cev{};
        cev.events = EPOLLIN;
        cev.data.fd = c;
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        connections[c] = std::move(conn);
        continue;
      }
      Connection* c = connections[fd].get();
      ssize_t got = recv(fd, buffer.data(), buffer.size(), 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      bool ok = got > 0 && server.Consume(c, absl::string_view(buffer.data(), got));
      if (ok && !c->out.empty()) {
        // Replies are small: the socket buffer takes them whole, as in the bench's closed loop.
        ok = send(fd, c->out.data(), c->out.size(), MSG_NOSIGNAL) ==
             static_cast<ssize_t>(c->out.size());
        c->out.clear();
      }
      if (!ok) {
        close(fd);  // Also leaves the epoll set.
        connections.erase(fd);
      }
    }
  }
}

// io_uring completions carry the operation and the descriptor in their user data.
enum class Kind : uint64_t { kAccept = 1, kReceive = 2, kSend = 3 };
uint64_t Tag(Kind kind, int fd) { return static_cast<uint64_t>(kind) << 32 | uint32_t(fd); }

class UringLoop {
 public:
  static constexpr unsigned kBuffers = 1024;  // Provided receive buffers, a power of two.
  static constexpr unsigned kBufferBytes = 4096;
  static constexpr uint16_t kGroup = 0;

  int Run(int listener) {
    listener_ = listener;
    io_uring_params params{};
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
    params.cq_entries = 65536;
    int rc = io_uring_queue_init_params(4096, &ring_, &params);
    if (rc != 0) return Fail("io_uring_queue_init_params", -rc);
    // liburing 2.3 has no io_uring_setup_buf_ring: map and register the ring by hand.
    void* mem = mmap(nullptr, kBuffers * sizeof(io_uring_buf), PROT_READ | PROT_WRITE,
                     MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (mem == MAP_FAILED) return Fail("mmap", errno);
    buffer_ring_ = static_cast<io_uring_buf_ring*>(mem);
    io_uring_buf_ring_init(buffer_ring_);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(buffer_ring_);
    reg.ring_entries = kBuffers;
    reg.bgid = kGroup;
    rc = io_uring_register_buf_ring(&ring_, &reg, 0);
    if (rc != 0) return Fail("io_uring_register_buf_ring", -rc);
    buffers_.resize(size_t{kBuffers} * kBufferBytes);
    for (unsigned i = 0; i < kBuffers; ++i) Recycle(i, i);
    io_uring_buf_ring_advance(buffer_ring_, kBuffers);
    ArmAccept();
    for (;;) {
      io_uring_submit_and_wait(&ring_, 1);
      unsigned head = 0;
      unsigned seen = 0;
      recycled_ = 0;
      io_uring_cqe* cqe = nullptr;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        OnCompletion(*cqe);
      }
      io_uring_cq_advance(&ring_, seen);
      if (recycled_ > 0) io_uring_buf_ring_advance(buffer_ring_, recycled_);
      for (Connection* c : with_replies_) {
        c->queued = false;
        if (!c->closed && !c->sending && !c->out.empty()) Send(c);
      }
      with_replies_.clear();
    }
  }

 private:
  int Fail(const char* what, int error) {
    std::fprintf(stderr, "floor_server: %s: %s\n", what, std::strerror(error));
    return 1;
  }

  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // The submission queue is full: hand it to the kernel first.
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void ArmAccept() {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_multishot_accept(sqe, listener_, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, Tag(Kind::kAccept, listener_));
  }

  void ArmReceive(int fd) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kGroup;
    io_uring_sqe_set_data64(sqe, Tag(Kind::kReceive, fd));
  }

  void Send(Connection* c) {
    c->in_flight.swap(c->out);
    c->out.clear();
    c->sending = true;
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_send(sqe, c->fd, c->in_flight.data(), c->in_flight.size(), MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, Tag(Kind::kSend, c->fd));
  }

  void Recycle(unsigned id, unsigned offset) {
    io_uring_buf_ring_add(buffer_ring_, buffers_.data() + size_t{id} * kBufferBytes, kBufferBytes,
                          id, io_uring_buf_ring_mask(kBuffers), offset);
  }

  // Closes `c` once nothing of the kernel's refers to it; its receive may still complete.
  void Close(Connection* c) {
    if (!c->closed) {
      c->closed = true;
      shutdown(c->fd, SHUT_RDWR);
    }
    if (!c->sending && !c->receiving) {
      close(c->fd);
      connections_.erase(c->fd);
    }
  }

  void OnCompletion(const io_uring_cqe& cqe) {
    const Kind kind = static_cast<Kind>(cqe.user_data >> 32);
    const int fd = static_cast<int>(static_cast<uint32_t>(cqe.user_data));
    const bool more = (cqe.flags & IORING_CQE_F_MORE) != 0;
    if (kind == Kind::kAccept) {
      if (cqe.res >= 0) {
        NoDelay(cqe.res);
        auto conn = std::make_unique<Connection>();
        conn->fd = cqe.res;
        conn->receiving = true;
        connections_[cqe.res] = std::move(conn);
        ArmReceive(cqe.res);
      }
      if (!more) ArmAccept();
      return;
    }
    auto it = connections_.find(fd);
    if (it == connections_.end()) return;
    Connection* c = it->second.get();
    if (kind == Kind::kSend) {
      c->sending = false;
      c->in_flight.clear();
      if (cqe.res < 0 || c->closed) {
        Close(c);
      } else {
        Queue(c);
      }
      return;
    }
    if (cqe.res > 0) {
      const unsigned id = cqe.flags >> IORING_CQE_BUFFER_SHIFT;
      const char* data = buffers_.data() + size_t{id} * kBufferBytes;
      if (!c->closed && !server_.Consume(c, absl::string_view(data, cqe.res))) Close(c);
      Recycle(id, recycled_++);
      if (!c->out.empty()) Queue(c);
    }
    if (!more) {
      // A multishot receive ends on EOF, an error, or when the buffers ran out (-ENOBUFS:
      // arm it again; the data waits in the socket).
      if (cqe.res == -ENOBUFS && !c->closed) {
        ArmReceive(fd);
        return;
      }
      c->receiving = false;
      Close(c);
    }
  }

  void Queue(Connection* c) {
    if (c->queued) return;
    c->queued = true;
    with_replies_.push_back(c);
  }

  io_uring ring_{};
  io_uring_buf_ring* buffer_ring_ = nullptr;
  std::vector<char> buffers_;
  unsigned recycled_ = 0;  // Buffers given back in this pass.
  int listener_ = -1;
  Server server_;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> with_replies_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string loop = argc == 2 ? argv[1] : "";
  if (loop != "epoll" && loop != "uring") {
    std::fprintf(stderr, "usage: floor_server epoll|uring\n");
    return 2;
  }
  int listener = Listen();
  if (listener < 0) return 1;
  if (loop == "epoll") return RunEpoll(listener);
  UringLoop uring;
  return uring.Run(listener);
}
