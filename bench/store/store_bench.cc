// Load generator for TCPStore servers (dgt's, torch 1.13's and torch 2.13's libuv server). It
// speaks the torch 1.x wire protocol (--protocol 1, default; dgt and torch 1.13 accept it) or the
// torch 2.x one (--protocol 2: each connection opens with VALIDATE, then 2.x opcodes; dgt and
// torch 2.x accept it). So the same client program measures every server. Loopback only; every mode
// is bounded in operations and in time. Prints one JSON object per run on stdout.
//
//   store_bench --port P [--protocol 1|2] --mode ops --op set|get|add|cas|check|multi_get --conns N
//   [--seconds S]
//               [--max-ops M]
//               [--server-pid PID]   (adds the server's CPU time per operation)
//               [--pipeline K]       (set only: K SETs and one CHECK per round trip)
//   store_bench --port P --mode fanout --waiters N [--rounds R]
//   store_bench --port P --mode idle --conns N --server-pid PID
//   store_bench --port P --protocol 2 --mode bootstrap [--clients N] [--procs P] [--sources K]
//               [--window W] [--deadline S] [--server-pid PID]
//
// Every connection of ops and fanout makes one GETNUMKEYS round trip before the timed part, so
// accepting it is not timed.
// ops:    N connections, one request outstanding each (closed loop), for S seconds or M ops.
//         set = SET then CHECK of the same key (SET has no reply, so a set is confirmed by the
//         round trip); get = GET of a preloaded key; add = ADD 1 on one of 16 counters;
//         cas = COMPARE_SET that matches (value unchanged); check = CHECK of one present key;
//         multi_get (2.x only) = MULTI_GET of four preloaded keys. Also reports the generator's own
//         CPU per operation. --pipeline K (set only) sends K SETs then the CHECK in one write, as a
//         torch 1.x client doing consecutive sets does (SET has no reply); an extra, labelled
//         figure, not the closed-loop one.
// fanout: N connections WAIT on one key; one more connection SETs it; latency is from just
//         before the SET is sent to each waiter's STOP_WAITING. R rounds with fresh keys.
// bootstrap: N clients (default 100,000) over P child processes (default one per 16,000, each
//         under a 20,000 RLIMIT_NOFILE) and K loopback source addresses (127.0.1.1 upwards; bind
//         before connect with IP_BIND_ADDRESS_NO_PORT, so N may exceed one address's ephemeral
//         port range). Each client: VALIDATE and PING (waits for the nonce), ADD 1 on a barrier
//         counter, WAIT on a release key; the client whose ADD returns N SETs the release key, as
//         a store barrier's last arrival does. At most W connections are in their handshake at
//         once (default 2,048, under the listen backlog). Reports the time from the first
//         connect to the last STOP_WAITING, the server's RSS before and at its peak (sampled
//         every 20 ms; kib_per_conn divides the growth by the connections it answered) and its
//         RLIMIT_NOFILE; when not every client is released within S
//         seconds (default 60), "ok": false with how far the run got and the first error.
// idle:   opens N connections, each makes one round trip (GETNUMKEYS) and then stays open; the
//         server's RSS (from /proc/PID/status) is read before and after; all N are held at once
//         and a sample of them is checked to still answer.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int port = 0;
  std::string mode = "ops";
  std::string op = "get";
  int conns = 8;
  double seconds = 3;
  long max_ops = 2'000'000;
  int waiters = 512;
  int rounds = 20;
  int server_pid = 0;
  int pipeline = 1;       // set only: K SETs then one CHECK per round trip (counts K operations).
  int protocol = 1;       // torch wire protocol family: 1 (torch 1.x) or 2 (torch >= 2.2).
  int clients = 100'000;  // bootstrap: clients in all.
  int procs = 0;          // bootstrap: child processes (0: one per 16,000 clients).
  int sources = 8;        // bootstrap: loopback source addresses, 127.0.1.1 upwards.
  int window = 2048;      // bootstrap: connections in their handshake at once, all processes.
  double deadline = 60;   // bootstrap: seconds before the run stops and reports how far it got.
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<char*>(&v), 8); }
void AppendStr(std::string* s, const std::string& v) {
  AppendU64(s, v.size());
  s->append(v);
}

// Opcodes of the two families (REFERENCE.md §4): torch 1.x numbers them from SET = 0; torch 2.x
// inserted VALIDATE = 0 in front, shifting the rest by one. Set once in main() from --protocol.
struct Opcodes {
  char set = 0, cas = 1, get = 2, add = 3, check = 4, wait = 5, num_keys = 6;
  bool validate = false;  // 2.x: every connection opens with VALIDATE (no reply).
};
Opcodes g_op;
constexpr char kMultiGet = 10;  // 2.x only.

void UseProtocol(int family) {
  if (family == 2) g_op = Opcodes{1, 2, 3, 4, 5, 6, 7, true};
}

void SendAll(int fd, const std::string& b);

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0; ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++attempt) {
    if (attempt > 50) Die("connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{10, 0};  // Blocking reads never hang a run.
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (g_op.validate) {
    // VALIDATE (opcode 0) with the u32 magic 0x3C85F7CE, little-endian; the server does not reply.
    static const std::string kValidate("\x00\xCE\xF7\x85\x3C", 5);
    SendAll(fd, kValidate);
  }
  return fd;
}

void SendAll(int fd, const std::string& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n <= 0) Die("send");
    off += static_cast<size_t>(n);
  }
}

void RecvExact(int fd, size_t n) {
  char buf[256];
  while (n > 0) {
    ssize_t r = ::recv(fd, buf, std::min(n, sizeof buf), 0);
    if (r <= 0) Die("recv");
    n -= static_cast<size_t>(r);
  }
}

// One GETNUMKEYS round trip: returns once the server has accepted the connection and served a
// request on it, so that accepting (torch 2.13's libuv server also resolves each new peer's name
// on its loop thread) is not counted in the timed part of a run.
void Served(int fd) {
  SendAll(fd, std::string(1, g_op.num_keys));
  RecvExact(fd, 8);
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t last = v.size() - 1;
  size_t i = std::min(last, static_cast<size_t>(std::lround(p * static_cast<double>(last))));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

long RssKiB(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

// The soft RLIMIT_NOFILE of process `pid` (from /proc/PID/limits); -1 when unknown.
long MaxOpenFiles(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Max open files", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

// CPU time (user + system) the process has used, in microseconds; -1 when unknown.
double CpuUs(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::atol(field.c_str());
    if (i == 15) stime = std::atol(field.c_str());
  }
  return static_cast<double>(utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU time (user + system) this process has used, in microseconds.
double SelfCpuUs() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

void RaiseFileLimit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

// One connection of the closed loop: its request bytes and the reply length to expect.
struct Conn {
  int fd = -1;
  std::string request;
  size_t reply_len = 0;
  size_t got = 0;
  Clock::time_point sent;
};

int RunOps(const Flags& f) {
  const std::string value(16, 'v');
  // Preload: the keys get and cas read, the counters add writes.
  int setup = Connect(f.port);
  std::string pre;
  for (int i = 0; i < f.conns; ++i) {
    pre += g_op.set;
    AppendStr(&pre, "bench/k" + std::to_string(i));
    AppendStr(&pre, value);
  }
  pre += g_op.num_keys;
  SendAll(setup, pre);
  RecvExact(setup, 8);

  std::vector<Conn> conns(f.conns);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  for (int i = 0; i < f.conns; ++i) {
    Conn& c = conns[i];
    c.fd = Connect(f.port);
    Served(c.fd);
    std::string key = "bench/k" + std::to_string(i);
    if (f.op == "set") {
      for (int k = 0; k < f.pipeline; ++k) {
        c.request += g_op.set;
        AppendStr(&c.request, key);
        AppendStr(&c.request, value);
      }
      c.request += g_op.check;
      AppendU64(&c.request, 1);
      AppendStr(&c.request, key);
      c.reply_len = 1;
    } else if (f.op == "get") {
      c.request += g_op.get;
      AppendStr(&c.request, key);
      c.reply_len = 8 + value.size();
    } else if (f.op == "add") {
      c.request += g_op.add;
      AppendStr(&c.request, "bench/ctr" + std::to_string(i % 16));
      AppendU64(&c.request, 1);
      c.reply_len = 8;
    } else if (f.op == "cas") {
      c.request += g_op.cas;
      AppendStr(&c.request, key);
      AppendStr(&c.request, value);
      AppendStr(&c.request, value);
      c.reply_len = 8 + value.size();
    } else if (f.op == "check") {
      c.request += g_op.check;
      AppendU64(&c.request, 1);
      AppendStr(&c.request, key);
      c.reply_len = 1;
    } else if (f.op == "multi_get") {
      // MULTI_GET (2.x only) of this connection's key and the next three preloaded ones.
      if (!g_op.validate) {
        std::fprintf(stderr, "store_bench: --op multi_get needs --protocol 2\n");
        return 2;
      }
      c.request += kMultiGet;
      AppendU64(&c.request, 4);
      for (int k = 0; k < 4; ++k)
        AppendStr(&c.request, "bench/k" + std::to_string((i + k) % f.conns));
      c.reply_len = 4 * (8 + value.size());
    } else {
      std::fprintf(stderr, "store_bench: unknown --op %s\n", f.op.c_str());
      return 2;
    }
    if (f.pipeline > 1 && f.op != "set") {
      std::fprintf(stderr, "store_bench: --pipeline applies to --op set only\n");
      return 2;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }

  std::vector<double> lat_us;
  lat_us.reserve(std::min<long>(f.max_ops, 4'000'000));
  const double cpu_before = CpuUs(f.server_pid);
  const double self_before = SelfCpuUs();
  auto start = Clock::now();
  auto stop_at =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.seconds));
  const long per_trip = f.op == "set" ? std::max(1, f.pipeline) : 1;
  long done = 0, in_flight = 0;
  bool stopping = false;
  for (Conn& c : conns) {
    c.sent = Clock::now();
    SendAll(c.fd, c.request);
    ++in_flight;
  }
  std::vector<epoll_event> events(1024);
  char buf[4096];
  while (in_flight > 0) {
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10'000);
    if (n < 0) {
      if (errno == EINTR) continue;
      Die("epoll_wait");
    }
    if (n == 0) {
      std::fprintf(stderr, "store_bench: no reply for 10 s\n");
      return 1;
    }
    auto now = Clock::now();
    if (now >= stop_at || done >= f.max_ops) stopping = true;
    for (int e = 0; e < n; ++e) {
      Conn& c = conns[events[e].data.u32];
      ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r <= 0) Die("recv");
      c.got += static_cast<size_t>(r);
      if (c.got < c.reply_len) continue;
      c.got = 0;
      --in_flight;
      done += per_trip;
      lat_us.push_back(std::chrono::duration<double, std::micro>(now - c.sent).count());
      if (!stopping) {
        c.sent = now;
        SendAll(c.fd, c.request);
        ++in_flight;
      }
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_after = CpuUs(f.server_pid);
  const double self_after = SelfCpuUs();
  // Server CPU per operation: what the server would need per op with the machine to itself. The
  // generator's own CPU per operation bounds what any server can show on a shared machine.
  const auto ops = static_cast<double>(std::max(1L, done));
  double server_cpu_us = cpu_before < 0 ? -1 : (cpu_after - cpu_before) / ops;
  double gen_cpu_us = (self_after - self_before) / ops;
  // With --pipeline K a round trip carries K operations; latency is per round trip.
  std::string op_name = f.pipeline > 1 ? f.op + "-pipelined-" + std::to_string(f.pipeline) : f.op;
  std::printf(
      "{\"mode\": \"ops\", \"protocol\": %d, \"op\": \"%s\", \"conns\": %d, \"ops\": %ld, "
      "\"seconds\": %.3f, "
      "\"ops_per_s\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"server_cpu_us_per_op\": %.2f, "
      "\"gen_cpu_us_per_op\": %.2f}\n",
      f.protocol, op_name.c_str(), f.conns, done, secs, static_cast<double>(done) / secs,
      Percentile(lat_us, 0.50), Percentile(lat_us, 0.99), server_cpu_us, gen_cpu_us);
  for (Conn& c : conns) ::close(c.fd);
  ::close(setup);
  ::close(ep);
  return 0;
}

int RunFanout(const Flags& f) {
  std::vector<int> waiters(f.waiters);
  for (int& fd : waiters) {
    fd = Connect(f.port);
    Served(fd);
  }
  int setter = Connect(f.port);
  Served(setter);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  for (int i = 0; i < f.waiters; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, waiters[i], &ev);
  }
  std::vector<double> lat_us, last_us;
  std::vector<epoll_event> events(1024);
  for (int round = 0; round < f.rounds; ++round) {
    std::string key = "fan/" + std::to_string(round);
    std::string wait;
    wait += g_op.wait;
    AppendU64(&wait, 1);
    AppendStr(&wait, key);
    for (int fd : waiters) SendAll(fd, wait);
    // The waits must be registered before the SET: a round trip on each would perturb nothing,
    // but torch's server gives no way to ask, so give it time (20 us per waiter on top of 100 ms:
    // 430 ms at 16,384 waiters).
    std::this_thread::sleep_for(std::chrono::milliseconds(100) +
                                std::chrono::microseconds(20) * f.waiters);
    std::string set;
    set += g_op.set;
    AppendStr(&set, key);
    AppendStr(&set, "1");
    auto t0 = Clock::now();
    SendAll(setter, set);
    int woken = 0;
    double last = 0;
    while (woken < f.waiters) {
      int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10'000);
      if (n <= 0) {
        std::fprintf(stderr, "store_bench: fan-out stalled at %d of %d\n", woken, f.waiters);
        return 1;
      }
      auto now = Clock::now();
      for (int e = 0; e < n; ++e) {
        char b;
        if (::recv(waiters[events[e].data.u32], &b, 1, 0) != 1) Die("recv");
        double us = std::chrono::duration<double, std::micro>(now - t0).count();
        lat_us.push_back(us);
        last = std::max(last, us);
        ++woken;
      }
    }
    last_us.push_back(last);
  }
  std::printf(
      "{\"mode\": \"fanout\", \"protocol\": %d, \"waiters\": %d, \"rounds\": %d, \"p50_us\": %.1f, "
      "\"p99_us\": %.1f, \"last_waiter_p50_us\": %.1f, \"last_waiter_p99_us\": %.1f, "
      "\"last_waiter_max_us\": %.1f}\n",
      f.protocol, f.waiters, f.rounds, Percentile(lat_us, 0.50), Percentile(lat_us, 0.99),
      Percentile(last_us, 0.50), Percentile(last_us, 0.99),
      *std::max_element(last_us.begin(), last_us.end()));
  for (int fd : waiters) ::close(fd);
  ::close(setter);
  ::close(ep);
  return 0;
}

int RunIdle(const Flags& f) {
  if (f.server_pid <= 0) {
    std::fprintf(stderr, "store_bench: --mode idle needs --server-pid\n");
    return 2;
  }
  std::string numkeys(1, g_op.num_keys);
  // Warm the server with a few connections first, so one-time allocations are not counted.
  for (int i = 0; i < 16; ++i) {
    int fd = Connect(f.port);
    SendAll(fd, numkeys);
    RecvExact(fd, 8);
    ::close(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  long before = RssKiB(f.server_pid);
  auto t0 = Clock::now();
  std::vector<int> fds;
  fds.reserve(f.conns);
  for (int i = 0; i < f.conns; ++i) {
    int fd = Connect(f.port);
    SendAll(fd, numkeys);
    RecvExact(fd, 8);
    fds.push_back(fd);
  }
  double open_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  long after = RssKiB(f.server_pid);
  // All of them still answer (a sample of 100, spread out).
  int answered = 0;
  for (int i = 0; i < f.conns; i += std::max(1, f.conns / 100)) {
    SendAll(fds[i], numkeys);
    RecvExact(fds[i], 8);
    ++answered;
  }
  std::printf(
      "{\"mode\": \"idle\", \"protocol\": %d, \"conns\": %d, \"held\": %zu, \"open_seconds\": "
      "%.2f, "
      "\"rss_before_kib\": %ld, \"rss_after_kib\": %ld, \"kib_per_conn\": %.2f, "
      "\"sample_answered\": %d}\n",
      f.protocol, f.conns, fds.size(), open_s, before, after,
      static_cast<double>(after - before) / f.conns, answered);
  for (int fd : fds) ::close(fd);
  return 0;
}

// ---- bootstrap ---------------------------------------------------------------------------------

// What one child process of the bootstrap reports to the parent through a pipe.
struct BootReport {
  long connected = 0;  // PING answered.
  long added = 0;      // ADD answered.
  long released = 0;   // STOP_WAITING received.
  long failed = 0;
  int64_t first_connect_ns = INT64_MAX;  // steady_clock, comparable across processes.
  int64_t last_release_ns = 0;
  int first_errno = 0;
  char first_error_where[24] = {};
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Source address k of the bootstrap: 127.0.1.1, 127.0.1.2, ... (all of 127.0.0.0/8 is loopback).
in_addr_t SourceAddress(int k) {
  return htonl((127u << 24) | ((1u + static_cast<uint32_t>(k) / 250u) << 8) |
               (1u + static_cast<uint32_t>(k) % 250u));
}

enum class BootState : uint8_t { kIdle, kConnecting, kPinging, kAdding, kWaiting, kDone, kFailed };

struct BootClient {
  int fd = -1;
  BootState state = BootState::kIdle;
  uint8_t got = 0;
  char buf[8] = {};
};

// One child's share of the bootstrap: clients [lo, hi) of `total`. Returns its report.
BootReport RunBootstrapSlice(const Flags& f, int lo, int hi, const std::string& tag,
                             int64_t deadline_ns, int window) {
  BootReport rep;
  const int count = hi - lo;
  std::vector<BootClient> clients(static_cast<size_t>(count));
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) Die("epoll_create1");
  const std::string count_key = "boot/" + tag + "/count";
  const std::string release_key = "boot/" + tag + "/release";
  std::string add_req, set_req, wait_req;
  add_req += g_op.add;
  AppendStr(&add_req, count_key);
  AppendU64(&add_req, 1);
  set_req += g_op.set;
  AppendStr(&set_req, release_key);
  AppendStr(&set_req, "1");
  wait_req += g_op.wait;
  AppendU64(&wait_req, 1);
  AppendStr(&wait_req, release_key);
  // VALIDATE (no reply) and PING with the client's index as nonce, in one write.
  auto fail = [&](BootClient& c, int err, const char* where) {
    if (rep.first_errno == 0 && rep.first_error_where[0] == 0) {
      rep.first_errno = err;
      std::snprintf(rep.first_error_where, sizeof rep.first_error_where, "%s", where);
    }
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.state = BootState::kFailed;
    ++rep.failed;
  };
  auto send_or_fail = [&](BootClient& c, const std::string& b) {
    // Requests are tens of bytes on a fresh socket: a short write means a broken connection.
    ssize_t n = ::send(c.fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(b.size())) {
      fail(c, n < 0 ? errno : EPIPE, "send");
      return false;
    }
    return true;
  };
  int next = 0, handshaking = 0;
  long finished = 0;
  std::vector<epoll_event> events(4096);
  while (finished < count && NowNs() < deadline_ns) {
    while (next < count && handshaking < window) {
      BootClient& c = clients[static_cast<size_t>(next)];
      const int index = lo + next;
      ++next;
      c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c.fd < 0) {
        fail(c, errno, "socket");
        ++finished;
        continue;
      }
      int one = 1;
      ::setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
      ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = SourceAddress(index % f.sources);
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(static_cast<uint16_t>(f.port));
      dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      rep.first_connect_ns = std::min(rep.first_connect_ns, NowNs());
      if (::bind(c.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
        fail(c, errno, "bind");
        ++finished;
        continue;
      }
      if (::connect(c.fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 &&
          errno != EINPROGRESS) {
        fail(c, errno, "connect");
        ++finished;
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
      ev.data.u32 = static_cast<uint32_t>(next - 1);
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev) != 0) Die("epoll_ctl");
      c.state = BootState::kConnecting;
      ++handshaking;
    }
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    if (n < 0) {
      if (errno == EINTR) continue;
      Die("epoll_wait");
    }
    for (int e = 0; e < n; ++e) {
      const uint32_t i = events[e].data.u32;
      BootClient& c = clients[i];
      const uint32_t what = events[e].events;
      if (c.state == BootState::kConnecting) {
        if ((what & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) continue;
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          fail(c, err, "connect");
          --handshaking;
          ++finished;
          continue;
        }
        std::string hello("\x00\xCE\xF7\x85\x3C", 5);
        hello += static_cast<char>(13);  // PING (2.x).
        const uint32_t nonce = static_cast<uint32_t>(lo) + i;
        hello.append(reinterpret_cast<const char*>(&nonce), 4);
        c.state = BootState::kPinging;
        if (!send_or_fail(c, hello)) {
          --handshaking;
          ++finished;
        }
        continue;
      }
      // Read what the current state's reply still needs; each state has one reply in flight.
      while (c.state == BootState::kPinging || c.state == BootState::kAdding ||
             c.state == BootState::kWaiting) {
        const uint8_t want = c.state == BootState::kPinging  ? 4
                             : c.state == BootState::kAdding ? 8
                                                             : 1;
        ssize_t r = ::recv(c.fd, c.buf + c.got, want - c.got, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r <= 0) {
          if (c.state == BootState::kPinging) --handshaking;
          fail(c, r == 0 ? ECONNRESET : errno, "recv");
          ++finished;
          break;
        }
        c.got = static_cast<uint8_t>(c.got + r);
        if (c.got < want) continue;
        c.got = 0;
        if (c.state == BootState::kPinging) {
          --handshaking;
          ++rep.connected;
          c.state = BootState::kAdding;
          if (!send_or_fail(c, add_req)) ++finished;
        } else if (c.state == BootState::kAdding) {
          ++rep.added;
          int64_t v = 0;
          std::memcpy(&v, c.buf, 8);
          c.state = BootState::kWaiting;
          // The last to arrive releases everyone, as a store-based barrier does.
          if (!send_or_fail(c, v == f.clients ? set_req + wait_req : wait_req)) ++finished;
        } else {
          c.state = BootState::kDone;
          ++rep.released;
          ++finished;
          rep.last_release_ns = NowNs();
        }
      }
    }
  }
  // Connections stay open until every client of this slice is released or the deadline passed;
  // exiting closes them.
  return rep;
}

int RunBootstrap(const Flags& f) {
  if (f.protocol != 2) {
    std::fprintf(stderr, "store_bench: --mode bootstrap speaks the torch 2.x protocol only\n");
    return 2;
  }
  if (f.clients < 1 || f.procs < 1 || f.sources < 1 || f.sources > 250 * 250) {
    std::fprintf(stderr, "store_bench: --clients, --procs and --sources must be >= 1\n");
    return 2;
  }
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(NowNs());
  const int64_t deadline_ns = NowNs() + static_cast<int64_t>(f.deadline * 1e9);
  const int window = std::max(16, f.window / f.procs);
  const long rss_before = f.server_pid > 0 ? RssKiB(f.server_pid) : -1;
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int p = 0; p < f.procs; ++p) {
    const int lo = static_cast<int>(static_cast<long>(f.clients) * p / f.procs);
    const int hi = static_cast<int>(static_cast<long>(f.clients) * (p + 1) / f.procs);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) Die("pipe2");
    pid_t pid = ::fork();
    if (pid < 0) Die("fork");
    if (pid == 0) {
      ::close(fds[0]);
      BootReport rep = RunBootstrapSlice(f, lo, hi, tag, deadline_ns, window);
      if (::write(fds[1], &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) _exit(1);
      _exit(0);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  // Sample the server's RSS while the clients run; its peak is the figure per connection.
  long rss_peak = rss_before;
  size_t alive = children.size();
  std::vector<bool> reaped(children.size(), false);
  const int64_t kill_at = deadline_ns + 5'000'000'000;
  while (alive > 0) {
    if (f.server_pid > 0) rss_peak = std::max(rss_peak, RssKiB(f.server_pid));
    for (size_t i = 0; i < children.size(); ++i) {
      if (reaped[i]) continue;
      if (::waitpid(children[i], nullptr, WNOHANG) == children[i]) {
        reaped[i] = true;
        --alive;
      }
    }
    if (NowNs() > kill_at) {
      for (size_t i = 0; i < children.size(); ++i) {
        if (!reaped[i]) ::kill(children[i], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BootReport total;
  std::string first_error;
  for (int fd : pipes) {
    BootReport rep;
    if (::read(fd, &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep)) {
      total.connected += rep.connected;
      total.added += rep.added;
      total.released += rep.released;
      total.failed += rep.failed;
      total.first_connect_ns = std::min(total.first_connect_ns, rep.first_connect_ns);
      total.last_release_ns = std::max(total.last_release_ns, rep.last_release_ns);
      if (first_error.empty() && rep.first_errno != 0) {
        first_error = std::string(rep.first_error_where) + ": " + std::strerror(rep.first_errno);
      }
    }
    ::close(fd);
  }
  const bool ok = total.released == f.clients;
  const double seconds =
      ok ? static_cast<double>(total.last_release_ns - total.first_connect_ns) / 1e9 : -1;
  std::printf(
      "{\"mode\": \"bootstrap\", \"protocol\": 2, \"clients\": %d, \"procs\": %d, \"sources\": "
      "%d, \"window\": %d, \"deadline_s\": %.0f, \"ok\": %s, \"connected\": %ld, \"added\": %ld, "
      "\"released\": %ld, \"failed\": %ld, \"first_error\": \"%s\", \"seconds\": %.3f, "
      "\"server_rss_before_kib\": %ld, \"server_rss_peak_kib\": %ld, \"kib_per_conn\": %.3f, "
      "\"server_max_open_files\": %ld}\n",
      f.clients, f.procs, f.sources, window * f.procs, f.deadline, ok ? "true" : "false",
      total.connected, total.added, total.released, total.failed, first_error.c_str(), seconds,
      rss_before, rss_peak,
      static_cast<double>(rss_peak - rss_before) /
          static_cast<double>(std::max(1L, total.connected)),
      MaxOpenFiles(f.server_pid));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port")
      f.port = std::atoi(v.c_str());
    else if (k == "--mode")
      f.mode = v;
    else if (k == "--op")
      f.op = v;
    else if (k == "--conns")
      f.conns = std::atoi(v.c_str());
    else if (k == "--seconds")
      f.seconds = std::atof(v.c_str());
    else if (k == "--max-ops")
      f.max_ops = std::atol(v.c_str());
    else if (k == "--waiters")
      f.waiters = std::atoi(v.c_str());
    else if (k == "--rounds")
      f.rounds = std::atoi(v.c_str());
    else if (k == "--server-pid")
      f.server_pid = std::atoi(v.c_str());
    else if (k == "--pipeline")
      f.pipeline = std::atoi(v.c_str());
    else if (k == "--protocol")
      f.protocol = std::atoi(v.c_str());
    else if (k == "--clients")
      f.clients = std::atoi(v.c_str());
    else if (k == "--procs")
      f.procs = std::atoi(v.c_str());
    else if (k == "--sources")
      f.sources = std::atoi(v.c_str());
    else if (k == "--window")
      f.window = std::atoi(v.c_str());
    else if (k == "--deadline")
      f.deadline = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "store_bench: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (f.port <= 0) {
    std::fprintf(stderr, "store_bench: --port is required\n");
    return 2;
  }
  if (f.protocol != 1 && f.protocol != 2) {
    std::fprintf(stderr, "store_bench: --protocol must be 1 or 2, got %d\n", f.protocol);
    return 2;
  }
  UseProtocol(f.protocol);
  RaiseFileLimit();
  if (f.mode == "ops") return RunOps(f);
  if (f.mode == "fanout") return RunFanout(f);
  if (f.mode == "idle") return RunIdle(f);
  if (f.mode == "bootstrap") {
    if (f.procs == 0) f.procs = (f.clients + 15'999) / 16'000;
    return RunBootstrap(f);
  }
  std::fprintf(stderr, "store_bench: unknown --mode %s\n", f.mode.c_str());
  return 2;
}
