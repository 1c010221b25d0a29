// gRPC keepalive settings shared by the rendezvous service (RendezvousServerOptions) and its
// clients (ClientOptions, rendezvous/client.h): HTTP/2 pings tell a silent peer from an idle one,
// so a lost agent (or a lost service) is noticed without waiting for TCP's own timeouts.
//
// Plain data; thread-compatible.
#ifndef DGT_RENDEZVOUS_KEEPALIVE_H_
#define DGT_RENDEZVOUS_KEEPALIVE_H_

namespace dgt::rendezvous {

// A peer is declared dead after keepalive_time_ms + keepalive_timeout_ms of silence (3 s by
// default). The service accepts pings every keepalive_time_ms / 2 and more, so a client's
// keepalive_time_ms must not be shorter than half the service's (gRPC otherwise closes the
// connection with ENHANCE_YOUR_CALM). dgt-rendezvous: --keepalive-time-ms, --keepalive-timeout-ms.
struct KeepaliveOptions {
  // Milliseconds between pings (GRPC_ARG_KEEPALIVE_TIME_MS).
  int keepalive_time_ms = 1000;
  // Milliseconds to wait for a ping's answer (GRPC_ARG_KEEPALIVE_TIMEOUT_MS).
  int keepalive_timeout_ms = 2000;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RENDEZVOUS_KEEPALIVE_H_
