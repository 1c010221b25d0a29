// EtcdCluster: a real etcd cluster on loopback for tests. Starts N members of Debian's etcd
// (etcd-server) on free ports with their data in a fresh temporary directory; members can be
// killed (SIGKILL) and started again on the same ports and data. The destructor kills every
// member still running and removes the directory. Each member dies with the test process too
// (PR_SET_PDEATHSIG), so a crashed test leaves no etcd behind; and a sweeper (/bin/sh in its own
// session, blocked reading a pipe only the test process holds) removes the directory when the
// test process ends in any way, a signal or SIGKILL included. Every wait is bounded.
//
// Thread-compatible: drive it from the test's thread.
#ifndef DGT_TESTS_ETCD_ETCD_CLUSTER_H_
#define DGT_TESTS_ETCD_ETCD_CLUSTER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dgt::etcd::testing {

class EtcdCluster {
 public:
  // The etcd binary: $DGT_ETCD_BIN when set ("" when that is not executable), else `etcd` on
  // PATH, else /usr/bin/etcd; "" when none.
  static std::string FindEtcd();

  EtcdCluster() = default;
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Starts `members` members (fast elections: heartbeat 50 ms, election timeout 500 ms) and
  // waits up to `timeout` until every member reports the same leader and a write succeeds.
  // Errors: FAILED_PRECONDITION without an etcd binary; UNAVAILABLE / DEADLINE_EXCEEDED (with
  // the member logs' last lines) when the cluster does not form in time.
  absl::Status Start(int members, absl::Duration timeout);

  // "127.0.0.1:port" of each member's client URL, by member index.
  const std::vector<std::string>& endpoints() const { return client_endpoints_; }

  // SIGKILLs member `i` and reaps it (bounded); no-op when it is not running.
  void Kill(int i);
  // Starts member `i` again with its old ports and data.
  absl::Status Restart(int i);
  // SIGSTOPs member `i`: its connections stay open and it answers nothing (a hung or paused
  // member, unlike a killed one, whose connections reset). No-op when it is not running.
  void Pause(int i);
  // SIGCONTs member `i` after Pause.
  void Resume(int i);
  // Waits up to `timeout` until every running member reports one leader that is running and a
  // write through all running members succeeds.
  absl::Status WaitHealthy(absl::Duration timeout);
  // Index of the member every running member names as leader, or an error when they do not agree
  // within `timeout`.
  absl::StatusOr<int> Leader(absl::Duration timeout);
  bool running(int i) const { return pids_[i] > 0; }

 private:
  absl::Status Spawn(int i);
  std::string LogTail(int i) const;

  std::string etcd_;
  std::string dir_;
  int sweeper_fd_ = -1;  // Write end of the sweeper's pipe; closing it (or dying) sweeps.
  std::vector<int> client_ports_;
  std::vector<int> peer_ports_;
  std::vector<std::string> client_endpoints_;
  std::vector<pid_t> pids_;
};

}  // namespace dgt::etcd::testing

#endif  // DGT_TESTS_ETCD_ETCD_CLUSTER_H_
