#include "agent/coord/rendezvous_session.h"

#include "absl/strings/str_cat.h"
#include "agent/coord/connect_failure.h"
#include "common/mutex.h"
#include "spdlog/spdlog.h"

namespace dgt::agent {
namespace {

// Whether `channel` becomes READY before `deadline` without passing through TRANSIENT_FAILURE
// (gRPC's WaitForConnected keeps retrying a refused connection until its deadline).
bool ConnectOnce(grpc::Channel& channel, std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  // Each change is one transition (IDLE, CONNECTING, READY or TRANSIENT_FAILURE): bounded.
  for (int changes = 0; changes < 16; ++changes) {
    if (state == GRPC_CHANNEL_READY) return true;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel.WaitForStateChange(state, deadline)) return false;  // The deadline passed.
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousSession>> RendezvousSession::Open(
    const std::string& endpoint, absl::Duration connect_timeout,
    const rendezvous::ClientOptions& client, MessageCallback on_message, ClosedCallback on_closed,
    bool fail_fast) {
  auto channel = rendezvous::CreateClientChannel(endpoint, client);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<RendezvousSession> s(new RendezvousSession());
  rendezvous::AuthorizeCall(client, &s->context_);
  s->channel_ = *std::move(channel);
  auto deadline = std::chrono::system_clock::now() + absl::ToChronoMilliseconds(connect_timeout);
  if (!(fail_fast ? ConnectOnce(*s->channel_, deadline)
                  : s->channel_->WaitForConnected(deadline))) {
    // A call that does not wait for the channel fails at once with its last transport error:
    // refused, or a TLS handshake that failed (agent/coord/connect_failure.h tells which).
    grpc::ClientContext probe;
    probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    rdzv_v1::GetStatusResponse ignored;
    grpc::Status why = rendezvous::NewRendezvousStub(s->channel_)
                           ->GetStatus(&probe, rdzv_v1::GetStatusRequest(), &ignored);
    spdlog::debug("dgt-run: rendezvous channel to {} did not connect: {}", endpoint,
                  why.error_message());
    std::string message =
        DescribeConnectFailure(endpoint, connect_timeout, why.error_message(), !client.tls.empty());
    // Something answered but the TLS settings disagree: retrying the node will not help
    // (docs/EXIT_CODES.md: not admitted), unlike a service that is down.
    if (ClassifyConnectFailure(why.error_message(), !client.tls.empty()) !=
        ConnectFailure::kUnreachable) {
      return absl::UnauthenticatedError(message);
    }
    return absl::DeadlineExceededError(message);
  }
  s->stub_ = rendezvous::NewRendezvousStub(s->channel_);
  s->on_message_ = std::move(on_message);
  s->on_closed_ = std::move(on_closed);
  s->stream_ = s->stub_->Session(&s->context_);
  s->reader_ = std::thread([p = s.get()] { p->ReadLoop(); });
  return s;
}

RendezvousSession::~RendezvousSession() { Close(); }

absl::Status RendezvousSession::Send(const rdzv_v1::AgentMessage& message) {
  dgt::MutexLock lock(&write_mu_);
  if (!stream_->Write(message)) {
    return absl::UnavailableError("the rendezvous session is closed");
  }
  return absl::OkStatus();
}

void RendezvousSession::ReadLoop() {
  rdzv_v1::ServiceMessage message;
  while (stream_->Read(&message)) on_message_(message);
  grpc::Status status = stream_->Finish();
  on_closed_(status);
}

void RendezvousSession::Close() {
  if (!reader_.joinable()) return;
  context_.TryCancel();
  reader_.join();
}

}  // namespace dgt::agent
