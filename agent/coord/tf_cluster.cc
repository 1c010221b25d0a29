#include "agent/coord/tf_cluster.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/store_keys.h"
#include "nlohmann/json.hpp"

namespace dgt::agent {

std::string EncodeTfRoles(const TfRoleConfig& roles) {
  return nlohmann::json{{"parameter_server_count", roles.parameter_server_count},
                        {"tf_chief", roles.tf_chief},
                        {"worker_count", roles.worker_count},
                        {"nproc_per_node", roles.nproc_per_node}}
      .dump();
}

absl::Status CheckTfRoles(absl::string_view theirs, int node_rank, const TfRoleConfig& own,
                          int own_node_rank) {
  const nlohmann::json parsed = nlohmann::json::parse(theirs, nullptr, /*allow_exceptions=*/false);
  auto number = [&](const char* key) -> std::optional<int> {
    if (!parsed.is_object() || !parsed.contains(key) || !parsed[key].is_number_integer()) {
      return std::nullopt;
    }
    return parsed[key].get<int>();
  };
  const std::optional<int> ps = number("parameter_server_count");
  const std::optional<int> workers = number("worker_count");
  const std::optional<int> nproc = number("nproc_per_node");
  if (!ps || !workers || !nproc || !parsed.contains("tf_chief") ||
      !parsed["tf_chief"].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TF_CONFIG roles of node rank ", node_rank,
        " must be a JSON object with parameter_server_count, tf_chief, worker_count and "
        "nproc_per_node, got '",
        theirs, "'"));
  }
  const TfRoleConfig other{*ps, parsed["tf_chief"].get<bool>(), *workers, *nproc};
  if (other == own) return absl::OkStatus();
  auto describe = [&](const TfRoleConfig& r) {
    std::vector<std::string> parts;
    if (own.parameter_server_count != other.parameter_server_count) {
      parts.push_back(absl::StrCat("--parameter-server-count=", r.parameter_server_count));
    }
    if (own.tf_chief != other.tf_chief)
      parts.emplace_back(r.tf_chief ? "--tf-chief" : "no --tf-chief");
    if (own.worker_count != other.worker_count) {
      parts.push_back(absl::StrCat("--worker-count=", r.worker_count));
    }
    if (own.nproc_per_node != other.nproc_per_node) {
      parts.push_back(absl::StrCat("--nproc-per-node=", r.nproc_per_node));
    }
    return absl::StrJoin(parts, " ");
  };
  return absl::FailedPreconditionError(absl::StrCat(
      "TF_CONFIG: node rank ", node_rank, " was started with ", describe(other),
      ", this node (node rank ", own_node_rank, ") with ", describe(own),
      "; the nodes would build different TensorFlow clusters: give every node the same "
      "--parameter-server-count, --tf-chief, --worker-count and --nproc-per-node"));
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
                                                   const TfRoleConfig& roles,
                                                   const std::vector<std::string>& own) {
  // The roles first: a node whose addresses are there has its roles there too.
  if (absl::Status s = store.Set(keys::TfRolesKey(round, node_rank), EncodeTfRoles(roles));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = store.Set(keys::TfAddressesKey(round, node_rank), EncodeTfAddresses(own));
      !s.ok()) {
    return s;
  }
  TfExchangeStep step;
  std::vector<std::string> keys;
  keys.reserve(node_count);
  for (int r = 0; r < node_count; ++r) {
    keys.push_back(keys::TfAddressesKey(round, r));
    absl::StatusOr<bool> present = store.Check({keys.back()});
    if (!present.ok()) return present.status();
    if (!*present) step.missing.push_back(r);
  }
  if (!step.missing.empty()) return step;
  for (int r = 0; r < node_count; ++r) keys.push_back(keys::TfRolesKey(round, r));
  absl::StatusOr<std::vector<std::string>> values = store.MultiGet(keys);
  if (!values.ok()) return values.status();
  return TfClusterFromValues(*values, node_rank, node_count, roles);
}

absl::StatusOr<TfExchangeStep> TfClusterFromValues(const std::vector<std::string>& values,
                                                   int node_rank, int node_count,
                                                   const TfRoleConfig& roles) {
  for (int r = 0; r < node_count; ++r) {
    if (r == node_rank) continue;
    if (absl::Status s = CheckTfRoles(values[node_count + r], r, roles, node_rank); !s.ok()) {
      return s;
    }
  }
  TfExchangeStep step;
  step.addresses.reserve(static_cast<size_t>(node_count) * roles.nproc_per_node);
  for (int r = 0; r < node_count; ++r) {
    absl::StatusOr<std::vector<std::string>> node =
        DecodeTfAddresses(values[r], r, roles.nproc_per_node);
    if (!node.ok()) return node.status();
    step.addresses.insert(step.addresses.end(), node->begin(), node->end());
  }
  return step;
}

void ExchangeTfAddressesAsync(store::AsyncClient& client, int64_t round, int node_rank,
                              int node_count, const TfRoleConfig& roles,
                              const std::vector<std::string>& own, absl::Duration timeout,
                              std::function<void(absl::StatusOr<TfExchangeStep>)> done) {
  // Shared by the replies of one step; `done` runs once, when the last one is in.
  struct Step {
    int left = 0;
    absl::Status error;
    std::vector<bool> present;
    std::vector<std::string> values;  // Addresses by node rank, then roles by node rank.
    std::function<void(absl::StatusOr<TfExchangeStep>)> done;
    void Fail(const absl::Status& s) {
      if (error.ok()) error = s;
    }
  };
  auto step = std::make_shared<Step>();
  step->done = std::move(done);
  step->present.assign(node_count, false);
  store::AsyncClient* c = &client;
  // The roles first: a node whose addresses are there has its roles there too. SETs complete
  // once written; their errors reach the CHECKs behind them too.
  c->Set(keys::TfRolesKey(round, node_rank), EncodeTfRoles(roles), timeout,
         [step](const absl::Status& s) {
           if (!s.ok()) step->Fail(s);
         });
  c->Set(keys::TfAddressesKey(round, node_rank), EncodeTfAddresses(own), timeout,
         [step](const absl::Status& s) {
           if (!s.ok()) step->Fail(s);
         });
  if (node_count <= 0) {
    c->Flush(timeout, [step](const absl::Status& s) {
      if (!s.ok()) step->Fail(s);
      if (!step->error.ok()) return step->done(step->error);
      step->done(TfExchangeStep{});
    });
    return;
  }
  // Once every value is in: the cluster (or why not).
  auto read_all = [c, step, round, node_rank, node_count, roles, timeout] {
    step->values.assign(2 * static_cast<size_t>(node_count), "");
    step->left = 2 * node_count;
    for (int i = 0; i < 2 * node_count; ++i) {
      const std::string key =
          i < node_count ? keys::TfAddressesKey(round, i) : keys::TfRolesKey(round, i - node_count);
      c->Get(key, timeout,
             [step, i, node_rank, node_count, roles](const absl::StatusOr<std::string>& v) {
               if (v.ok()) {
                 step->values[i] = *v;
               } else {
                 step->Fail(v.status());
               }
               if (--step->left > 0) return;
               if (!step->error.ok()) return step->done(step->error);
               step->done(TfClusterFromValues(step->values, node_rank, node_count, roles));
             });
    }
  };
  step->left = node_count;
  for (int r = 0; r < node_count; ++r) {
    c->Check({keys::TfAddressesKey(round, r)}, timeout,
             [step, r, read_all](const absl::StatusOr<bool>& present) {
               if (present.ok()) {
                 step->present[r] = *present;
               } else {
                 step->Fail(present.status());
               }
               if (--step->left > 0) return;
               if (!step->error.ok()) return step->done(step->error);
               TfExchangeStep missing;
               for (size_t n = 0; n < step->present.size(); ++n) {
                 if (!step->present[n]) missing.missing.push_back(static_cast<int>(n));
               }
               if (!missing.missing.empty()) return step->done(std::move(missing));
               read_all();
             });
  }
}

}  // namespace dgt::agent
