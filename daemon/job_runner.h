// Starts and stops jobs' dgt-run processes for dgt-agent. Each dgt-run runs as the job's user in
// a session (process group) of its own, with PR_SET_PDEATHSIG(SIGKILL) set after the user switch
// (a uid change clears it), so that a crashed daemon leaves no dgt-run behind; dgt-run's workers
// carry the same signal against dgt-run (agent/process_launcher.cc), and under systemd
// KillMode=control-group takes anything left.
//
// Cancel: SIGTERM to dgt-run's process group (dgt-run stops its workers gracefully), then at the
// deadline SIGKILL to every process group seen below dgt-run (the workers run in sessions of
// their own), at cancel time or at the deadline, and to dgt-run's.
//
// Not thread-safe: one thread (the daemon's loop) calls every method. Start() must be called
// from a thread that lives as long as the jobs (PR_SET_PDEATHSIG fires when the forking thread
// ends).
#ifndef DGT_DAEMON_JOB_RUNNER_H_
#define DGT_DAEMON_JOB_RUNNER_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/job_command.h"

namespace dgt::daemon {

// A process-tree snapshot: the process groups of `root` and of every process below it
// (/proc/<pid>/stat's ppid and pgrp fields). Empty when `root` is gone.
std::set<pid_t> ProcessGroupsBelow(pid_t root);

// The file in a job dir naming the job that made it: its JobInfo.uid and a newline.
inline constexpr char kJobUidFile[] = "job-uid";

// Makes `job_dir` (mode 0750) the dir of the job with `uid`, so that a job id never names two
// jobs' logs (a memory-backend service restarted with no job running counts ids from job-1
// again). When it exists holding another uid in <job_dir>/job-uid, or no such file, it is first
// renamed to <job_dir>.<its uid, else "old">.<n> (n from 1: the first free name). With the same
// uid it is kept as it is (a node starting its own lost part of the job again keeps the earlier
// attempts' output). Then writes <job_dir>/job-uid (0644; written to a temporary file and
// renamed over). `uid` empty (a service that sends no uid): the dir is used as it is and no file is
// written. Returns where the earlier dir went, "" when nowhere. Errors: the errno's status naming
// the path (mkdir, rename, the uid file).
absl::StatusOr<std::string> PrepareJobDir(const std::string& job_dir, const std::string& uid);

// The line of dgt-run's own log (<job dir>/dgt-run.log) that says why it ended, for the job's
// reason: the last non-empty line of its last 4096 bytes that is not an spdlog info, debug or
// trace line ("[time] [info] ..."); "" when there is none (a dgt-run killed by a signal often
// leaves none) or the file cannot be read.
std::string LastReasonLine(const std::string& path);

class JobRunner {
 public:
  struct Exit {
    std::string job_id;
    // dgt-run's exit status, 128 + N when signal N ended it.
    int exit_code = 0;
    // dgt-run's last non-empty line of output (<job_dir>/dgt-run.log).
    std::string message;
    bool cancelled = false;
  };

  JobRunner() = default;
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Creates <job_dir> (PrepareJobDir with `uid`; owned by `user`; <work_dir> is created 0755
  // when missing), opens
  // <job_dir>/dgt-run.log for dgt-run's output, and forks and execs launch.argv as `user`
  // (setgroups, setgid, setuid in the child; skipped when the daemon already runs as user.uid).
  // Errors: AlreadyExists for a running job id; FailedPrecondition when the daemon is not root
  // and `user` is another user; the errno's status naming the path for a directory or file that
  // cannot be made. A failed exec shows as an Exit with code 127 (126: the user switch or the
  // chdir failed), its reason in `message`.
  absl::Status Start(const std::string& job_id, const JobLaunch& launch, const RunAsUser& user,
                     const std::string& uid = "");

  bool Has(const std::string& job_id) const { return jobs_.count(job_id) > 0; }
  std::vector<std::string> RunningIds() const;
  size_t size() const { return jobs_.size(); }

  // SIGTERM now, SIGKILL at now + grace (grace <= 0: at once). False for an unknown job. A
  // second cancel keeps the earlier deadline.
  bool Cancel(const std::string& job_id, absl::Duration grace, absl::Time now);
  void CancelAll(absl::Duration grace, absl::Time now);

  // Sends due SIGKILLs and reaps: returns the jobs whose dgt-run ended. With `reap_any` it reaps
  // any child (waitpid(-1)), also orphans handed to this process as a child subreaper; without,
  // only each job's dgt-run (while another thread waits for a child of its own: a health check).
  std::vector<Exit> Poll(absl::Time now, bool reap_any = true);

  // The earliest pending SIGKILL, if any.
  std::optional<absl::Time> NextDeadline() const;

 private:
  struct Job {
    pid_t pid = -1;
    std::string dgt_run_log;
    std::optional<absl::Time> kill_at;
    bool cancelled = false;
    bool killed = false;
    std::set<pid_t> groups;  // Seen below dgt-run at cancel time.
  };
  void Kill(Job& job);

  std::map<std::string, Job> jobs_;
};

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_JOB_RUNNER_H_
