// The shared bearer token of dgt's gRPC services: a client sends "authorization: Bearer <token>"
// with every call, and a server compares it in constant time. Pure string functions; gRPC is
// the callers' (rendezvous/client.h sends it, server/auth.h checks it).
//
// Thread-safety: thread-safe (no state).
#ifndef DGT_COMMON_BEARER_TOKEN_H_
#define DGT_COMMON_BEARER_TOKEN_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dgt {

// The metadata key the token travels under.
inline constexpr char kAuthorizationKey[] = "authorization";

// The metadata value a client sends with `token`: "Bearer <token>".
std::string BearerValue(absl::string_view token);

// Whether a received authorization value is BearerValue(token). Compares every byte whatever the
// content, so that timing tells nothing about the token.
bool TokenMatches(absl::string_view received_value, absl::string_view token);

}  // namespace dgt

#endif  // DGT_COMMON_BEARER_TOKEN_H_
