#include "etcd/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace dgt::etcd {
namespace {

namespace pb = ::etcdserverpb;

absl::Status ToAbsl(const grpc::Status& s, absl::string_view context) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(context, ": ", s.error_message()));
}

// etcd's range convention: [key, range_end) with range_end = the prefix with its last byte below
// 0xff incremented (trailing 0xff bytes dropped); "\0" = every key >= key.
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

KeyValue FromPb(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

RangeResult FromPb(const pb::RangeResponse& r) {
  RangeResult out;
  out.kvs.reserve(r.kvs_size());
  for (const auto& kv : r.kvs()) out.kvs.push_back(FromPb(kv));
  out.count = r.count();
  out.more = r.more();
  out.revision = r.header().revision();
  return out;
}

void ToPb(const Op& op, pb::RequestOp* out) {
  switch (op.type) {
    case Op::Type::kGet:
    case Op::Type::kGetPrefix: {
      auto* r = out->mutable_request_range();
      r->set_key(op.key);
      if (op.type == Op::Type::kGetPrefix) r->set_range_end(PrefixEnd(op.key));
      break;
    }
    case Op::Type::kPut: {
      auto* r = out->mutable_request_put();
      r->set_key(op.key);
      r->set_value(op.value);
      r->set_lease(op.lease);
      break;
    }
    case Op::Type::kDelete:
    case Op::Type::kDeletePrefix: {
      auto* r = out->mutable_request_delete_range();
      r->set_key(op.key);
      if (op.type == Op::Type::kDeletePrefix) r->set_range_end(PrefixEnd(op.key));
      break;
    }
  }
}

void ToPb(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  switch (c.result) {
    case Compare::Result::kEqual:
      out->set_result(pb::Compare::EQUAL);
      break;
    case Compare::Result::kGreater:
      out->set_result(pb::Compare::GREATER);
      break;
    case Compare::Result::kLess:
      out->set_result(pb::Compare::LESS);
      break;
    case Compare::Result::kNotEqual:
      out->set_result(pb::Compare::NOT_EQUAL);
      break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
  }
}

absl::Status CheckKey(absl::string_view what, absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("etcd ", what, ": empty key"));
  return absl::OkStatus();
}

}  // namespace

Compare Compare::ModRevisionIs(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kModRevision;
  c.number = revision;
  return c;
}

Compare Compare::CreateRevisionIs(std::string key, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kCreateRevision;
  c.number = revision;
  return c;
}

Compare Compare::ValueIs(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.value = std::move(value);
  return c;
}

Op Op::Get(std::string key) { return Op{Type::kGet, std::move(key), "", 0}; }
Op Op::GetPrefix(std::string prefix) { return Op{Type::kGetPrefix, std::move(prefix), "", 0}; }
Op Op::Put(std::string key, std::string value, int64_t lease) {
  return Op{Type::kPut, std::move(key), std::move(value), lease};
}
Op Op::Delete(std::string key) { return Op{Type::kDelete, std::move(key), "", 0}; }
Op Op::DeletePrefix(std::string prefix) {
  return Op{Type::kDeletePrefix, std::move(prefix), "", 0};
}

// One member: its channel and the stubs of the services the client uses.
struct Member {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
};

class Client::Impl {
 public:
  explicit Impl(ClientOptions options) : options_(std::move(options)) {
    grpc::ChannelArguments args;
    // A restarted member is found again within a second, not after gRPC's default backoff (up
    // to 120 s). gRPC takes the "min reconnect backoff" as the timeout of one connection
    // attempt (TCP and HTTP/2 handshake): 5 s, so a loaded host still connects.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
    // A member that vanished without closing the connection (partition) ends its watch streams
    // after at most 10 + 5 s. etcd accepts pings every 5 s or slower (--grpc-keepalive-min-time).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    // One connection per member and client, not shared with other clients in the process.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (const std::string& address : options_.endpoints) {
      auto m = std::make_unique<Member>();
      m->address = address;
      m->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      m->kv = pb::KV::NewStub(m->channel);
      m->lease = pb::Lease::NewStub(m->channel);
      m->watch = pb::Watch::NewStub(m->channel);
      m->maintenance = pb::Maintenance::NewStub(m->channel);
      members_.push_back(std::move(m));
    }
  }

  const ClientOptions& options() const { return options_; }

  // Waits until `m`'s channel is connected, up to `deadline`; else says why in `why`. A sync gRPC
  // channel makes progress on a connection only while some call on it is polling; a call that
  // fails fast (the channel still in TRANSIENT_FAILURE from an earlier refusal) polls nothing,
  // so without this wait a member that came up is found only by gRPC's 5 s backup poller.
  static bool Connect(Member& m, absl::Time deadline, std::string* why) {
    if (m.channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return true;
    if (m.channel->WaitForConnected(absl::ToChronoTime(deadline))) return true;
    *why = "not connected in time";
    return false;
  }

  // Connect, giving up early once `*stop` is set (checked between short waits): a hedged
  // attempt that lost the race ends at once rather than after connect_timeout.
  static bool ConnectUnlessStopped(Member& m, absl::Time deadline, const std::atomic<bool>* stop,
                                   std::string* why) {
    while (!stop->load()) {
      const absl::Time step = std::min(deadline, absl::Now() + absl::Milliseconds(50));
      if (Connect(m, step, why)) return true;
      if (step >= deadline) return false;
    }
    *why = "not tried";
    return false;
  }

  int size() const { return static_cast<int>(members_.size()); }
  Member& member(int i) { return *members_[i]; }
  int current() const { return current_.load(); }

  // Runs the idempotent `attempt(member, context, response)` as Call does, but without waiting on
  // one member that holds the request: when it has not answered within `hedge` the request also
  // goes to the next member, the earlier attempts still running, and the first answer wins (the
  // others are cancelled). A member that refuses at once (UNAVAILABLE) is followed by the next at
  // once; after every `size()` refusals the call pauses for the backoff. Each attempt is bounded
  // by attempt_timeout; the call by call_timeout and `until`. `hedge` is half that budget shared
  // among the members (at most attempt_timeout), so each member is asked about twice within it.
  // Errors: as Call's.
  template <typename Response, typename Attempt>
  absl::Status Hedged(absl::string_view what, Attempt attempt, absl::Time until,
                      Response* response) {
    const absl::Time start = absl::Now();
    const absl::Time deadline = std::min(start + options_.call_timeout, until);
    const absl::Duration hedge =
        std::max(std::min(options_.attempt_timeout, (deadline - start) / (2 * size())),
                 absl::Milliseconds(1));
    struct Race {
      Mutex mu;
      CondVar cv;
      std::atomic<bool> over{false};  // A winner, or the call gave up: attempts stop.
      bool won ABSL_GUARDED_BY(mu) = false;
      int running ABSL_GUARDED_BY(mu) = 0;
      int failures ABSL_GUARDED_BY(mu) = 0;
      std::vector<std::string> errors ABSL_GUARDED_BY(mu);
      std::vector<grpc::ClientContext*> contexts ABSL_GUARDED_BY(mu);
      Response winner ABSL_GUARDED_BY(mu);
      int winner_idx ABSL_GUARDED_BY(mu) = -1;
    } race;
    {
      MutexLock lock(&race.mu);
      race.errors.resize(members_.size());
    }
    auto run_attempt = [&](int idx) {
      Member& m = *members_[idx];
      std::string why;
      grpc::Status s(grpc::StatusCode::CANCELLED, "not tried");
      Response mine;
      if (ConnectUnlessStopped(m, std::min(deadline, absl::Now() + options_.connect_timeout),
                               &race.over, &why)) {
        grpc::ClientContext context;
        context.AddMetadata("hasleader", "true");
        context.set_deadline(
            absl::ToChronoTime(std::min(deadline, absl::Now() + options_.attempt_timeout)));
        {
          MutexLock lock(&race.mu);
          race.contexts.push_back(&context);
        }
        if (!race.over.load()) s = attempt(m, &context, &mine);
        MutexLock lock(&race.mu);
        race.contexts.erase(std::find(race.contexts.begin(), race.contexts.end(), &context));
      } else if (why != "not tried") {
        s = grpc::Status(grpc::StatusCode::UNAVAILABLE, why);
      }
      MutexLock lock(&race.mu);
      --race.running;
      if (s.ok()) {
        if (!race.won) {
          race.won = true;
          race.winner = std::move(mine);
          race.winner_idx = idx;
          race.over.store(true);
        }
      } else if (!race.over.load()) {
        ++race.failures;
        race.errors[idx] = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                               ? "no answer in time"
                               : (s.error_message().empty() ? "unavailable" : s.error_message());
      } else if (race.errors[idx].empty() && s.error_message() != "not tried") {
        race.errors[idx] = "no answer in time";  // Cancelled when the call gave up.
      }
      race.cv.SignalAll();
    };
    std::vector<std::thread> threads;
    int idx = current_.load();
    absl::Duration backoff = options_.backoff;
    absl::Time next_start = start;
    {
      MutexLock lock(&race.mu);
      int seen_failures = 0;
      while (!race.won) {
        const absl::Time now = absl::Now();
        if (now >= deadline) break;
        if (race.failures > seen_failures) {
          // A refusal: the next member now, or after a full pass of refusals the backoff.
          const bool full_pass = race.failures / size() > seen_failures / size();
          seen_failures = race.failures;
          next_start = full_pass ? now + backoff : now;
          if (full_pass) backoff = std::min(backoff * 2, options_.max_backoff);
        }
        // At most two attempts per member at once, on average: members that hold requests hold
        // a bounded number of threads here.
        if (now >= next_start && race.running < 2 * size()) {
          ++race.running;
          threads.emplace_back(run_attempt, idx);
          idx = (idx + 1) % size();
          next_start = now + hedge;
          continue;
        }
        // Until the next start is due (or, with the most attempts running, one ends).
        race.cv.WaitWithDeadline(&race.mu,
                                 now >= next_start ? deadline : std::min(next_start, deadline));
      }
      race.over.store(true);
      for (grpc::ClientContext* context : race.contexts) context->TryCancel();
    }
    for (std::thread& t : threads) t.join();
    MutexLock lock(&race.mu);
    if (race.won) {
      current_.store(race.winner_idx);
      *response = std::move(race.winner);
      return absl::OkStatus();
    }
    return Unavailable(what, race.errors, deadline - start);
  }

  // Runs `attempt(member, context)` on the current member, moving on to the others as the file
  // comment says. `idempotent`: also move on when one attempt ran past its deadline. Bounded by
  // call_timeout, and by `until` when that comes first.
  template <typename Attempt>
  absl::Status Call(absl::string_view what, bool idempotent, Attempt attempt,
                    absl::Time until = absl::InfiniteFuture()) {
    const absl::Time start = absl::Now();
    const absl::Time deadline = std::min(start + options_.call_timeout, until);
    std::vector<std::string> errors(members_.size());
    absl::Duration backoff = options_.backoff;
    int idx = current_.load();
    while (true) {
      for (int tried = 0; tried < size(); ++tried, idx = (idx + 1) % size()) {
        const absl::Time now = absl::Now();
        if (now >= deadline) return Unavailable(what, errors, deadline - start);
        Member& m = *members_[idx];
        if (std::string why;
            !Connect(m, std::min(deadline, now + options_.connect_timeout), &why)) {
          errors[idx] = why;
          continue;
        }
        grpc::ClientContext context;
        // As etcd's own client: a member that knows of no leader refuses at once (UNAVAILABLE,
        // "no leader") instead of holding the request, so the call moves to another member.
        context.AddMetadata("hasleader", "true");
        context.set_deadline(
            absl::ToChronoTime(std::min(deadline, now + options_.attempt_timeout)));
        const grpc::Status s = attempt(m, &context);
        if (s.ok()) {
          current_.store(idx);
          return absl::OkStatus();
        }
        const bool timed_out = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (s.error_code() == grpc::StatusCode::UNAVAILABLE || (timed_out && idempotent)) {
          errors[idx] = s.error_message().empty() ? "unavailable" : s.error_message();
          if (timed_out) errors[idx] = "no answer in time";
          continue;
        }
        if (timed_out) {
          // The next call starts on another member: this one may hang (paused, or forwarding to
          // a leader that is).
          current_.store((idx + 1) % size());
          return absl::DeadlineExceededError(
              absl::StrCat("etcd ", what, " at ", m.address, ": no answer within ",
                           absl::FormatDuration(options_.attempt_timeout),
                           " (the write may or may not have been applied)"));
        }
        return ToAbsl(s, absl::StrCat("etcd ", what, " at ", m.address));
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return Unavailable(what, errors, deadline - start);
      absl::SleepFor(std::min(backoff, left));
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }

 private:
  absl::Status Unavailable(absl::string_view what, const std::vector<std::string>& errors,
                           absl::Duration waited) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < members_.size(); ++i) {
      parts.push_back(
          absl::StrCat(members_[i]->address, ": ", errors[i].empty() ? "not tried" : errors[i]));
    }
    return absl::UnavailableError(
        absl::StrCat("etcd ", what, ": no member answered within ",
                     absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(1))), " (",
                     absl::StrJoin(parts, "; "), ")"));
  }

  const ClientOptions options_;
  std::vector<std::unique_ptr<Member>> members_;
  // The member that answered last: calls start there.
  std::atomic<int> current_{0};
};

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd client: no endpoints given");
  }
  for (const std::string& e : options.endpoints) {
    if (e.empty() || e.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd client: endpoint must be host:port, got '", e, "'"));
    }
  }
  if (options.call_timeout <= absl::ZeroDuration() ||
      options.attempt_timeout <= absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration() || options.backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.backoff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd client: call_timeout, attempt_timeout, connect_timeout and backoff must be > 0 and "
        "max_backoff >= backoff, got ",
        absl::FormatDuration(options.call_timeout), ", ",
        absl::FormatDuration(options.attempt_timeout), ", ",
        absl::FormatDuration(options.connect_timeout), ", ", absl::FormatDuration(options.backoff),
        ", ", absl::FormatDuration(options.max_backoff)));
  }
  return std::unique_ptr<Client>(new Client(std::make_shared<Impl>(std::move(options))));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options(); }

absl::StatusOr<KeyValue> Client::Get(absl::string_view key) {
  if (auto s = CheckKey("get", key); !s.ok()) return s;
  pb::RangeRequest req;
  req.set_key(std::string(key));
  pb::RangeResponse resp;
  absl::Status s = impl_->Call("get", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Range(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (resp.kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("etcd get: no key '", key, "'"));
  }
  return FromPb(resp.kvs(0));
}

absl::StatusOr<RangeResult> Client::GetPrefix(absl::string_view prefix, int64_t limit) {
  if (auto s = CheckKey("get prefix", prefix); !s.ok()) return s;
  pb::RangeRequest req;
  req.set_key(std::string(prefix));
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(limit);
  pb::RangeResponse resp;
  absl::Status s = impl_->Call("get prefix", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Range(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return FromPb(resp);
}

absl::StatusOr<int64_t> Client::Put(absl::string_view key, absl::string_view value, int64_t lease) {
  if (auto s = CheckKey("put", key); !s.ok()) return s;
  pb::PutRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  req.set_lease(lease);
  pb::PutResponse resp;
  absl::Status s = impl_->Call("put", false, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Put(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.header().revision();
}

namespace {
absl::StatusOr<int64_t> DeleteRange(Client::Impl* impl, absl::string_view what,
                                    absl::string_view key, bool prefix) {
  if (auto s = CheckKey(what, key); !s.ok()) return s;
  pb::DeleteRangeRequest req;
  req.set_key(std::string(key));
  if (prefix) req.set_range_end(PrefixEnd(key));
  pb::DeleteRangeResponse resp;
  absl::Status s = impl->Call(what, false, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->DeleteRange(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.deleted();
}
}  // namespace

absl::StatusOr<int64_t> Client::Delete(absl::string_view key) {
  return DeleteRange(impl_.get(), "delete", key, false);
}

absl::StatusOr<int64_t> Client::DeletePrefix(absl::string_view prefix) {
  return DeleteRange(impl_.get(), "delete prefix", prefix, true);
}

absl::StatusOr<TxnResult> Client::Txn(const std::vector<Compare>& compares,
                                      const std::vector<Op>& then,
                                      const std::vector<Op>& otherwise) {
  pb::TxnRequest req;
  for (const Compare& c : compares) {
    if (auto s = CheckKey("txn compare", c.key); !s.ok()) return s;
    ToPb(c, req.add_compare());
  }
  for (const Op& op : then) {
    if (auto s = CheckKey("txn op", op.key); !s.ok()) return s;
    ToPb(op, req.add_success());
  }
  for (const Op& op : otherwise) {
    if (auto s = CheckKey("txn op", op.key); !s.ok()) return s;
    ToPb(op, req.add_failure());
  }
  pb::TxnResponse resp;
  absl::Status s = impl_->Call("txn", false, [&](Member& m, grpc::ClientContext* ctx) {
    return m.kv->Txn(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  TxnResult out;
  out.succeeded = resp.succeeded();
  out.revision = resp.header().revision();
  for (const pb::ResponseOp& r : resp.responses()) {
    RangeResult rr;
    if (r.has_response_range()) {
      rr = FromPb(r.response_range());
    } else if (r.has_response_delete_range()) {
      rr.count = r.response_delete_range().deleted();
      rr.revision = r.response_delete_range().header().revision();
    }
    out.results.push_back(std::move(rr));
  }
  return out;
}

absl::StatusOr<Lease> Client::LeaseGrant(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd lease grant: ttl must be > 0 seconds, got ", ttl_seconds));
  }
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  pb::LeaseGrantResponse resp;
  absl::Status s = impl_->Call("lease grant", false, [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseGrant(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (!resp.error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("etcd lease grant: ", resp.error()));
  }
  return Lease{resp.id(), resp.ttl()};
}

absl::StatusOr<int64_t> Client::LeaseKeepAliveOnce(int64_t lease_id) {
  return LeaseKeepAliveOnce(lease_id, absl::InfiniteFuture());
}

absl::StatusOr<int64_t> Client::LeaseKeepAliveOnce(int64_t lease_id, absl::Time until) {
  pb::LeaseKeepAliveRequest req;
  req.set_id(lease_id);
  pb::LeaseKeepAliveResponse resp;
  // Hedged: a member that holds the renewal (a paused leader, or a follower forwarding it to
  // one) must not spend the lease's whole TTL.
  absl::Status s = impl_->Hedged(
      "lease keepalive",
      [&req](Member& m, grpc::ClientContext* ctx, pb::LeaseKeepAliveResponse* out) {
        auto stream = m.lease->LeaseKeepAlive(ctx);
        const bool ok = stream->Write(req) && stream->Read(out);
        ctx->TryCancel();
        grpc::Status status = stream->Finish();
        if (ok) return grpc::Status::OK;
        if (status.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream closed");
        return status;
      },
      until, &resp);
  if (!s.ok()) return s;
  if (resp.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat("etcd lease keepalive: lease ", lease_id, " expired or was revoked"));
  }
  return resp.ttl();
}

absl::StatusOr<int64_t> Client::LeaseTimeToLive(int64_t lease_id) {
  pb::LeaseTimeToLiveRequest req;
  req.set_id(lease_id);
  pb::LeaseTimeToLiveResponse resp;
  absl::Status s = impl_->Call("lease ttl", true, [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseTimeToLive(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (resp.ttl() < 0) {
    return absl::NotFoundError(
        absl::StrCat("etcd lease ttl: lease ", lease_id, " expired or was revoked"));
  }
  return resp.ttl();
}

absl::Status Client::LeaseRevoke(int64_t lease_id) {
  pb::LeaseRevokeRequest req;
  req.set_id(lease_id);
  pb::LeaseRevokeResponse resp;
  return impl_->Call("lease revoke", false, [&](Member& m, grpc::ClientContext* ctx) {
    return m.lease->LeaseRevoke(ctx, req, &resp);
  });
}

absl::StatusOr<MemberStatus> Client::GetMemberStatus(absl::string_view endpoint) {
  for (int i = 0; i < impl_->size(); ++i) {
    Member& m = impl_->member(i);
    if (m.address != endpoint) continue;
    const absl::Time deadline = absl::Now() + impl_->options().attempt_timeout;
    if (std::string why; !Impl::Connect(m, deadline, &why)) {
      return absl::UnavailableError(absl::StrCat("etcd member status at ", endpoint, ": ", why));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    pb::StatusResponse resp;
    grpc::Status s = m.maintenance->Status(&ctx, pb::StatusRequest(), &resp);
    if (!s.ok()) return ToAbsl(s, absl::StrCat("etcd member status at ", endpoint));
    return MemberStatus{resp.header().member_id(), resp.leader(), resp.raftterm(),
                        resp.header().revision(), resp.version()};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("etcd member status: '", endpoint, "' is not one of the client's endpoints"));
}

// The keeper's thread: a renewal every ttl/3 until stopped or the lease is lost.
class LeaseKeeper::Impl {
 public:
  Impl(std::unique_ptr<Client> client, int64_t lease_id, int64_t ttl_seconds,
       std::function<void(const absl::Status&)> on_lost)
      : client_(std::move(client)),
        lease_id_(lease_id),
        ttl_(absl::Seconds(ttl_seconds)),
        on_lost_(std::move(on_lost)) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

  absl::Status status() const {
    MutexLock lock(&mu_);
    return status_;
  }
  int64_t renewals() const { return renewals_.load(); }

 private:
  void Run() {
    absl::Time renewed = absl::Now();
    while (true) {
      {
        MutexLock lock(&mu_);
        const absl::Time next = std::min(renewed + ttl_ / 3, absl::Now() + ttl_ / 3);
        while (!stopping_ && !cv_.WaitWithDeadline(&mu_, next)) {
        }
        if (stopping_) return;
      }
      // Not past the TTL since the last renewal: a member that holds the request (partitioned,
      // or dead without a reset) must not delay the loss by the whole call_timeout.
      absl::StatusOr<int64_t> ttl = client_->LeaseKeepAliveOnce(lease_id_, renewed + ttl_);
      if (ttl.ok()) {
        renewed = absl::Now();
        renewals_.fetch_add(1);
        continue;
      }
      absl::Status lost;
      if (ttl.status().code() == absl::StatusCode::kNotFound) {
        lost = ttl.status();
      } else if (absl::Now() - renewed >= ttl_) {
        lost = absl::DeadlineExceededError(absl::StrCat(
            "etcd lease ", lease_id_, " not renewed within its ttl of ", absl::FormatDuration(ttl_),
            " (last error: ", ttl.status().ToString(), ")"));
      } else {
        continue;  // Retried until the TTL since the last renewal has passed.
      }
      {
        MutexLock lock(&mu_);
        status_ = lost;
      }
      if (on_lost_) on_lost_(lost);
      return;
    }
  }

  const std::unique_ptr<Client> client_;  // Shares the channels of the client that made it.
  const int64_t lease_id_;
  const absl::Duration ttl_;
  const std::function<void(const absl::Status&)> on_lost_;
  std::atomic<int64_t> renewals_{0};
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<LeaseKeeper>> Client::KeepAlive(
    int64_t lease_id, int64_t ttl_seconds, std::function<void(const absl::Status&)> on_lost) {
  if (ttl_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd lease keepalive: ttl must be > 0 seconds, got ", ttl_seconds));
  }
  auto impl = std::make_unique<LeaseKeeper::Impl>(std::unique_ptr<Client>(new Client(impl_)),
                                                  lease_id, ttl_seconds, std::move(on_lost));
  impl->Start();
  return std::unique_ptr<LeaseKeeper>(new LeaseKeeper(std::move(impl)));
}

LeaseKeeper::LeaseKeeper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LeaseKeeper::~LeaseKeeper() { impl_->Stop(); }
absl::Status LeaseKeeper::status() const { return impl_->status(); }
int64_t LeaseKeeper::renewals() const { return impl_->renewals(); }

// The watch's thread: one stream at a time, reconnecting to the next member when one ends.
class Watcher::Impl {
 public:
  Impl(std::shared_ptr<Client::Impl> client, std::string key, bool prefix, int64_t start_revision,
       std::function<void(const std::vector<Event>&)> on_events,
       std::function<void(const absl::Status&)> on_error)
      : client_(std::move(client)),
        key_(std::move(key)),
        range_end_(prefix ? PrefixEnd(key_) : ""),
        on_events_(std::move(on_events)),
        on_error_(std::move(on_error)),
        next_revision_(start_revision) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
      cv_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

  int64_t next_revision() const { return next_revision_.load(); }
  int streams_opened() const { return streams_opened_.load(); }

 private:
  void Run() {
    int idx = client_->current();
    absl::Duration backoff = client_->options().backoff;
    while (true) {
      grpc::ClientContext ctx;
      // A member that loses the leader cancels the watch (etcd's WithRequireLeader), so a
      // partitioned member does not keep the watch silently.
      ctx.AddMetadata("hasleader", "true");
      {
        MutexLock lock(&mu_);
        if (stopping_) return;
        context_ = &ctx;
      }
      std::string why;
      const bool healthy =
          Client::Impl::Connect(client_->member(idx),
                                absl::Now() + client_->options().connect_timeout, &why) &&
          RunStream(client_->member(idx), &ctx);
      {
        MutexLock lock(&mu_);
        context_ = nullptr;
        if (stopping_ || terminal_) return;
        if (healthy) backoff = client_->options().backoff;
        cv_.WaitWithDeadline(&mu_, absl::Now() + backoff);
        if (stopping_) return;
      }
      if (!healthy) backoff = std::min(backoff * 2, client_->options().max_backoff);
      idx = (idx + 1) % client_->size();
    }
  }

  // Runs one stream to its end; returns whether it was created (the member took the watch).
  bool RunStream(Member& member, grpc::ClientContext* ctx) {
    streams_opened_.fetch_add(1);
    auto stream = member.watch->Watch(ctx);
    pb::WatchRequest req;
    auto* create = req.mutable_create_request();
    create->set_key(key_);
    create->set_range_end(range_end_);
    create->set_start_revision(next_revision_.load());
    bool created = false;
    if (stream->Write(req)) {
      pb::WatchResponse resp;
      while (stream->Read(&resp)) {
        if (resp.compact_revision() > 0) {
          Fail(absl::OutOfRangeError(
              absl::StrCat("etcd watch of '", key_, "': revision ", next_revision_.load(),
                           " was compacted (oldest kept: ", resp.compact_revision(), ")")));
          break;
        }
        if (resp.canceled()) break;  // e.g. the member lost its leader: reconnect.
        if (resp.created()) {
          created = true;
          // Watching "from now": pin now, so a reconnection misses nothing before it.
          if (next_revision_.load() == 0) next_revision_.store(resp.header().revision() + 1);
        }
        if (resp.events_size() == 0) continue;
        std::vector<Event> events;
        events.reserve(resp.events_size());
        for (const mvccpb::Event& e : resp.events()) {
          Event ev;
          ev.type = e.type() == mvccpb::Event::DELETE ? Event::Type::kDelete : Event::Type::kPut;
          ev.kv = FromPb(e.kv());
          events.push_back(std::move(ev));
        }
        next_revision_.store(events.back().kv.mod_revision + 1);
        if (on_events_) on_events_(events);
      }
    }
    ctx->TryCancel();  // The stream may still be open (a cancel or a compaction ended it).
    stream->Finish();
    return created;
  }

  void Fail(const absl::Status& status) {
    {
      MutexLock lock(&mu_);
      terminal_ = true;
    }
    if (on_error_) on_error_(status);
  }

  const std::shared_ptr<Client::Impl> client_;
  const std::string key_;
  const std::string range_end_;
  const std::function<void(const std::vector<Event>&)> on_events_;
  const std::function<void(const absl::Status&)> on_error_;
  std::atomic<int64_t> next_revision_;
  std::atomic<int> streams_opened_{0};
  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool terminal_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<Watcher>> Client::Watch(
    std::string key, bool prefix, int64_t start_revision,
    std::function<void(const std::vector<Event>&)> on_events,
    std::function<void(const absl::Status&)> on_error) {
  if (auto s = CheckKey("watch", key); !s.ok()) return s;
  if (start_revision < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd watch: start revision must be >= 0, got ", start_revision));
  }
  auto impl = std::make_unique<Watcher::Impl>(impl_, std::move(key), prefix, start_revision,
                                              std::move(on_events), std::move(on_error));
  impl->Start();
  return std::unique_ptr<Watcher>(new Watcher(std::move(impl)));
}

Watcher::Watcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Watcher::~Watcher() { impl_->Stop(); }
int64_t Watcher::next_revision() const { return impl_->next_revision(); }
int Watcher::streams_opened() const { return impl_->streams_opened(); }

}  // namespace dgt::etcd
