// How dgt-agent runs a job (the jobs contract): the dgt-run command line, environment and
// directories for a StartJob, and the run-as user they are started as. Pure functions of their
// inputs (no process is started here; job_runner.h starts it), so tests pin the exact argv.
#ifndef DGT_DAEMON_JOB_COMMAND_H_
#define DGT_DAEMON_JOB_COMMAND_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/config.h"
#include "dgt/jobs/v1/jobs.pb.h"

namespace dgt::daemon {

// The longest job id, in bytes (the contract: [a-z0-9-], <= 64).
inline constexpr size_t kMaxJobIdBytes = 64;

// A job id per the contract: 1..64 bytes of [a-z0-9-]. It names a directory under work_dir, so a
// refused id is never used in a path.
// Errors: InvalidArgument naming the id.
absl::Status ValidateJobId(absl::string_view job_id);

// A user's identity, looked up once in the daemon (getpwnam/getgrouplist are not async-signal
// safe, so the forked child only calls setgroups/setgid/setuid with these values).
struct RunAsUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // Supplementary groups (initgroups' list), the primary included.
  std::string home;
  std::string shell;
};

// Errors: NotFound for an unknown user; PermissionDenied for uid 0 without `allow_root`.
absl::StatusOr<RunAsUser> LookupRunAsUser(const std::string& name, bool allow_root);

// Everything needed to start one job's dgt-run.
struct JobLaunch {
  std::vector<std::string> argv;  // argv[0] is the dgt-run path.
  std::vector<std::string> env;   // "NAME=value", sorted by name.
  std::string cwd;                // code_dir, else job_dir.
  std::string job_dir;            // <work_dir>/<job id>
  std::string log_dir;            // <job_dir>/logs (dgt-run --log-dir)
  std::string dgt_run_log;        // <job_dir>/dgt-run.log (dgt-run's own stdout and stderr)
};

// Builds the launch of `start` on this node:
//   <dgt_run> --nnodes=N --nproc-per-node=P --rdzv-backend=dgt --rdzv-endpoint=E --rdzv-id=ID
//     --node-id=<node_name> [--local-addr=<advertise_address>] --max-restarts=M
//     --restart-policy=R --log-dir <job_dir>/logs --redirects 3
//     [--rdzv-tls-ca=F --rdzv-tls-cert=F --rdzv-tls-key=F] [--rdzv-token-file=F]
//     [--distribution tensorflow --worker-count W --parameter-server-count S]
//     --no-python -- /bin/sh -c <command>
// (--nproc-per-node is left out for tensorflow without process_count_per_instance: dgt-run
// derives it from --worker-count.) The environment holds PATH (`daemon_env`'s, else
// /usr/local/bin:/usr/bin:/bin), HOME, USER, LOGNAME and SHELL of `user`, LANG, LC_ALL and TZ
// when `daemon_env` has them, then the job's environment_variables (which win); nothing else of
// the daemon's (NOTIFY_SOCKET, WATCHDOG_USEC, credentials) reaches the job.
// Errors: InvalidArgument for a bad job id, a count < 1, an unknown distribution or restart
// policy, "mpi", a bad variable name, a relative code_dir, an empty command or endpoint.
absl::StatusOr<JobLaunch> BuildJobLaunch(const AgentConfig& config,
                                         const dgt::jobs::v1::StartJob& start,
                                         const RunAsUser& user,
                                         const std::map<std::string, std::string>& daemon_env);

}  // namespace dgt::daemon

#endif  // DGT_DAEMON_JOB_COMMAND_H_
