// The agent's side of a rendezvous Session stream: connects with a deadline, sends AgentMessages,
// and delivers every ServiceMessage (and the end of the stream) to callbacks on a reader thread.
//
// Thread-safety: Send and Close may be called from any thread; callbacks run on the reader
// thread and must not block (post to the agent's loop instead).
#ifndef DGT_AGENT_COORD_RENDEZVOUS_SESSION_H_
#define DGT_AGENT_COORD_RENDEZVOUS_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/client.h"

namespace dgt::agent {

namespace rdzv_v1 = ::dgt::rendezvous::v1;

class RendezvousSession {
 public:
  using MessageCallback = std::function<void(const rdzv_v1::ServiceMessage&)>;
  // Called once when the stream ends, with its status.
  using ClosedCallback = std::function<void(const grpc::Status&)>;

  // Connects to `endpoint` ("host:port"), retrying until `connect_timeout` passes, then opens the
  // Session stream. `client` carries TLS, token and keepalive (rendezvous/client.h; with its
  // defaults a silent service is declared dead after 3 s).
  // `fail_fast`: give up as soon as the first connection attempt fails (refused, handshake
  // failed) instead of retrying until `connect_timeout`: the caller has other replicas to try
  // (replica/endpoint_rotation.h).
  // Errors: DeadlineExceeded when the service was not reachable in time (or, fail_fast, refused);
  // Unauthenticated when something answered but the TLS settings disagree; InvalidArgument for
  // unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<RendezvousSession>> Open(
      const std::string& endpoint, absl::Duration connect_timeout,
      const rendezvous::ClientOptions& client, MessageCallback on_message, ClosedCallback on_closed,
      bool fail_fast = false);

  ~RendezvousSession();

  // Errors: Unavailable when the stream is already broken.
  absl::Status Send(const rdzv_v1::AgentMessage& message);

  // Cancels the stream and joins the reader thread.
  void Close();

 private:
  RendezvousSession() = default;
  void ReadLoop();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rdzv_v1::Rendezvous::StubInterface> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriterInterface<rdzv_v1::AgentMessage, rdzv_v1::ServiceMessage>>
      stream_;
  MessageCallback on_message_;
  ClosedCallback on_closed_;
  dgt::Mutex write_mu_;
  std::thread reader_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_RENDEZVOUS_SESSION_H_
