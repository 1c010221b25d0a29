// The TensorFlow cluster of a multi-node round: every node's worker addresses (host:port), known
// to every node, so that each builds the same TF_CONFIG cluster spec (BuildTfConfig in
// agent/workers/worker_env.h; docs/ENVIRONMENT.md).
//
// Each node reserves one free port per local worker once (the agent holds them, bound, until its
// workers start) and, at the start of every round, publishes them into the round's store, the
// one at MASTER_ADDR:MASTER_PORT that node rank 0's agent serves. Both backends have that store:
// dgt-rendezvous gives each round a fresh one, and the static backend's is node rank 0's. Once
// every node of the round has published, each reads them all in node-rank order, which is
// global-rank order (node rank r runs global ranks r * nproc_per_node ...). A new round (a group
// restart, a node lost or added) publishes again under its own round number.
//
// Keys (common/store_keys.h, keys::TfAddressesKey and keys::TfRolesKey):
//   dgt/tf/<round>/<node_rank> = JSON array of that node's addresses by local rank,
//                                e.g. ["10.0.0.2:41001","10.0.0.2:41002"]
//   dgt/tf/<round>/<node_rank>/roles = JSON object of that node's role flags, set before the
//                                addresses, e.g. {"nproc_per_node":2,"parameter_server_count":1,
//                                "tf_chief":true,"worker_count":0}
// The static backend has a single round: 0. Every node compares each other node's roles with its
// own: nodes given different --parameter-server-count, --tf-chief, --worker-count or
// --nproc-per-node would build different clusters, so each refuses to start its workers.
//
// Thread-safety: ExchangeTfAddresses is a plain function over a blocking store::Store, as
// thread-safe as the Store; the agent uses ExchangeTfAddressesAsync, over a store::AsyncClient on
// its event loop (callbacks on the client's executor; no thread).
#ifndef DGT_AGENT_COORD_TF_CLUSTER_H_
#define DGT_AGENT_COORD_TF_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dgt/store/async_client.h"
#include "dgt/store/store.h"

namespace dgt::agent {

// The flags that shape the cluster (BuildTfConfig); every node of a job must give the same.
struct TfRoleConfig {
  int parameter_server_count = 0;  // --parameter-server-count
  bool tf_chief = false;           // --tf-chief
  int worker_count = 0;            // --worker-count (0: all but ps/chief)
  int nproc_per_node = 1;          // --nproc-per-node
  friend bool operator==(const TfRoleConfig&, const TfRoleConfig&) = default;
};

// The value published for `roles`: a compact JSON object (keys as in the header comment).
std::string EncodeTfRoles(const TfRoleConfig& roles);

// `theirs` (the roles value node `node_rank` published) against this node's `own` roles.
// InvalidArgument, naming the node and the value, when it is not such an object;
// FailedPrecondition naming each flag that differs with both values, e.g. "TF_CONFIG: node rank 1
// was started with --parameter-server-count=0, this node (node rank 0) with
// --parameter-server-count=1; ...".
absl::Status CheckTfRoles(absl::string_view theirs, int node_rank, const TfRoleConfig& own,
                          int own_node_rank);

// The value published for `addresses`: a compact JSON array of strings.
std::string EncodeTfAddresses(const std::vector<std::string>& addresses);

// The addresses in `value` (from node `node_rank`, for the error message). InvalidArgument, naming
// the node and the value, unless it is a JSON array of exactly `count` non-empty strings.
absl::StatusOr<std::vector<std::string>> DecodeTfAddresses(absl::string_view value, int node_rank,
                                                           int count);

// One step of the exchange of round `round`.
struct TfExchangeStep {
  // Every node's addresses, node rank 0's first: the job's addresses by global rank. Empty while
  // `missing` is not.
  std::vector<std::string> addresses;
  // Node ranks that have not published yet, ascending.
  std::vector<int> missing;
};

// Publishes `roles` and `own` (this node's addresses, one per local worker) for `node_rank`, then
// reads which of node ranks 0..node_count-1 have published: two SETs, one CHECK per node rank, and
// one MULTI_GET once all are there. Repeating the step is harmless (the SETs write the same
// values). Errors: those of the store; InvalidArgument for a value that another node published
// and that is not `roles.nproc_per_node` addresses (or not a roles object); FailedPrecondition
// (CheckTfRoles) for another node whose roles differ from `roles`.
absl::StatusOr<TfExchangeStep> ExchangeTfAddresses(store::Store& store, int64_t round,
                                                   int node_rank, int node_count,
                                                   const TfRoleConfig& roles,
                                                   const std::vector<std::string>& own);

// As ExchangeTfAddresses, over `client` (the requests pipelined, each bounded by `timeout`): two
// SETs, one CHECK per node rank, then one GET per address and roles key once all are there.
// `done` runs exactly once, on the client's executor, with the step or the first error.
void ExchangeTfAddressesAsync(store::AsyncClient& client, int64_t round, int node_rank,
                              int node_count, const TfRoleConfig& roles,
                              const std::vector<std::string>& own, absl::Duration timeout,
                              std::function<void(absl::StatusOr<TfExchangeStep>)> done);

// The cluster from every node's published values: `values` holds node ranks 0..node_count-1's
// addresses, then their roles (2 * node_count strings). The errors of ExchangeTfAddresses.
absl::StatusOr<TfExchangeStep> TfClusterFromValues(const std::vector<std::string>& values,
                                                   int node_rank, int node_count,
                                                   const TfRoleConfig& roles);

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_TF_CLUSTER_H_
