#include "server/auth.h"

#include "common/bearer_token.h"

namespace dgt::server {

bool BearerAuthorized(const grpc::ServerContextBase& context, absl::string_view token) {
  if (token.empty()) return true;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) return false;
  return TokenMatches(absl::string_view(it->second.data(), it->second.size()), token);
}

grpc::Status MissingBearerToken() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
}

}  // namespace dgt::server
