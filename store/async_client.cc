#include "dgt/store/async_client.h"

#include <algorithm>
#include <array>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "boost/asio.hpp"
#include "store/wire.h"

namespace dgt::store {
namespace {

namespace asio = boost::asio;
using wire::Op;

// The PING nonce of the kV2 opening (as store::Client's).
constexpr uint32_t kOpeningNonce = 0x64677421;

absl::Time DeadlineAfter(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

}  // namespace

class AsyncClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  using Done = std::function<void(absl::StatusOr<wire::Reply>)>;

  // One request: queued, then being written, then (when it has a reply) awaiting it.
  struct Pending {
    const char* name = "";  // "GET": names it in errors.
    std::string frame;      // Empty for Flush.
    bool has_reply = false;
    wire::ReplyShape shape = wire::ReplyShape::kU8;
    bool is_wait = false;
    absl::Duration timeout;
    absl::Time deadline;
    Done done;
  };

  Impl(asio::any_io_executor executor, AsyncClientOptions options)
      : executor_(std::move(executor)),
        options_(std::move(options)),
        endpoint_(absl::StrCat(options_.host, ":", options_.port)),
        family_(options_.protocol == Protocol::kV2 ? wire::Family::kV2 : wire::Family::kV1),
        socket_(executor_),
        resolver_(executor_),
        retry_timer_(executor_),
        deadline_timer_(executor_) {
    limits_.max_value_bytes = options_.max_value_bytes;
  }

  const std::string& endpoint() const { return endpoint_; }
  const AsyncClientOptions& options() const { return options_; }
  absl::Status status() const { return closed_ ? Cancelled() : broken_; }
  bool v2() const { return family_ == wire::Family::kV2; }

  void Connect(absl::Duration timeout, StatusCallback done) {
    if (closed_ || connect_called_) {
      asio::post(executor_, [done = std::move(done), e = endpoint_] {
        done(absl::FailedPreconditionError(
            absl::StrCat("store ", e, ": Connect() after Close() or twice")));
      });
      return;
    }
    connect_called_ = true;
    connecting_ = true;
    connect_deadline_ = DeadlineAfter(timeout);
    connect_done_ = std::move(done);
    ArmTimer();
    TryConnect();
  }

  // Queues `p` (its frame already encoded).
  void Issue(Pending p) {
    p.deadline = DeadlineAfter(p.timeout);
    if (closed_ || !broken_.ok()) {
      absl::Status s = closed_ ? Cancelled() : broken_;
      asio::post(executor_, [done = std::move(p.done), s] { done(s); });
      return;
    }
    queue_.push_back(std::move(p));
    ArmTimer();
    if (connected_) WriteNext();
  }

  Pending Frame(const char* name, const wire::Request& request, absl::Duration timeout, Done done) {
    Pending p;
    p.name = name;
    wire::AppendRequest(&p.frame, family_, request);
    p.has_reply = wire::ReplyShapeOf(request.op, &p.shape);
    p.is_wait = request.op == Op::kWait;
    p.timeout = timeout;
    p.done = std::move(done);
    return p;
  }

  // Completes `done` with `s` on the executor (never inside the issuing call).
  void Post(const StatusCallback& done, absl::Status s) {
    asio::post(executor_, [done, s = std::move(s)] { done(s); });
  }

  void Close() {
    if (closed_) return;
    auto self = shared_from_this();
    closed_ = true;
    Shutdown();
    FailAll(Cancelled(), Cancelled(), false);
  }

 private:
  absl::Status Cancelled() const {
    return absl::CancelledError(absl::StrCat("store ", endpoint_, ": the client was closed"));
  }

  void TryConnect() {
    auto self = shared_from_this();
    resolver_.async_resolve(
        options_.host, absl::StrCat(options_.port),
        [self](boost::system::error_code ec, const asio::ip::tcp::resolver::results_type& found) {
          if (self->closed_ || !self->connecting_) return;
          if (ec) {
            self->AttemptFailed(ec.message());
            return;
          }
          asio::async_connect(self->socket_, found,
                              [self](boost::system::error_code e, const asio::ip::tcp::endpoint&) {
                                if (self->closed_ || !self->connecting_) return;
                                if (e) {
                                  self->AttemptFailed(e.message());
                                  return;
                                }
                                self->Connected();
                              });
        });
  }

  void AttemptFailed(const std::string& why) {
    last_error_ = why;
    boost::system::error_code ignored;
    socket_.close(ignored);
    const absl::Duration left = connect_deadline_ - absl::Now();
    if (left <= absl::ZeroDuration()) {
      FailConnect();
      return;
    }
    // The deadline timer ends the attempts; this one only paces them.
    retry_timer_.expires_after(absl::ToChronoNanoseconds(std::min(options_.retry_interval, left)));
    auto self = shared_from_this();
    retry_timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec && !self->closed_ && self->connecting_) self->TryConnect();
    });
  }

  void FailConnect() {
    connecting_ = false;
    Break(absl::DeadlineExceededError(
        absl::StrCat("cannot reach the store at ", endpoint_, ": ",
                     last_error_.empty() ? "no connection was made in time" : last_error_)));
  }

  void Connected() {
    boost::system::error_code ignored;
    socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    connected_ = true;
    last_error_ =
        "connected, but the torch 2.x VALIDATE/PING opening was not answered (a torch "
        "1.x store?)";
    StartRead();
    if (!v2()) {
      FinishConnect(absl::OkStatus());
      WriteNext();
      return;
    }
    // torch 2.x's opening: VALIDATE (no reply), then a PING whose echo proves a 2.x store.
    Pending opening;
    opening.name = "VALIDATE/PING opening";
    wire::Request validate;
    validate.op = Op::kValidate;
    validate.u32 = wire::kValidationMagic;
    wire::AppendRequest(&opening.frame, family_, validate);
    wire::Request ping;
    ping.op = Op::kPing;
    ping.u32 = kOpeningNonce;
    wire::AppendRequest(&opening.frame, family_, ping);
    opening.has_reply = true;
    opening.shape = wire::ReplyShape::kU32;
    opening.deadline = connect_deadline_;
    opening.timeout = connect_deadline_ - absl::Now();
    opening.done = [this](absl::StatusOr<wire::Reply> r) {
      if (!r.ok()) return;  // Break() reported it through connect_done_.
      if (r->u32 != kOpeningNonce) {
        Break(absl::UnavailableError(absl::StrCat("store ", endpoint_,
                                                  ": the torch 2.x opening was answered with ",
                                                  r->u32, ", not the PING nonce")));
        return;
      }
      FinishConnect(absl::OkStatus());
    };
    queue_.push_front(std::move(opening));
    WriteNext();
  }

  void FinishConnect(absl::Status s) {
    connecting_ = false;
    auto done = std::move(connect_done_);
    connect_done_ = nullptr;
    ArmTimer();
    if (done) done(std::move(s));
  }

  // Writes the queued requests that may go now, in one write.
  void WriteNext() {
    if (writing_now_ || closed_ || !broken_.ok() || !connected_) return;
    bool hold = waits_unanswered_ > 0;
    auto batch = std::make_shared<std::string>();
    while (!queue_.empty()) {
      Pending& p = queue_.front();
      if (hold && p.has_reply) break;  // Its answer could not be told from the WAIT's.
      hold = hold || p.is_wait;
      batch->append(p.frame);
      writing_.push_back(std::move(p));
      queue_.pop_front();
    }
    if (writing_.empty()) return;
    writing_now_ = true;
    auto self = shared_from_this();
    asio::async_write(
        socket_, asio::buffer(*batch), [self, batch](boost::system::error_code ec, size_t) {
          if (self->closed_ || !self->broken_.ok()) return;
          self->writing_now_ = false;
          if (ec) {
            self->Break(absl::UnavailableError(
                absl::StrCat("store ", self->endpoint_, ": write failed: ", ec.message())));
            return;
          }
          self->Written();
        });
  }

  void Written() {
    std::vector<Pending> done;
    while (!writing_.empty()) {
      Pending p = std::move(writing_.front());
      writing_.pop_front();
      if (p.has_reply) {
        if (p.is_wait) ++waits_unanswered_;
        awaiting_.push_back(std::move(p));
      } else {
        done.push_back(std::move(p));
      }
    }
    // Written: each completes, whatever its callback then does to this client.
    for (Pending& p : done) {
      if (p.done) p.done(wire::Reply{});
    }
    if (closed_ || !broken_.ok()) return;
    ArmTimer();
    WriteNext();
  }

  void StartRead() {
    auto self = shared_from_this();
    socket_.async_read_some(
        asio::buffer(read_buffer_), [self](boost::system::error_code ec, size_t n) {
          if (self->closed_ || !self->broken_.ok()) return;
          if (ec) {
            self->Break(absl::UnavailableError(
                absl::StrCat("store ", self->endpoint_, ": connection lost: ", ec.message())));
            return;
          }
          self->input_.append(self->read_buffer_.data(), n);
          self->ParseReplies();
          if (!self->closed_ && self->broken_.ok()) self->StartRead();
        });
  }

  void ParseReplies() {
    while (!awaiting_.empty() && !input_.empty()) {
      wire::Reply reply;
      wire::ParseResult r = wire::ParseReply(input_, awaiting_.front().shape, limits_, &reply);
      if (r.status == wire::ParseStatus::kNeedMore) return;
      if (r.status == wire::ParseStatus::kError) {
        Break(absl::DataLossError(absl::StrCat("store ", endpoint_, ": bad reply to ",
                                               awaiting_.front().name, ": ", r.error)));
        return;
      }
      input_.erase(0, r.consumed);
      Pending p = std::move(awaiting_.front());
      awaiting_.pop_front();
      if (p.is_wait) --waits_unanswered_;
      p.done(std::move(reply));
      if (closed_ || !broken_.ok()) return;
    }
    if (awaiting_.empty() && !input_.empty()) {
      Break(absl::DataLossError(absl::StrCat("store ", endpoint_, ": ", input_.size(),
                                             " bytes arrived that answer no request")));
      return;
    }
    ArmTimer();
    WriteNext();  // A WAIT answered may release held requests.
  }

  // Re-arms the deadline timer for the earliest deadline pending.
  void ArmTimer() {
    absl::Time earliest = connecting_ ? connect_deadline_ : absl::InfiniteFuture();
    for (const auto* q : {&queue_, &writing_, &awaiting_}) {
      for (const Pending& p : *q) earliest = std::min(earliest, p.deadline);
    }
    if (earliest == armed_for_) return;
    armed_for_ = earliest;
    if (earliest == absl::InfiniteFuture()) {
      deadline_timer_.cancel();
      return;
    }
    // Clamped: a far deadline must not overflow the steady clock; the timer is re-armed anyway.
    deadline_timer_.expires_after(absl::ToChronoNanoseconds(
        std::clamp(earliest - absl::Now(), absl::ZeroDuration(), absl::Hours(24))));
    auto self = shared_from_this();
    deadline_timer_.async_wait([self](boost::system::error_code ec) {
      if (ec || self->closed_ || !self->broken_.ok()) return;
      self->armed_for_ = absl::InfiniteFuture();
      self->OnDeadline();
    });
  }

  void OnDeadline() {
    const absl::Time now = absl::Now();
    if (connecting_ && connect_deadline_ <= now) {
      FailConnect();
      return;
    }
    for (const auto* q : {&awaiting_, &writing_, &queue_}) {
      for (const Pending& p : *q) {
        if (p.deadline <= now) {
          // Its reply may still come: the stream can no longer be read in step.
          Break(absl::UnavailableError(
              absl::StrCat("store ", endpoint_, ": the connection was dropped after ", p.name,
                           " timed out (", absl::FormatDuration(p.timeout), ")")));
          return;
        }
      }
    }
    ArmTimer();
  }

  void Shutdown() {
    boost::system::error_code ignored;
    retry_timer_.cancel();
    deadline_timer_.cancel();
    resolver_.cancel();
    socket_.close(ignored);
    connected_ = false;
  }

  // The connection failed (`why`): it is closed, and everything pending completes: Connect()'s
  // callback with `why`, operations past their deadline with DeadlineExceeded (once connected),
  // the others with
  // `why` when it is DataLoss (a bad reply), else Unavailable. Later ones get Unavailable.
  void Break(const absl::Status& why) {
    auto self = shared_from_this();
    broken_ = absl::UnavailableError(why.message());
    const bool was_connected = connected_;
    Shutdown();
    FailAll(why, why.code() == absl::StatusCode::kDataLoss ? why : broken_, was_connected);
  }

  // `deadlines`: operations past their deadline get DeadlineExceeded (not when the connection was
  // never made: they were never sent, and the connection's error says why).
  void FailAll(const absl::Status& for_connect, const absl::Status& for_ops, bool deadlines) {
    connecting_ = false;
    std::vector<Pending> all;
    for (auto* q : {&awaiting_, &writing_, &queue_}) {
      for (Pending& p : *q) all.push_back(std::move(p));
      q->clear();
    }
    waits_unanswered_ = 0;
    auto connect_done = std::move(connect_done_);
    connect_done_ = nullptr;
    if (connect_done) connect_done(for_connect);
    const absl::Time now = absl::Now();
    for (Pending& p : all) {
      if (!p.done) continue;
      if (deadlines && p.deadline <= now) {
        p.done(
            absl::DeadlineExceededError(absl::StrCat("store ", endpoint_, ": no reply to ", p.name,
                                                     " within ", absl::FormatDuration(p.timeout))));
      } else {
        p.done(for_ops);
      }
    }
  }

  asio::any_io_executor executor_;
  const AsyncClientOptions options_;
  const std::string endpoint_;
  const wire::Family family_;
  wire::Limits limits_;
  asio::ip::tcp::socket socket_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer retry_timer_;
  asio::steady_timer deadline_timer_;
  absl::Time armed_for_ = absl::InfiniteFuture();

  bool connect_called_ = false;
  bool connecting_ = false;
  bool connected_ = false;
  bool closed_ = false;
  absl::Status broken_;  // Not Ok once the connection failed.
  absl::Time connect_deadline_;
  StatusCallback connect_done_;
  std::string last_error_;

  std::deque<Pending> queue_;     // Not written yet.
  std::deque<Pending> writing_;   // In the write under way.
  std::deque<Pending> awaiting_;  // Written, reply not read yet.
  int waits_unanswered_ = 0;
  bool writing_now_ = false;
  std::array<char, 4096> read_buffer_{};
  std::string input_;  // Received, not parsed yet.
};

namespace {

AsyncClient::StatusCallback OrIgnore(AsyncClient::StatusCallback done) {
  if (done) return done;
  return [](const absl::Status&) {};
}

}  // namespace

AsyncClient::AsyncClient(boost::asio::any_io_executor executor, AsyncClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

AsyncClient::~AsyncClient() { impl_->Close(); }

void AsyncClient::Connect(absl::Duration timeout, StatusCallback done) {
  impl_->Connect(timeout, std::move(done));
}

void AsyncClient::Set(const std::string& key, const std::string& value, absl::Duration timeout,
                      StatusCallback done) {
  wire::Request r;
  r.op = Op::kSet;
  r.keys = {impl_->options().key_prefix + key};
  r.values = {value};
  impl_->Issue(
      impl_->Frame("SET", r, timeout,
                   [done = OrIgnore(std::move(done))](const absl::StatusOr<wire::Reply>& reply) {
                     done(reply.status());
                   }));
}

void AsyncClient::Append(const std::string& key, const std::string& value, absl::Duration timeout,
                         StatusCallback done) {
  done = OrIgnore(std::move(done));
  if (!impl_->v2()) {
    impl_->Post(done, absl::UnimplementedError(absl::StrCat(
                          "store ", impl_->endpoint(), ": APPEND needs the torch 2.x protocol")));
    return;
  }
  wire::Request r;
  r.op = Op::kAppend;
  r.keys = {impl_->options().key_prefix + key};
  r.values = {value};
  impl_->Issue(impl_->Frame("APPEND", r, timeout, [done](const absl::StatusOr<wire::Reply>& reply) {
    done(reply.status());
  }));
}

void AsyncClient::Get(const std::string& key, absl::Duration timeout, ValueCallback done) {
  wire::Request r;
  r.op = Op::kGet;
  r.keys = {impl_->options().key_prefix + key};
  impl_->Issue(
      impl_->Frame("GET", r, timeout, [done = std::move(done)](absl::StatusOr<wire::Reply> reply) {
        if (!reply.ok()) return done(reply.status());
        done(std::move(reply->bytes));
      }));
}

void AsyncClient::Add(const std::string& key, int64_t delta, absl::Duration timeout,
                      IntCallback done) {
  wire::Request r;
  r.op = Op::kAdd;
  r.keys = {impl_->options().key_prefix + key};
  r.integer = delta;
  impl_->Issue(impl_->Frame("ADD", r, timeout,
                            [done = std::move(done)](const absl::StatusOr<wire::Reply>& reply) {
                              if (!reply.ok()) return done(reply.status());
                              done(reply->integer);
                            }));
}

void AsyncClient::CompareSet(const std::string& key, const std::string& expected,
                             const std::string& desired, absl::Duration timeout,
                             ValueCallback done) {
  wire::Request r;
  r.op = Op::kCompareSet;
  r.keys = {impl_->options().key_prefix + key};
  r.values = {expected, desired};
  impl_->Issue(impl_->Frame("COMPARE_SET", r, timeout,
                            [done = std::move(done)](absl::StatusOr<wire::Reply> reply) {
                              if (!reply.ok()) return done(reply.status());
                              done(std::move(reply->bytes));
                            }));
}

void AsyncClient::Check(const std::vector<std::string>& keys, absl::Duration timeout,
                        BoolCallback done) {
  wire::Request r;
  r.op = Op::kCheck;
  for (const std::string& k : keys) r.keys.push_back(impl_->options().key_prefix + k);
  impl_->Issue(impl_->Frame("CHECK", r, timeout,
                            [done = std::move(done)](const absl::StatusOr<wire::Reply>& reply) {
                              if (!reply.ok()) return done(reply.status());
                              done(reply->u8 == wire::kCheckReady);
                            }));
}

void AsyncClient::Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                       StatusCallback done) {
  wire::Request r;
  r.op = Op::kWait;
  for (const std::string& k : keys) r.keys.push_back(impl_->options().key_prefix + k);
  impl_->Issue(impl_->Frame(
      "WAIT", r, timeout,
      [done = std::move(done), e = impl_->endpoint()](const absl::StatusOr<wire::Reply>& reply) {
        if (!reply.ok()) return done(reply.status());
        if (reply->u8 != wire::kStopWaiting) {
          return done(absl::DataLossError(
              absl::StrCat("store ", e, ": WAIT answered ", reply->u8, ", not STOP_WAITING")));
        }
        done(absl::OkStatus());
      }));
}

void AsyncClient::DeleteKey(const std::string& key, absl::Duration timeout, BoolCallback done) {
  wire::Request r;
  r.op = Op::kDeleteKey;
  r.keys = {impl_->options().key_prefix + key};
  impl_->Issue(impl_->Frame("DELETE_KEY", r, timeout,
                            [done = std::move(done)](const absl::StatusOr<wire::Reply>& reply) {
                              if (!reply.ok()) return done(reply.status());
                              done(reply->integer != 0);
                            }));
}

void AsyncClient::Flush(absl::Duration timeout, StatusCallback done) {
  Impl::Pending p;
  p.name = "flush";
  p.timeout = timeout;
  p.done = [done = OrIgnore(std::move(done))](const absl::StatusOr<wire::Reply>& reply) {
    done(reply.status());
  };
  impl_->Issue(std::move(p));
}

void AsyncClient::Close() { impl_->Close(); }

const std::string& AsyncClient::endpoint() const { return impl_->endpoint(); }

absl::Status AsyncClient::status() const { return impl_->status(); }

}  // namespace dgt::store
