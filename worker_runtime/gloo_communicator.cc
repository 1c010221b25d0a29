#include "dgt/worker/gloo_communicator.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/store_keys.h"
#include "dgt/store/prefix_store.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/tcp/loop.h"
#include "gloo/transport/unbound_buffer.h"

namespace dgt::worker {

std::string CommKeyPrefix(absl::string_view group, int generation) {
  return keys::CommPrefix(group, generation);
}

namespace {

std::chrono::milliseconds ToMs(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Thrown by the store adapter when the bootstrap was cancelled or ran past its deadline.
class BootstrapInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Interrupts a Gloo bootstrap (connectFullMesh) on BootstrapCancel::Cancel() or at its deadline.
// Debian's Gloo offers no way to cancel it. A store wait is cut into short waits that check the
// flag. A pair waiting for its peer to connect (up to 5 x the Gloo timeout, for ever when the
// peer died after publishing its address) is woken by connecting to its listening socket
// ourselves: the addresses are those this rank published in the store. The pair then "connects"
// to that socket and connectFullMesh moves on, to fail at its next store wait.
class BootstrapGuard {
 public:
  BootstrapGuard(std::shared_ptr<BootstrapCancel> cancel, absl::Time deadline)
      : cancel_(std::move(cancel)), deadline_(deadline) {
    thread_ = std::thread([this] { Run(); });
    if (cancel_ != nullptr) {
      cancel_->OnCancel([this] {
        dgt::MutexLock lock(&mu_);
        cancel_requested_ = true;
        cv_.Signal();
      });
    }
  }
  ~BootstrapGuard() {
    if (cancel_ != nullptr) cancel_->OnCancel(nullptr);
    {
      dgt::MutexLock lock(&mu_);
      done_ = true;
      cv_.Signal();
    }
    thread_.join();
    for (int fd : wake_fds_) ::close(fd);
  }
  BootstrapGuard(const BootstrapGuard&) = delete;
  BootstrapGuard& operator=(const BootstrapGuard&) = delete;

  absl::Time deadline() const { return deadline_; }

  // The addresses of this rank's pairs (Gloo's value for this rank's key).
  void SetOwnAddresses(const std::vector<char>& value) {
    dgt::MutexLock lock(&mu_);
    own_addresses_ = value;
  }

  // OK, or why the bootstrap must stop: Aborted (cancelled) or DeadlineExceeded.
  absl::Status Check() const {
    dgt::MutexLock lock(&mu_);
    return stop_;
  }

 private:
  void Run() {
    dgt::MutexLock lock(&mu_);
    while (!done_ && !cancel_requested_ && absl::Now() < deadline_) {
      cv_.WaitWithDeadline(&mu_, deadline_);
    }
    if (done_) return;
    stop_ = cancel_requested_
                ? absl::AbortedError(absl::StrCat("bootstrap cancelled: ", cancel_->reason()))
                : absl::DeadlineExceededError("bootstrap deadline passed");
    WakeListeningPairs();
  }

  void WakeListeningPairs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t n = gloo::transport::tcp::Address().bytes().size();
    if (n == 0 || own_addresses_.size() % n != 0) return;
    for (size_t off = 0; off < own_addresses_.size(); off += n) {
      std::vector<char> bytes(own_addresses_.data() + off, own_addresses_.data() + off + n);
      try {
        const sockaddr_storage ss = gloo::transport::tcp::Address(bytes).getSockaddr();
        const socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
        const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        // Non-blocking: a listening socket on this host accepts at once; any other is moot.
        [[maybe_unused]] int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len);
        wake_fds_.push_back(fd);
      } catch (const std::exception&) {
        // Not an address: nothing to wake.
      }
    }
  }

  const std::shared_ptr<BootstrapCancel> cancel_;
  const absl::Time deadline_;
  mutable dgt::Mutex mu_;
  dgt::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status stop_ ABSL_GUARDED_BY(mu_);
  std::vector<char> own_addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<int> wake_fds_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// gloo's rendezvous store on top of a dgt store. Gloo reports store failures by exception; they
// are caught where connectFullMesh is called. Every wait ends by the guard's deadline, and within
// kSlice of the guard stopping the bootstrap.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  static constexpr absl::Duration kSlice = absl::Milliseconds(50);

  GlooStoreAdapter(store::Store& store, BootstrapGuard& guard, std::string own_key)
      : store_(store), guard_(guard), own_key_(std::move(own_key)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    ThrowIfStopped();
    if (key == own_key_) guard_.SetOwnAddresses(data);
    absl::Status s = store_.Set(key, absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw std::runtime_error(absl::StrCat("store set ", key, ": ", s.ToString()));
  }
  std::vector<char> get(const std::string& key) override {
    WaitUntil({key}, guard_.deadline());
    auto v = store_.Get(key);
    if (!v.ok())
      throw std::runtime_error(absl::StrCat("store get ", key, ": ", v.status().ToString()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { WaitUntil(keys, guard_.deadline()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    WaitUntil(keys, std::min(guard_.deadline(), absl::Now() + absl::Milliseconds(timeout.count())));
  }

 private:
  void ThrowIfStopped() {
    if (absl::Status s = guard_.Check(); !s.ok()) throw BootstrapInterrupted(s.ToString());
  }
  void WaitUntil(const std::vector<std::string>& keys, absl::Time deadline) {
    for (;;) {
      ThrowIfStopped();
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        throw std::runtime_error("store wait: DEADLINE_EXCEEDED: bootstrap deadline passed");
      }
      absl::Status s = store_.Wait(keys, std::min(left, kSlice));
      if (s.ok()) return;
      if (s.code() != absl::StatusCode::kDeadlineExceeded) {
        throw std::runtime_error(absl::StrCat("store wait: ", s.ToString()));
      }
    }
  }

  store::Store& store_;
  BootstrapGuard& guard_;
  const std::string own_key_;
};

// Debian's Gloo (2022-05) runs a TCP device's I/O loop as epoll_wait(..., 10 ms) and a thread that
// unregisters a descriptor from it waits for the loop's next turn: up to 10 ms each time, and it
// happens on every pair a rank connects as the initiator (the pair drops its listening socket)
// and on every pair and device closed. A LoopWaker, registered with the device's loop, makes the
// loop turn every kPeriod while Start()ed, so those waits end at once. Destroy it after the
// device (closing its eventfd leaves the loop's epoll set).
class LoopWaker final : public gloo::transport::tcp::Handler {
 public:
  static constexpr absl::Duration kPeriod = absl::Microseconds(200);

  // nullptr when `device` is not Gloo's TCP device or no eventfd could be made (then the loop
  // turns at its own pace: slower, still correct).
  static std::unique_ptr<LoopWaker> Create(gloo::transport::Device& device) {
    auto* tcp = dynamic_cast<gloo::transport::tcp::Device*>(&device);
    if (tcp == nullptr) return nullptr;
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return nullptr;
    std::unique_ptr<LoopWaker> w(new LoopWaker(fd));
    tcp->registerDescriptor(fd, EPOLLIN, w.get());
    return w;
  }
  ~LoopWaker() override {
    Stop();
    ::close(fd_);
  }

  // Called by the loop's thread: consume the wake-ups.
  void handleEvents(int /*events*/) override {
    uint64_t n = 0;
    [[maybe_unused]] ssize_t r = ::read(fd_, &n, sizeof(n));
  }

  // Wakes the loop every kPeriod until Stop().
  void Start() {
    if (thread_.joinable()) return;
    {
      dgt::MutexLock lock(&mu_);
      stop_ = false;
    }
    thread_ = std::thread([this] {
      const uint64_t one = 1;
      dgt::MutexLock lock(&mu_);
      while (!stop_) {
        [[maybe_unused]] ssize_t r = ::write(fd_, &one, sizeof(one));
        cv_.WaitWithDeadline(&mu_, absl::Now() + kPeriod);
      }
    });
  }
  void Stop() {
    if (!thread_.joinable()) return;
    {
      dgt::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

 private:
  explicit LoopWaker(int fd) : fd_(fd) {}

  const int fd_;
  dgt::Mutex mu_;
  dgt::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Starts `waker` (may be null) for a scope.
class WakeScope {
 public:
  explicit WakeScope(LoopWaker* waker) : waker_(waker) {
    if (waker_ != nullptr) waker_->Start();
  }
  ~WakeScope() {
    if (waker_ != nullptr) waker_->Stop();
  }
  WakeScope(const WakeScope&) = delete;
  WakeScope& operator=(const WakeScope&) = delete;

 private:
  LoopWaker* const waker_;
};

absl::Status FromException(const std::exception& e, absl::string_view what) {
  const std::string msg = absl::StrCat(what, ": ", e.what());
  if (absl::StrContains(e.what(), "Timed out") || absl::StrContains(e.what(), "DEADLINE_EXCEEDED"))
    return absl::DeadlineExceededError(msg);
  return absl::UnavailableError(msg);
}

template <typename T>
void Reduce(absl::Span<T> out, const std::vector<std::vector<char>>& all, ReduceOp op) {
  // Rank order, so every rank computes the same bits.
  for (size_t i = 0; i < out.size(); ++i) {
    T acc;
    std::memcpy(&acc, all[0].data() + i * sizeof(T), sizeof(T));
    for (size_t r = 1; r < all.size(); ++r) {
      T v;
      std::memcpy(&v, all[r].data() + i * sizeof(T), sizeof(T));
      switch (op) {
        case ReduceOp::kSum:
          acc = acc + v;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
      }
    }
    out[i] = acc;
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const CommunicatorOptions& options, std::unique_ptr<LoopWaker> waker,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : options_(options),
        waker_(std::move(waker)),
        device_(std::move(device)),
        context_(std::move(context)) {}

  ~GlooCommunicator() override {
    // Close sockets before the device's loop goes away.
    try {
      // Closing pairs and the device waits for turns of the device's loop: keep it turning.
      WakeScope wake(waker_.get());
      context_.reset();
      // The buffers of failed operations hold the transport context: it closes with them. Their
      // memory (graveyard_data_) lives until after the device is gone.
      graveyard_buffers_.clear();
      device_.reset();
    } catch (const std::exception& e) {
      spdlog::warn("gloo: closing generation {}: {}", options_.generation, e.what());
    }
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  int generation() const override { return options_.generation; }
  absl::string_view backend() const override { return "gloo"; }

  absl::Status AllReduce(absl::Span<int64_t> data, ReduceOp op) override {
    return AllReduceT(data, op);
  }
  absl::Status AllReduce(absl::Span<float> data, ReduceOp op) override {
    return AllReduceT(data, op);
  }

  absl::Status Broadcast(absl::Span<int64_t> data, int root) override {
    if (root < 0 || root >= options_.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast root must be in [0, ", options_.size, "), got ", root));
    }
    std::vector<std::vector<char>> all;
    DGT_RETURN_IF_ERROR(Exchange(data.data(), data.size() * sizeof(int64_t), root, &all));
    if (options_.rank != root) {
      std::memcpy(data.data(), all[root].data(), data.size() * sizeof(int64_t));
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    int64_t zero = 0;
    return AllReduce(absl::MakeSpan(&zero, 1), ReduceOp::kSum);
  }

  void Abort(absl::string_view reason) override {
    dgt::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = std::string(reason);
    for (gloo::transport::UnboundBuffer* b : pending_) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
  bool aborted() const override {
    dgt::MutexLock lock(&mu_);
    return aborted_;
  }

 private:
  template <typename T>
  absl::Status AllReduceT(absl::Span<T> data, ReduceOp op) {
    std::vector<std::vector<char>> all;
    DGT_RETURN_IF_ERROR(Exchange(data.data(), data.size() * sizeof(T), -1, &all));
    Reduce(data, all, op);
    return absl::OkStatus();
  }

  absl::Status AbortedStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(
        absl::StrCat("communicator generation ", options_.generation, " aborted: ", abort_reason_));
  }

  // Sends `bytes` of `mine` to every peer (root < 0) or, from root, to every rank; receives the
  // peers' bytes into (*all)[peer]; (*all)[rank] is a copy of mine.
  absl::Status Exchange(const void* mine, size_t bytes, int root,
                        std::vector<std::vector<char>>* all) {
    const int n = options_.size, me = options_.rank;
    all->assign(n, std::vector<char>(bytes));
    if (bytes > 0) std::memcpy((*all)[me].data(), mine, bytes);
    if (failed_) return absl::FailedPreconditionError(failure_);
    {
      // Nothing may leave an aborted communicator: a peer could complete with our data.
      dgt::MutexLock lock(&mu_);
      if (aborted_) return Fail(AbortedStatus());
    }
    if (n == 1 || bytes == 0) return absl::OkStatus();
    const uint64_t slot = next_slot_++;
    const auto deadline = std::chrono::steady_clock::now() + ToMs(options_.op_timeout);
    std::unique_ptr<gloo::transport::UnboundBuffer> out;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> ins;
    absl::Status result = absl::OkStatus();
    try {
      const bool send = root < 0 || root == me;
      out = context_->createUnboundBuffer((*all)[me].data(), bytes);
      int sends = 0;
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        if (root < 0 || root == p) {
          ins.push_back(context_->createUnboundBuffer((*all)[p].data(), bytes));
          ins.back()->recv(p, slot);
        }
        if (send) {
          out->send(p, slot);
          ++sends;
        }
      }
      {
        dgt::MutexLock lock(&mu_);
        if (aborted_) return Fail(AbortedStatus());
        pending_.push_back(out.get());
        for (auto& b : ins) pending_.push_back(b.get());
      }
      bool ok = true;
      for (auto& b : ins) ok = ok && b->waitRecv(deadline);
      for (int i = 0; ok && i < sends; ++i) ok = out->waitSend(deadline);
      if (!ok) {
        dgt::MutexLock lock(&mu_);
        result = AbortedStatus();
      }
    } catch (const std::exception& e) {
      result =
          FromException(e, absl::StrCat("gloo generation ", options_.generation, " rank ", me));
    }
    {
      dgt::MutexLock lock(&mu_);
      pending_.clear();
    }
    if (!result.ok()) {
      // Gloo's transport thread may still complete a send or receive of an aborted operation:
      // its buffers (and the memory they point at) must outlive the context, so they are kept
      // until this communicator is destroyed (the communicator is unusable from now on anyway).
      if (out) graveyard_buffers_.push_back(std::move(out));
      for (auto& b : ins) graveyard_buffers_.push_back(std::move(b));
      graveyard_data_.push_back(std::move(*all));
      all->assign(n, std::vector<char>(bytes));
      return Fail(result);
    }
    return result;
  }

  absl::Status Fail(absl::Status s) {
    failed_ = true;
    failure_ = absl::StrCat("communicator failed earlier: ", s.ToString());
    return s;
  }

  const CommunicatorOptions options_;
  // Outlives the device (declared before it).
  std::unique_ptr<LoopWaker> waker_;
  // Buffers of failed operations; declared before the context so that they are destroyed after
  // it (members are destroyed in reverse order).
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> graveyard_buffers_;
  std::vector<std::vector<std::vector<char>>> graveyard_data_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint64_t next_slot_ = 1;
  bool failed_ = false;  // Owned by the collective thread.
  std::string failure_;
  mutable dgt::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  std::vector<gloo::transport::UnboundBuffer*> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicatorFactory::Create(
    store::Store& store, const CommunicatorOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank must be in [0, ", options.size, "), got ", options.rank));
  }
  // Gloo's TCP transport writes with write(2): a dead peer would raise SIGPIPE and kill this
  // process instead of failing the collective. Ignore it unless the program chose a handler.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  BootstrapGuard guard(options.cancel, absl::Now() + options.init_timeout);
  const std::string what = absl::StrCat("gloo bootstrap of generation ", options.generation,
                                        " rank ", options.rank, "/", options.size);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options_.hostname;
    std::unique_ptr<LoopWaker> waker;  // Destroyed after the device, also on errors.
    auto device = gloo::transport::tcp::CreateDevice(attr);
    waker = LoopWaker::Create(*device);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(ToMs(options.init_timeout));
    store::PrefixStore prefixed(options.key_prefix, store);
    // Gloo publishes a rank's pair addresses under the rank's number.
    GlooStoreAdapter adapter(prefixed, guard, std::to_string(options.rank));
    {
      WakeScope wake(waker.get());
      context->connectFullMesh(adapter, device);
    }
    // A pair woken by the guard "connected" to the guard's socket: the context is unusable.
    if (absl::Status s = guard.Check(); !s.ok()) {
      WakeScope wake(waker.get());
      context.reset();
      device.reset();
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    context->setTimeout(ToMs(options.op_timeout));
    return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(
        options, std::move(waker), std::move(device), std::move(context)));
  } catch (const std::exception& e) {
    // Whatever Gloo made of the interruption, the guard knows why it happened.
    if (absl::Status s = guard.Check(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message(), " (", e.what(), ")"));
    }
    return FromException(e, what);
  }
}

}  // namespace dgt::worker
