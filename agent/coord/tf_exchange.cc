#include "agent/coord/tf_exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/exit_codes.h"
#include "common/logging.h"

namespace dgt::agent {

TfStepDecision DecideTfStep(const absl::StatusOr<TfExchangeStep>& step, absl::Time now,
                            const TfExchangeRound& round) {
  using Kind = TfStepDecision::Kind;
  if (step.ok() && step->missing.empty()) return {Kind::kStart, 0, ""};
  if (!step.ok() && step.status().code() == absl::StatusCode::kInvalidArgument) {
    return {Kind::kFinish, kExitLauncherError,
            absl::StrCat("cannot build TF_CONFIG: ", step.status().message())};
  }
  if (!step.ok() && step.status().code() == absl::StatusCode::kFailedPrecondition) {
    // Nodes given different role flags: this node is not admitted to the others' cluster. Node
    // rank 0 serves the round's store: it stays 1 s more, so that the other nodes (who poll every
    // 100 ms) read the roles that differ and refuse too, rather than find the store gone.
    return {round.node_rank == 0 ? Kind::kFinishLater : Kind::kFinish, kExitNotAdmitted,
            std::string(step.status().message())};
  }
  if (now >= round.deadline) {
    return {Kind::kFinish, kExitJoinTimeout,
            step.ok() ? absl::StrCat("TF_CONFIG: node rank(s) ", absl::StrJoin(step->missing, ", "),
                                     " did not publish their TensorFlow addresses in the round's "
                                     "store at ",
                                     round.master_addr, ":", round.master_port, " within ",
                                     round.join_timeout_s, " s (", round.join_timeout_flag,
                                     "): is every node started with --distribution tensorflow?")
                      : absl::StrCat("TF_CONFIG: cannot exchange the TensorFlow addresses within ",
                                     round.join_timeout_s, " s (", round.join_timeout_flag,
                                     "): ", step.status().message())};
  }
  return {Kind::kRetry, 0, ""};
}

TfExchange::TfExchange(boost::asio::io_context& io, Options options, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      client_(io.get_executor(), options_.store_timeout),
      timer_(io) {}

TfExchange::~TfExchange() {
  client_.Drop();
  for (int fd : reservations_) ::close(fd);
}

absl::Status TfExchange::ReservePorts(const std::string& address, int nproc) {
  // Bound (not listening) sockets hold the ports until the workers start, so the addresses in
  // TF_CONFIG stay free.
  for (int local = 0; local < nproc; ++local) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError("socket failed");
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot bind a port on ", address));
    }
    reservations_.push_back(fd);
    local_addresses_.push_back(absl::StrCat(address, ":", ntohs(addr.sin_port)));
  }
  return absl::OkStatus();
}

void TfExchange::ReleasePorts() {
  for (int fd : reservations_) ::close(fd);
  reservations_.clear();
}

void TfExchange::Start(int64_t round, int node_rank, int node_count, const std::string& master_addr,
                       int master_port, Callbacks callbacks) {
  addresses_.clear();
  ++generation_;
  round_ = round;
  node_count_ = node_count;
  where_.node_rank = node_rank;
  where_.master_addr = master_addr;
  where_.master_port = master_port;
  where_.deadline = clock_->Now() + absl::Seconds(options_.join_timeout_s);
  where_.join_timeout_s = options_.join_timeout_s;
  where_.join_timeout_flag = options_.join_timeout_flag;
  callbacks_ = std::move(callbacks);
  spdlog::info(
      "dgt-run: publishing this node's TensorFlow addresses {} for round {} in the round's store "
      "at {}:{}",
      absl::StrJoin(local_addresses_, ","), round_, master_addr, master_port);
  Poll(generation_);
}

void TfExchange::Stop() {
  timer_.cancel();
  client_.Drop();
}

bool TfExchange::Proceed(uint64_t generation) {
  if (generation != generation_) return false;
  // A copy: what the callback does may start the next round's exchange.
  const Callbacks callbacks = callbacks_;
  switch (callbacks.gate()) {
    case Gate::kGone:
      return false;
    case Gate::kStopping:
      callbacks.on_stopping();  // Starts nothing, ends the round's spawn.
      return false;
    case Gate::kGo:
      return true;
  }
  return false;
}

void TfExchange::Poll(uint64_t generation) {
  if (!Proceed(generation)) return;
  // A broken connection is replaced at the next step (RoundStoreClient::For).
  ExchangeTfAddressesAsync(
      client_.For(where_.master_addr, where_.master_port), round_, where_.node_rank, node_count_,
      options_.roles, local_addresses_, client_.timeout(),
      [this, generation](const absl::StatusOr<TfExchangeStep>& step) { OnStep(generation, step); });
}

void TfExchange::OnStep(uint64_t generation, const absl::StatusOr<TfExchangeStep>& step) {
  if (!Proceed(generation)) return;
  const Callbacks callbacks = callbacks_;
  const TfStepDecision decision = DecideTfStep(step, clock_->Now(), where_);
  switch (decision.kind) {
    case TfStepDecision::Kind::kStart:
      addresses_ = step->addresses;
      spdlog::info("dgt-run: TensorFlow cluster of round {}: {}", round_,
                   absl::StrJoin(addresses_, ","));
      callbacks.on_ready();
      return;
    case TfStepDecision::Kind::kFinish:
      callbacks.on_finish(decision.exit_status, decision.message);
      return;
    case TfStepDecision::Kind::kFinishLater:
      timer_.expires_after(std::chrono::seconds(1));
      timer_.async_wait([callbacks, decision](boost::system::error_code ec) {
        if (!ec) callbacks.on_finish(decision.exit_status, decision.message);
      });
      return;
    case TfStepDecision::Kind::kRetry:
      break;
  }
  if (!step.ok()) {
    spdlog::debug("dgt-run: TensorFlow address exchange: {}", step.status().message());
  }
  timer_.expires_after(std::chrono::milliseconds(100));
  timer_.async_wait([this, generation](boost::system::error_code ec) {
    if (!ec) Poll(generation);
  });
}

}  // namespace dgt::agent
