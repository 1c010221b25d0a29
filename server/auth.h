// The one bearer-token check of dgt-rendezvous's services: the rendezvous (every RPC) and the jobs
// service (Register with the agents' token; the submit token on the job RPCs) both ask it.
// The token's wire form is common/bearer_token.h's.
//
// Thread-safety: thread-safe (no state).
#ifndef DGT_SERVER_AUTH_H_
#define DGT_SERVER_AUTH_H_

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace dgt::server {

// Whether the call carries "authorization: Bearer <token>" (compared in constant time). An empty
// `token` asks for nothing: true.
bool BearerAuthorized(const grpc::ServerContextBase& context, absl::string_view token);

// The refusal of a call without the token: UNAUTHENTICATED "missing or wrong bearer token".
grpc::Status MissingBearerToken();

}  // namespace dgt::server

#endif  // DGT_SERVER_AUTH_H_
