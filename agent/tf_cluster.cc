#include "agent/tf_cluster.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dgt::agent {

std::string TfAddressesKey(int64_t round, int node_rank) {
  return absl::StrCat("dgt/tf/", round, "/", node_rank);
}

std::string EncodeTfAddresses(const std::vector<std::string>& addresses) {
  return nlohmann::json(addresses).dump();
}

absl::StatusOr<std::vector<std::string>> DecodeTfAddresses(absl::string_view value, int node_rank,
                                                           int count) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG addresses of node rank ", node_rank,
                                                   " must be ", why, ", got '", value, "'"));
  };
  const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return bad(absl::StrCat("a JSON array of ", count, " host:port strings"));
  if (static_cast<int>(parsed.size()) != count) {
    return bad(absl::StrCat(count, " address(es), one per worker (--nproc-per-node)"));
  }
  std::vector<std::string> out;
  out.reserve(parsed.size());
  for (const nlohmann::json& a : parsed) {
    if (!a.is_string() || a.get_ref<const std::string&>().empty()) {
      return bad("non-empty host:port strings");
    }
    out.push_back(a.get<std::string>());
  }
  return out;
}

absl::StatusOr<TfExchangeStep> ExchangeTfAddresses(store::Store& store, int64_t round,
                                                   int node_rank, int node_count,
                                                   int nproc_per_node,
                                                   const std::vector<std::string>& own) {
  if (absl::Status s = store.Set(TfAddressesKey(round, node_rank), EncodeTfAddresses(own));
      !s.ok()) {
    return s;
  }
  TfExchangeStep step;
  std::vector<std::string> keys;
  keys.reserve(node_count);
  for (int r = 0; r < node_count; ++r) {
    keys.push_back(TfAddressesKey(round, r));
    absl::StatusOr<bool> present = store.Check({keys.back()});
    if (!present.ok()) return present.status();
    if (!*present) step.missing.push_back(r);
  }
  if (!step.missing.empty()) return step;
  absl::StatusOr<std::vector<std::string>> values = store.MultiGet(keys);
  if (!values.ok()) return values.status();
  step.addresses.reserve(static_cast<size_t>(node_count) * nproc_per_node);
  for (int r = 0; r < node_count; ++r) {
    absl::StatusOr<std::vector<std::string>> node =
        DecodeTfAddresses((*values)[r], r, nproc_per_node);
    if (!node.ok()) return node.status();
    step.addresses.insert(step.addresses.end(), node->begin(), node->end());
  }
  return step;
}

}  // namespace dgt::agent
