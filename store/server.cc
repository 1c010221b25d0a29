#include "dgt/store/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "boost/asio.hpp"
#include "common/logging.h"
#include "store/engine.h"
#include "store/wire.h"

namespace dgt::store {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
// Sockets bound to the io_context's own executor type rather than Asio's type-erased default:
// the socket and each pending operation then carry one pointer for their executor instead of a
// polymorphic one, which is a tenth of what an idle connection costs.
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;

// Every read is processed in one buffer of kReadChunk bytes that the loop shares between
// connections; complete requests are answered from there, and only the incomplete tail of a
// message is copied into the connection's own buffer, which is freed once that message is
// complete. So an idle connection holds no read buffer beyond kInlineRead bytes. A reply buffer
// that a large reply grew past kKeepReply is freed once sent; smaller ones keep their capacity, so
// small replies allocate nothing.
constexpr size_t kReadChunk = 64 * 1024;
// At most this many shared-buffer reads per wake-up of one connection (1 MiB): a client that
// keeps its socket full goes back to the end of the loop's queue after them, so it cannot keep
// the loop from the other connections.
constexpr int kMaxReadsPerWakeup = 16;
// The first bytes of every read (see Connection::Read): enough for the small requests that
// make up a torch job's traffic (a GET, ADD, CHECK or WAIT of a key of up to about 40 bytes).
constexpr size_t kInlineRead = 64;
constexpr size_t kKeepReply = 1024;
// After accept fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
// listener pauses this long instead of retrying at once: the pending connection stays queued, so
// an immediate retry would fail again in a busy loop.
constexpr std::chrono::milliseconds kAcceptPause(100);

}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        limits_{options_.max_key_bytes, options_.max_value_bytes, options_.max_keys_per_request},
        acceptor_(io_.get_executor()),
        accept_timer_(io_),
        idle_timer_(io_) {}

  ~Impl() { Stop(); }

  absl::Status Start() {
    if (thread_.joinable()) return absl::FailedPreconditionError("store server already started");
    boost::system::error_code ec;
    asio::ip::address address = asio::ip::make_address(options_.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("store listen address must be an IP literal, got '", options_.host, "'"));
    }
    tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(Acceptor::reuse_address(true), ec);
    if (!ec && address.is_v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      std::string what = absl::StrCat("store cannot listen on ", options_.host, ":", options_.port,
                                      ": ", ec.message());
      acceptor_.close();
      if (ec == asio::error::address_in_use) return absl::AlreadyExistsError(what);
      return absl::UnavailableError(what);
    }
    port_ = acceptor_.local_endpoint().port();
    read_buffer_.resize(kReadChunk);
    Accept();
    if (options_.idle_timeout > absl::ZeroDuration()) ScheduleIdleSweep();
    thread_ = std::thread([this] { io_.run(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      accept_timer_.cancel();
      idle_timer_.cancel();
      for (const auto& c : connections_) c->Close("server stopping", spdlog::level::debug);
      connections_.clear();
      io_.stop();
    });
    thread_.join();
  }

  uint16_t port() const { return port_; }

  ServerStats Stats() {
    if (!thread_.joinable() || io_.stopped()) return {};
    std::promise<ServerStats> promise;
    std::future<ServerStats> future = promise.get_future();
    asio::post(io_, [this, &promise] {
      ServerStats s;
      s.connections = connections_.size();
      s.keys = static_cast<size_t>(engine_.NumKeys());
      s.pending_waits = engine_.PendingWaits();
      s.closed_by_server = closed_by_server_;
      promise.set_value(s);
    });
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return {};
    return future.get();
  }

 private:
  class Connection : public std::enable_shared_from_this<Connection> {
   public:
    Connection(Impl* server, Socket socket, const tcp::endpoint& peer)
        : server_(server), socket_(std::move(socket)), peer_(peer) {
      boost::system::error_code ec;
      socket_.set_option(tcp::no_delay(true), ec);
      socket_.non_blocking(true, ec);
      last_activity_ = SteadyClock::now();
    }

    void Start() { Read(); }

    // Every close has a reason: the server's own decisions are warnings, a peer going away is
    // a debug line.
    void Close(absl::string_view reason, spdlog::level::level_enum level = spdlog::level::warn) {
      if (closed_) return;
      closed_ = true;
      if (level == spdlog::level::warn) ++server_->closed_by_server_;
      spdlog::log(level, "store: closing connection from {}:{}: {}", peer_.address().to_string(),
                  peer_.port(), reason);
      if (wait_id_) {
        server_->engine_.CancelWait(*wait_id_);
        wait_id_.reset();
      }
      for (const auto& [key, w] : v1_waits_) server_->engine_.CancelWait(w.id);
      v1_waits_.clear();
      boost::system::error_code ec;
      socket_.shutdown(Socket::shutdown_both, ec);
      socket_.close(ec);
    }

    bool closed() const { return closed_; }
    bool waiting() const { return wait_id_.has_value() || !v1_waits_.empty(); }
    SteadyClock::time_point last_activity() const { return last_activity_; }

   private:
    // Each read starts as an Asio read of at most kInlineRead bytes into the connection's own
    // small array, which most requests fit: a read that Asio completes short leaves the socket
    // drained, so the next one is queued without a speculative recv or an epoll re-arm (an
    // async_wait would re-arm the descriptor with epoll_ctl on every request). A read that fills
    // the array is continued synchronously in the loop's shared buffer until the socket is
    // drained.
    void Read() {
      if (closed_) return;
      socket_.async_read_some(asio::buffer(inline_read_),
                              [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                                self->OnData(ec, n);
                              });
    }

    void OnData(boost::system::error_code ec, size_t n) {
      if (closed_) {
        server_->connections_.erase(shared_from_this());
        return;
      }
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        Read();
        return;
      }
      std::string& buffer = server_->read_buffer_;
      std::memcpy(buffer.data(), inline_read_.data(), n);
      size_t len = n;
      bool drained = ec || n < inline_read_.size();
      for (int reads = 0;; ++reads) {
        if (!drained) {
          size_t more =
              socket_.read_some(asio::buffer(buffer.data() + len, buffer.size() - len), ec);
          len += more;
          drained = ec || len < buffer.size();
        }
        if (len > 0) {
          last_activity_ = SteadyClock::now();
          Consume(absl::string_view(buffer.data(), len));
          Flush();
        }
        if (closed_) {
          server_->connections_.erase(shared_from_this());
          return;
        }
        if (drained || reads == kMaxReadsPerWakeup) break;
        len = 0;
      }
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        Close(ec == asio::error::eof ? "peer closed the connection" : ec.message(),
              spdlog::level::debug);
        server_->connections_.erase(shared_from_this());
        return;
      }
      Read();
    }

    // Answers every complete request of `data` (bytes just read, in the shared buffer) and keeps
    // an incomplete tail in partial_, which grows with the bytes that arrive (never with a
    // claimed length) and is freed once its message is complete.
    void Consume(absl::string_view data) {
      if (partial_.empty()) {
        size_t used = Process(data);
        if (!closed_ && used < data.size()) partial_.assign(data.data() + used, data.size() - used);
        return;
      }
      partial_.append(data.data(), data.size());
      size_t used = Process(partial_);
      if (closed_) return;
      if (used == partial_.size()) {
        std::string().swap(partial_);
      } else if (used > 0) {
        partial_.erase(0, used);
      }
    }

    // Executes the complete requests at the front of `input`; returns the bytes they took.
    size_t Process(absl::string_view input) {
      size_t begin = 0;
      wire::Request& request = server_->request_;
      while (!closed_ && begin < input.size()) {
        absl::string_view data = input.substr(begin);
        if (family_ == wire::Family::kUnknown) {
          family_ = wire::DetectFamily(data);
          if (family_ == wire::Family::kUnknown) return begin;
        }
        wire::ParseResult r = wire::ParseRequest(data, family_, server_->limits_, &request);
        if (r.status == wire::ParseStatus::kNeedMore) return begin;
        if (r.status == wire::ParseStatus::kError) {
          Close(r.error);
          return begin;
        }
        begin += r.consumed;
        // A wait of this connection that this request completes (ADD, COMPARE_SET on a key it
        // waits for) answers after the request's own reply, as torch's addHandler does: the
        // client reads its reply first and finds the STOP_WAITING after it.
        executing_ = true;
        Execute(request);
        executing_ = false;
        for (; deferred_stop_waiting_ > 0; --deferred_stop_waiting_) {
          wire::AppendU8(&out_, wire::kStopWaiting);
        }
      }
      return begin;
    }

    // Queues a STOP_WAITING (after the current request's reply when one is being executed).
    void StopWaiting() {
      if (executing_) {
        ++deferred_stop_waiting_;
        return;
      }
      wire::AppendU8(&out_, wire::kStopWaiting);
      Flush();
    }

    // torch 1.x WAIT, with torch 1.13's server semantics (TCPStoreMasterDaemon::waitHandler and
    // wakeupWaitingClients). A 1.x client has no CANCEL_WAIT: when its wait times out it just
    // sends its next request, and the server cannot tell. torch's server keeps every WAIT's
    // registrations (one per missing key, duplicates kept) and one counter per connection, which
    // each WAIT that does not complete at once overwrites with its number of missing keys; every
    // registration of a key that appears decrements it, and STOP_WAITING goes out when it reaches
    // zero exactly. So repeated get()s of a missing key after timeouts get one STOP_WAITING
    // between them when it appears, not one each, and the connection stays usable. Doing
    // anything else (closing the connection, answering every WAIT) would put different bytes on
    // the stream than the server torch 1.x clients are written against.
    void V1Wait(const std::vector<std::string>& keys) {
      Engine& engine = server_->engine_;
      if (engine.Check(keys)) {
        wire::AppendU8(&out_, wire::kStopWaiting);
        return;
      }
      int64_t missing = 0;
      for (const std::string& key : keys) {
        auto it = v1_waits_.find(key);
        if (it != v1_waits_.end()) {  // Registered, so still missing.
          ++it->second.registrations;
          ++missing;
          continue;
        }
        if (engine.Check({key})) continue;
        if (v1_waits_.size() >= server_->limits_.max_keys_per_request) {
          Close(absl::StrCat("more than ", server_->limits_.max_keys_per_request,
                             " distinct keys awaited on this connection"));
          return;
        }
        it = v1_waits_.try_emplace(key).first;
        // node_hash_map: the entry stays put until erased, so the callback may point at it (two
        // pointers still fit std::function's local storage: a wake-up allocates nothing).
        V1WaitEntry* entry = &*it;
        std::optional<Engine::WaitId> id =
            engine.Wait({key}, [this, entry] { OnV1KeyPresent(entry); });
        entry->second.id = *id;  // The key is missing: Wait registered.
        entry->second.registrations = 1;
        ++missing;
      }
      v1_keys_awaited_ = missing;
    }

    struct V1Registrations {
      Engine::WaitId id = 0;
      int64_t registrations = 0;
    };
    using V1WaitEntry = std::pair<const std::string, V1Registrations>;

    void OnV1KeyPresent(V1WaitEntry* entry) {
      if (closed_) return;
      const int64_t n = entry->second.registrations;
      v1_waits_.erase(entry->first);
      // torch decrements once per registration and answers when the counter hits zero.
      const bool answer = v1_keys_awaited_ >= 1 && v1_keys_awaited_ - n <= 0;
      v1_keys_awaited_ -= n;
      if (answer) StopWaiting();
    }

    void Execute(const wire::Request& req) {
      Engine& engine = server_->engine_;
      const bool v1 = family_ == wire::Family::kV1;
      switch (req.op) {
        case wire::Op::kValidate:
          if (req.u32 != wire::kValidationMagic) Close("bad VALIDATE magic");
          return;
        case wire::Op::kSet:
          engine.Set(req.keys[0], req.values[0]);
          return;
        case wire::Op::kCompareSet:
          wire::AppendBytes(&out_, engine.CompareSet(req.keys[0], req.values[0], req.values[1]));
          return;
        case wire::Op::kGet: {
          const std::string* value = engine.Get(req.keys[0]);
          if (value == nullptr) {
            // torch 1.13's server drops the connection; the 2.x libuv server answers empty.
            if (v1) {
              Close(absl::StrCat("GET of missing key '", req.keys[0], "'"));
            } else {
              wire::AppendBytes(&out_, "");
            }
            return;
          }
          wire::AppendBytes(&out_, *value);
          return;
        }
        case wire::Op::kAdd: {
          absl::StatusOr<int64_t> sum = engine.Add(req.keys[0], req.integer);
          if (!sum.ok()) {
            Close(sum.status().message());
            return;
          }
          wire::AppendI64(&out_, *sum);
          return;
        }
        case wire::Op::kCheck:
          wire::AppendU8(&out_, engine.Check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
          return;
        case wire::Op::kWait: {
          if (v1) {
            V1Wait(req.keys);
            return;
          }
          // 2.x clients cancel a wait that timed out (CANCEL_WAIT) before their next request.
          if (wait_id_) {
            Close("WAIT while another WAIT is pending on this connection");
            return;
          }
          // A raw pointer is safe: every path that ends a connection goes through Close(), which
          // cancels its pending wait first. The one-pointer capture also fits std::function's
          // local storage, so a wake-up allocates nothing. A SET that wakes many waiters writes
          // each STOP_WAITING right here, in the SET's own pass: a non-blocking send per socket,
          // with Asio's async write only for a socket whose buffer is full.
          std::optional<Engine::WaitId> id = engine.Wait(req.keys, [this] {
            if (closed_) return;
            wait_id_.reset();
            StopWaiting();
          });
          if (id) {
            wait_id_ = id;
          } else {
            wire::AppendU8(&out_, wire::kStopWaiting);
          }
          return;
        }
        case wire::Op::kGetNumKeys:
          wire::AppendI64(&out_, engine.NumKeys());
          return;
        case wire::Op::kWatchKey:
          // torch 1.13's Python TCPStore has no watch_key, and its C++ client opens the callback
          // connection without sending on it; no real 1.13 client sends this opcode.
          Close("WATCH_KEY is not supported");
          return;
        case wire::Op::kDeleteKey:
          wire::AppendI64(&out_, engine.Delete(req.keys[0]) ? 1 : 0);
          return;
        case wire::Op::kAppend:
          engine.Append(req.keys[0], req.values[0]);
          return;
        case wire::Op::kMultiGet:
          for (const std::string& key : req.keys) {
            const std::string* value = engine.Get(key);
            wire::AppendBytes(&out_, value ? absl::string_view(*value) : absl::string_view());
          }
          return;
        case wire::Op::kMultiSet:
          for (size_t i = 0; i < req.keys.size(); ++i) engine.Set(req.keys[i], req.values[i]);
          return;
        case wire::Op::kCancelWait:
          // A STOP_WAITING that raced ahead has already been queued; WAIT_CANCELED follows it.
          if (wait_id_) {
            engine.CancelWait(*wait_id_);
            wait_id_.reset();
          }
          wire::AppendU8(&out_, wire::kWaitCanceled);
          return;
        case wire::Op::kPing:
          wire::AppendU32(&out_, req.u32);
          return;
        case wire::Op::kQueuePush:
          engine.QueuePush(req.keys[0], req.values[0]);
          return;
        case wire::Op::kQueuePop: {
          // torch 2.13 answers the queue's length before the pop (recorded), then the item.
          wire::AppendI64(&out_, engine.QueueLen(req.keys[0]));
          std::optional<std::string> item = engine.QueuePop(req.keys[0]);
          if (item) wire::AppendBytes(&out_, *item);
          return;
        }
        case wire::Op::kQueueLen:
          wire::AppendI64(&out_, engine.QueueLen(req.keys[0]));
          return;
        case wire::Op::kBarrier: {
          // Like WAIT, one pending at a time per connection; torch 2.13's client sends
          // CANCEL_WAIT when its barrier times out.
          if (wait_id_) {
            Close("BARRIER while another WAIT is pending on this connection");
            return;
          }
          absl::StatusOr<std::optional<Engine::WaitId>> id =
              engine.Barrier(req.keys[0], req.integer, [this] {
                if (closed_) return;
                wait_id_.reset();
                StopWaiting();
              });
          if (!id.ok()) {
            Close(id.status().message());  // As torch's server, which drops the client.
          } else if (*id) {
            wait_id_ = *id;
          } else {
            wire::AppendU8(&out_, wire::kStopWaiting);
          }
          return;
        }
        case wire::Op::kListKeys: {
          std::vector<std::string> keys = engine.ListKeys();
          wire::AppendI64(&out_, static_cast<int64_t>(keys.size()));
          for (const std::string& k : keys) wire::AppendBytes(&out_, k);
          return;
        }
      }
    }

    void Flush() {
      if (closed_ || writing_ || out_.empty()) return;
      // Try the write at once: replies are small and the socket buffer is almost always free.
      boost::system::error_code ec;
      size_t n = socket_.write_some(asio::buffer(out_), ec);
      if (!ec && n == out_.size()) {
        out_.clear();
        if (out_.capacity() > kKeepReply) std::string().swap(out_);
        return;
      }
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        Close(ec.message(), spdlog::level::debug);
        return;  // The pending read sees the closed socket and unregisters the connection.
      }
      if (!ec) out_.erase(0, n);
      writing_ = true;
      in_flight_.swap(out_);
      out_.clear();
      asio::async_write(socket_, asio::buffer(in_flight_),
                        [self = shared_from_this()](boost::system::error_code ec, size_t) {
                          self->writing_ = false;
                          std::string().swap(self->in_flight_);
                          if (ec) {
                            self->Close(ec.message(), spdlog::level::debug);
                            self->server_->connections_.erase(self);
                            return;
                          }
                          self->Flush();
                        });
    }

    Impl* server_;
    Socket socket_;
    tcp::endpoint peer_;
    wire::Family family_ = wire::Family::kUnknown;
    std::string partial_;  // An incomplete request's bytes so far; empty between requests.
    std::array<char, kInlineRead> inline_read_;
    std::string out_;
    std::string in_flight_;
    bool writing_ = false;
    bool closed_ = false;
    std::optional<Engine::WaitId> wait_id_;  // 2.x.
    // 1.x: key → its engine wait and how many WAITs registered it; torch's keysAwaited_.
    absl::node_hash_map<std::string, V1Registrations> v1_waits_;
    int64_t v1_keys_awaited_ = 0;
    bool executing_ = false;
    int deferred_stop_waiting_ = 0;
    SteadyClock::time_point last_activity_;
  };

  void Accept() {
    acceptor_.async_accept(peer_, [this](boost::system::error_code ec, Socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        accept_failures_ = 0;
        if (connections_.size() >= options_.max_connections) {
          spdlog::warn("store: closing connection from {}:{}: limit of {} connections reached",
                       peer_.address().to_string(), peer_.port(), options_.max_connections);
          ++closed_by_server_;
          boost::system::error_code ignored;
          socket.close(ignored);
        } else {
          auto conn = std::make_shared<Connection>(this, std::move(socket), peer_);
          connections_.insert(conn);
          conn->Start();
        }
      } else if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                 ec == asio::error::no_memory || ec.value() == ENFILE) {
        // Out of descriptors or memory: the connection stays queued, so pause rather than spin.
        // Logged once per run of failures.
        if (accept_failures_++ == 0) {
          spdlog::warn("store: accept failed: {} ({} connections open); pausing accepts for {} ms",
                       ec.message(), connections_.size(), kAcceptPause.count());
        }
        accept_timer_.expires_after(kAcceptPause);
        accept_timer_.async_wait([this](boost::system::error_code timer_ec) {
          if (!timer_ec) Accept();
        });
        return;
      } else {
        spdlog::warn("store: accept failed: {}", ec.message());
      }
      Accept();
    });
  }

  void ScheduleIdleSweep() {
    auto timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.idle_timeout));
    auto period = std::max<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(10));
    idle_timer_.expires_after(period);
    idle_timer_.async_wait([this, timeout](boost::system::error_code ec) {
      if (ec) return;
      auto now = SteadyClock::now();
      std::vector<std::shared_ptr<Connection>> idle;
      for (const auto& c : connections_) {
        if (!c->closed() && !c->waiting() && now - c->last_activity() >= timeout) {
          idle.push_back(c);
        }
      }
      for (const auto& c : idle) {
        c->Close(absl::StrCat("idle for ", absl::FormatDuration(options_.idle_timeout),
                              " (idle timeout)"));
        connections_.erase(c);
      }
      ScheduleIdleSweep();
    });
  }

  ServerOptions options_;
  wire::Limits limits_;
  // One thread runs everything: tell Asio so it skips the reactor's per-descriptor locking.
  // Other threads only post() to it (Stop, Stats), which stays locked.
  asio::io_context io_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  Acceptor acceptor_;
  tcp::endpoint peer_;  // The peer of the accept in progress.
  uint64_t accept_failures_ = 0;
  asio::steady_timer accept_timer_;
  asio::steady_timer idle_timer_;
  std::thread thread_;
  std::atomic<uint16_t> port_{0};
  Engine engine_;
  // Shared by every connection of the loop (see kReadChunk); a request is parsed into request_
  // and executed before the next is parsed.
  std::string read_buffer_;
  wire::Request request_;
  uint64_t closed_by_server_ = 0;
  std::unordered_set<std::shared_ptr<Connection>> connections_;
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Server::~Server() = default;
absl::Status Server::Start() { return impl_->Start(); }
void Server::Stop() { impl_->Stop(); }
uint16_t Server::port() const { return impl_->port(); }
ServerStats Server::Stats() const { return impl_->Stats(); }

}  // namespace dgt::store
