// HangMonitor: hang detection on the agent's loop (docs/RECOVERY.md "Hang detection"). Owns the
// launch's ProgressFile, reads every watched worker's slot each HangDetector::PollPeriod() and
// hands the readings to the HangDetector. A hung worker is logged, its stacks are written (the
// dgt package's faulthandler dump on the stacks signal, waited for at most `dump_wait`; a stopped
// process cannot run it and gets a note instead), then its process group gets SIGKILL: its exit
// is an ordinary worker failure, so the restart policy applies unchanged. The report (reason and
// stacks) stays for the failure summary (ReportFor), and the order in which workers were declared
// hung for its root cause (DeclaredOrder): workers killed together are not reaped in that order.
//
// Thread-compatible: used from the agent's event loop only.
#ifndef DGT_AGENT_PROGRESS_HANG_MONITOR_H_
#define DGT_AGENT_PROGRESS_HANG_MONITOR_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/lifecycle/restart_policy.h"
#include "agent/progress/hang_detector.h"
#include "agent/progress/progress_file.h"
#include "agent/workers/process_launcher.h"
#include "agent/workers/worker_env.h"
#include "boost/asio.hpp"

namespace dgt::agent {

// Why a worker was killed as hung, for the failure summary.
struct HangReport {
  std::string reason;       // Hang::Describe(), plus " (stopped: SIGSTOP)" for a stopped one.
  std::string stacks_file;  // Where its stacks were written; empty when none were.
  std::string stacks;       // The dump (at most kMaxStacksBytes), or empty.
  std::string note;         // Why there are no stacks, when there are none.
};

// The most of a stack dump kept for the summary.
inline constexpr size_t kMaxStacksBytes = 64 * 1024;

// The state letter of /proc/<pid>/stat ('R', 'S', 'T', ...), or 0 when it cannot be read.
char ProcessState(pid_t pid);

class HangMonitor {
 public:
  struct Options {
    HangDetector::Options detector;
    // The longest wait for a stack dump to be written before the kill.
    absl::Duration dump_wait = absl::Seconds(1);
  };

  // `clock` and `launcher` are not owned and outlive the monitor.
  HangMonitor(boost::asio::io_context& io, Options options, const Clock* clock,
              ProcessLauncher* launcher);
  ~HangMonitor();

  bool enabled() const { return detector_.enabled(); }

  // Creates the progress file `<dir>/progress` with `slots` slots. A no-op when not enabled.
  // Errors: as ProgressFile::Create.
  absl::Status Open(const std::string& dir, int slots);

  // Before `local_rank`'s process starts: zeroes its slot and adds the channel's variables to
  // `env` (DGT_PROGRESS_FILE, DGT_PROGRESS_SLOT, and with a non-empty `stacks_file`
  // DGT_STACKS_SIGNAL and DGT_STACKS_FILE). A no-op until Open.
  void Prepare(int local_rank, const std::string& stacks_file, EnvMap* env);
  // `local_rank`'s process `pid` (global rank `rank`) started: it is watched from now on.
  void Started(int local_rank, int rank, pid_t pid);
  // Process `pid` of `local_rank` exited: no longer watched, and its DeclaredOrder is 0 again.
  void Exited(int local_rank, pid_t pid);
  // Every worker's process is being stopped (a group stop, the agent's end): none is watched
  // until the next Started.
  void ForgetAll();
  // The report of `pid` when it was declared hung (its stacks once it was killed); null
  // otherwise.
  const HangReport* ReportFor(pid_t pid) const;
  // In which order `pid` was declared hung: 1 for the first worker this monitor declared, 2 for
  // the next, ...; ranks declared by the same reading in BlameBefore's order. 0 when it was not,
  // or once it exited (Exited).
  int DeclaredOrder(pid_t pid) const;
  // When (wall clock) `pid` was declared hung; InfinitePast when DeclaredOrder is 0. Its kill
  // follows the stack dump, up to `dump_wait` later.
  absl::Time DeclaredAt(pid_t pid) const;
  // Stops polling (the agent is ending).
  void Stop();

 private:
  struct Watched {
    int rank = 0;
    pid_t pid = 0;
    std::string stacks_file;
  };
  void ArmPoll();
  void Poll();
  void OnHang(const Hang& hang, const Watched& w);
  // Waits (on the loop) until the stack dump in `file` stops growing, at most until `deadline`,
  // then kills `w`'s group.
  void AwaitDump(Watched w, HangReport report, absl::Time deadline, int64_t last_size);
  void Kill(const Watched& w, HangReport report);

  boost::asio::io_context& io_;
  Options options_;
  const Clock* clock_;
  ProcessLauncher* launcher_;
  HangDetector detector_;
  std::unique_ptr<ProgressFile> file_;
  std::map<int, Watched> watched_;           // By local rank.
  std::map<int, std::string> stacks_files_;  // Prepared, by local rank.
  std::map<pid_t, HangReport> reports_;
  struct Declared {
    int order = 0;
    absl::Time at;  // Wall clock.
  };
  std::map<pid_t, Declared> declared_;  // By pid.
  int declared_count_ = 0;
  boost::asio::steady_timer poll_timer_;
  bool polling_ = false;
  bool stopped_ = false;
  // Expires with the monitor: posted work checks it.
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_PROGRESS_HANG_MONITOR_H_
