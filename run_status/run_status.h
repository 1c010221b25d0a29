// The operators' view of a rendezvous run (v1.RunStatus, v1.NodeStatus): its phase, round, nodes
// and outcome. A library of its own below both the rendezvous, which makes it
// (RoundStateMachine::Status), and the jobs scheduler, which follows its jobs' runs through it;
// neither includes the other. The types keep the rendezvous' namespace: they are its view.
//
// Plain value types: thread-compatible.
#ifndef DGT_RUN_STATUS_RUN_STATUS_H_
#define DGT_RUN_STATUS_RUN_STATUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dgt::rendezvous {

// A run's phase. kGathering: waiting for nodes (before the first round, or after losing nodes
// below MIN). kRunning: a round's workers run. kClosed: the run ended (kept a while to answer
// late joins and `dgt status`).
enum class RunState { kGathering, kRunning, kClosed };

// "gathering", "running" or "closed" (RunStatus.state on the wire, metrics labels).
const char* RunStateName(RunState state);

// Operators' view of one node (v1.NodeStatus).
struct NodeStatus {
  std::string node_id;
  std::string address;
  int32_t node_rank = -1;  // -1 while waiting for a round.
  int32_t nproc_per_node = 0;
  absl::Time last_contact = absl::UnixEpoch();
  bool succeeded = false;

  friend bool operator==(const NodeStatus&, const NodeStatus&) = default;
};

// Operators' view of one run (v1.RunStatus).
struct RunStatus {
  std::string run_id;
  RunState state = RunState::kGathering;
  int64_t round = -1;
  int32_t restart_count = 0;
  int32_t min_nodes = 0;
  int32_t max_nodes = 0;
  int32_t world_size = 0;
  std::vector<NodeStatus> nodes;  // By node rank, waiting nodes last (by node id).
  std::string outcome;            // A closed run's "succeeded: ..." / "failed: ...".
  std::string master_addr;
  int32_t master_port = 0;

  friend bool operator==(const RunStatus&, const RunStatus&) = default;
};

}  // namespace dgt::rendezvous

#endif  // DGT_RUN_STATUS_RUN_STATUS_H_
