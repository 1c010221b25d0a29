#include "agent/coord/failure_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/store_keys.h"

namespace dgt::agent {

void PublishRankFailureAsync(store::AsyncClient& client, const std::string& prefix,
                             const std::string& group, int rank, const std::string& reason,
                             absl::Duration timeout,
                             std::function<void(absl::StatusOr<int>)> done) {
  using Done = std::function<void(absl::StatusOr<int>)>;
  store::AsyncClient* c = &client;
  const std::string member = keys::RecoveryMemberKey(group, rank);
  const std::string generation = keys::RecoveryGenerationKey(group);
  // Opens the generation after `from` (as recovery_keys.cc Advance), then records the rank.
  auto advance = [c, prefix, group, rank, reason, timeout, generation](int from, Done done) {
    // The counter must exist ("0") for the COMPARE_SET below to compare.
    c->CompareSet(prefix + generation, "", "0", timeout, [](const absl::StatusOr<std::string>&) {});
    c->CompareSet(
        prefix + generation, absl::StrCat(from), absl::StrCat(from + 1), timeout,
        [c, prefix, group, rank, reason, timeout, generation, from,
         done = std::move(done)](const absl::StatusOr<std::string>& current) {
          if (!current.ok()) return done(current.status());
          int now = 0;
          if (!absl::SimpleAtoi(*current, &now)) {
            return done(absl::InternalError(absl::StrCat("store key ", generation, " holds '",
                                                         *current, "', not a generation number")));
          }
          const int target = std::max(now, from + 1);
          // The failed list first, so a survivor that sees the opening finds the report with it.
          c->Append(prefix + keys::RecoveryFailedKey(group, target), absl::StrCat(rank, ","),
                    timeout);
          c->Set(prefix + keys::RecoveryOpenKey(group, target), reason, timeout,
                 [target, done](const absl::Status& s) {
                   if (!s.ok()) return done(s);
                   done(target);
                 });
        });
  };
  c->Check({prefix + member}, timeout,
           [c, prefix, member, timeout, advance,
            done = std::move(done)](const absl::StatusOr<bool>& known) mutable {
             if (!known.ok()) return done(known.status());
             if (!*known) return advance(0, std::move(done));
             c->Get(prefix + member, timeout,
                    [member, advance, done](const absl::StatusOr<std::string>& v) {
                      if (!v.ok()) return done(v.status());
                      int from = 0;
                      if (!absl::SimpleAtoi(*v, &from)) {
                        return done(absl::InternalError(absl::StrCat(
                            "store key ", member, " holds '", *v, "', not a generation number")));
                      }
                      advance(from, done);
                    });
           });
}

void PublishRestartGeneration(const boost::asio::any_io_executor& executor, const std::string& host,
                              int port, int rank, int generation) {
  store::AsyncClientOptions o;
  o.host = host;
  o.port = static_cast<uint16_t>(port);
  o.protocol = store::Protocol::kV1;
  constexpr absl::Duration kTimeout = absl::Seconds(5);
  // Owned by its own callbacks: each runs exactly once, so the last one to run frees it.
  auto client = std::make_shared<store::AsyncClient>(executor, std::move(o));
  client->Connect(kTimeout, nullptr);
  client->Set(keys::RestartWireKey(rank), absl::StrCat(generation), kTimeout,
              [client](const absl::Status& s) mutable {
                if (!s.ok()) {
                  spdlog::warn("dgt-run: cannot publish a restart in the store: {}", s.message());
                }
                // Freed once this callback returns (the client outlives its own handlers).
                client.reset();
              });
}

FailurePublisher::FailurePublisher(boost::asio::any_io_executor executor, Options options)
    : options_(std::move(options)), executor_(std::move(executor)) {}

void FailurePublisher::EnsureClient(const std::string& host, int port) {
  const std::string address = absl::StrCat(host, ":", port);
  if (client_ != nullptr && client_address_ == address) return;
  store::AsyncClientOptions o;
  o.host = host;
  o.port = static_cast<uint16_t>(port);
  client_ = std::make_unique<store::AsyncClient>(executor_, std::move(o));
  client_address_ = address;
  store::AsyncClient* raw = client_.get();
  client_->Connect(options_.timeout, [this, raw](const absl::Status& s) {
    if (closing_ || s.ok()) return;
    spdlog::debug("dgt-run: failure publisher: {}", s.message());
    // The next publication connects anew (this one fails with the same error).
    if (client_.get() == raw) client_address_.clear();
  });
}

void FailurePublisher::Next() {
  if (running_ || pending_.empty() || closing_) return;
  auto item = std::make_shared<Item>(std::move(pending_.front()));
  pending_.pop_front();
  if (item->rank < 0) {
    EnsureClient(item->host, item->port);
    Next();
    return;
  }
  running_ = true;
  const bool reused =
      client_ != nullptr && client_address_ == absl::StrCat(item->host, ":", item->port);
  EnsureClient(item->host, item->port);
  Run(item, reused);
}

void FailurePublisher::Run(const std::shared_ptr<Item>& item, bool retry) {
  store::AsyncClient* raw = client_.get();
  // The C++ runtime's namespace, then the torch clients' one (behind '/').
  PublishRankFailureAsync(
      *raw, "", options_.group, item->rank, item->reason, options_.timeout,
      [this, raw, item, retry](const absl::StatusOr<int>& plain) {
        if (closing_) return;
        if (!plain.ok()) {
          if (retry && absl::IsUnavailable(plain.status()) && client_.get() == raw) {
            client_.reset();  // A kept connection gone stale: one fresh attempt.
            EnsureClient(item->host, item->port);
            return Run(item, false);
          }
          return Finish(item, plain.status());
        }
        PublishRankFailureAsync(*raw, "/", options_.group, item->rank, item->reason,
                                options_.timeout,
                                [this, item, plain](const absl::StatusOr<int>& torch) {
                                  if (closing_) return;
                                  if (!torch.ok()) return Finish(item, torch.status());
                                  // The later one: the namespace the trainers use.
                                  Finish(item, std::max(*plain, *torch));
                                });
      });
}

void FailurePublisher::Finish(const std::shared_ptr<Item>& item, absl::StatusOr<int> result) {
  running_ = false;
  if (!result.ok()) client_address_.clear();  // Connect anew next time.
  if (item->done) item->done(std::move(result));
  if (!closing_) Next();
}

FailurePublisher::~FailurePublisher() {
  closing_ = true;
  pending_.clear();
  client_.reset();  // Its callbacks run now (Cancelled) and see closing_.
}

void FailurePublisher::Publish(std::string host, int port, int rank, std::string reason,
                               Done done) {
  pending_.push_back(Item{std::move(host), port, rank, std::move(reason), std::move(done)});
  Next();
}

void FailurePublisher::Prepare(std::string host, int port) {
  pending_.push_back(Item{std::move(host), port, -1, "", nullptr});
  Next();
}

}  // namespace dgt::agent
