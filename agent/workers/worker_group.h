// WorkerGroup: starts a node's worker processes and supervises them without polling. Each worker
// leads its own process group, dies with the agent (PR_SET_PDEATHSIG; the GroupWatchdog handles
// its descendants), and has its stdout and stderr forwarded line by line, prefixed with its
// rank, to the agent's console and/or to per-worker log files (torchrun -r/-t). Text ending in
// '\r' (a progress bar) reaches the console as it comes, not at the next newline. A worker's exit
// is an event (a pidfd becoming readable in the agent's io_context). When a worker exits, what
// is left of its process group is killed.
//
// Warm standbys (`dgt-run --standby-workers N`, docs/RECOVERY.md "Warm standbys"): extra
// processes of the job's command, started with DGT_STANDBY=1 and without a rank, that wait in
// `import dgt.recovery` (python/dgt/standby.py) until the group hands one of them the
// environment of a rank to replace. The protocol, over a Unix socketpair the standby inherits
// as descriptor 3 (DGT_STANDBY_FD): the standby writes "ready\n" once it waits; the group writes
// one line of JSON, {"env": {"KEY": "VALUE", ...}, "argv_append": ["--local_rank=1"]}, and
// closes its end. A standby exits on EOF (the group stopped it or the agent is gone) and on the
// agent's death (PR_SET_PDEATHSIG). Standbys are not workers: alive(), drained(), Signal() and
// the exit callback ignore them until one is activated.
//
// The fork server (`--fork-server on`, docs/RECOVERY.md "Fork server"; agent/workers/
// fork_server.h): one pre-imported Python process that forks a replacement. A forked worker is a
// worker like any other (pidfd exit event, process group, output, log files); its exit status
// comes from the server, which is its parent.
//
// Thread-compatible: use from the io_context's thread only.
#ifndef DGT_AGENT_WORKERS_WORKER_GROUP_H_
#define DGT_AGENT_WORKERS_WORKER_GROUP_H_

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/workers/process_launcher.h"
#include "agent/workers/worker_exit.h"
#include "boost/asio.hpp"

namespace dgt::agent {

class ForkServer;

// One file collecting, from several workers, the output lines that contain any of `needles`,
// each with its worker's console prefix: torchrun 2.13's --duplicate-stdout-filters /
// --duplicate-stderr-filters (<attempt dir>/filtered_stdout.log). Shared by the workers of an
// attempt; the file is closed when the last holder is gone. Each line is one write(2), so lines
// of different workers do not interleave.
class FilteredLog {
 public:
  // Creates (truncates) `path`.
  // Errors: as open(2) (NotFound, PermissionDenied, ...), naming the path.
  static absl::StatusOr<std::shared_ptr<FilteredLog>> Open(const std::string& path,
                                                           std::vector<std::string> needles);
  ~FilteredLog();
  FilteredLog(const FilteredLog&) = delete;
  FilteredLog& operator=(const FilteredLog&) = delete;

  // Writes `prefix`, `line` and '\n' when `line` contains any needle (an empty needle matches
  // every line, as in torchrun).
  void MaybeWrite(absl::string_view prefix, absl::string_view line);

 private:
  FilteredLog(int fd, std::vector<std::string> needles);
  const int fd_;
  const std::vector<std::string> needles_;
};

struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  int attempt = 0;  // The TORCHELASTIC_RESTART_COUNT it starts with.
  // argv[0] is resolved against PATH before any fork.
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE".
  // Log files (created, or appended to); empty for none. Lines go there without the rank prefix.
  // Appended to, not truncated: a round that keeps its restart count (nodes joined or left, as
  // torchrun's membership-change rounds) starts its workers with the same attempt_<n> files, and
  // the earlier round's output stays before the new one's (torchrun 2.13's DefaultLogsSpecs
  // deletes the attempt directory instead).
  std::string stdout_file;
  std::string stderr_file;
  // Whether each stream also reaches the agent's console, each line prefixed with `prefix`
  // (empty: "[rank<rank>]: ").
  bool stdout_console = true;
  bool stderr_console = true;
  std::string prefix;
  // Where lines of each stream are duplicated when they match its filters; null for none.
  std::shared_ptr<FilteredLog> stdout_filtered;
  std::shared_ptr<FilteredLog> stderr_filtered;
};

class WorkerGroup {
 public:
  using ExitCallback = std::function<void(const WorkerExit&)>;
  // Called with each worker's process group id when it starts, and when it is reaped (after
  // its group's leftovers were killed). For the GroupWatchdog.
  using GroupCallback = std::function<void(pid_t)>;

  // `launcher` defaults to DefaultProcessLauncher() (fork/exec); not owned.
  WorkerGroup(boost::asio::io_context& io, ExitCallback on_exit, GroupCallback on_spawn = nullptr,
              GroupCallback on_reaped = nullptr, ProcessLauncher* launcher = nullptr);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts one process per spec. On error the workers already started are killed (their exit
  // events follow).
  // Errors: NotFound for a missing executable; Internal when fork/pipe fail.
  absl::Status Start(const std::vector<WorkerSpec>& specs);

  // Before any worker started: the spec that standbys and the fork server start like (as the
  // first StartOne's would be), for a group that warms up before its round (a hot spare's).
  // Nothing once a worker started.
  void Prepare(const WorkerSpec& spec);

  // Starts one more worker (a replacement under --restart-policy rank). Returns its pid.
  // Errors: as Start.
  absl::StatusOr<pid_t> StartOne(const WorkerSpec& spec);

  // Keeps `count` warm standbys running from now on (none once StopStandbys ran), each started
  // like the first worker this group started: its argv without a trailing "--local_rank=N", its
  // env without the rank's variables (kStandbyDroppedEnv) plus DGT_STANDBY=1 and DGT_STANDBY_FD,
  // output on the console as that worker's, prefixed "[standby<k>]: " (no log files). A standby
  // that exits before it reported ready turns standbys off for this group (the script does not
  // import dgt.recovery, or fails without a rank); one that exits later is replaced, at most
  // `count` times. At most kStandbyBatch standbys start in this call, the rest from the event
  // loop, kStandbyBatch per turn (a stop between batches starts no more).
  // Errors: FailedPrecondition when no worker was started yet, or when that worker's argv[0] is
  // not a Python interpreter (file name "python[0-9.]*": any other program would run its whole
  // job without a rank; standbys are then off for good); as Start (for this call's batch;
  // a later batch's error is logged and turns standbys off).
  absl::Status StartStandbys(int count);

  // Hands `spec` to a ready standby, which from then on is that worker (exit event, log files,
  // console prefix, filtered logs, counted by alive()); starts another standby in its place
  // (from the event loop, right after).
  // Returns its pid. Errors: NotFound when no standby is ready; Unavailable when the chosen one
  // could not take it (the channel broke; it is killed); FailedPrecondition when `spec.argv`
  // does not extend the standbys' argv; as StartOne for the log files.
  absl::StatusOr<pid_t> ActivateStandby(const WorkerSpec& spec);

  // Starts the fork server for this group's replacements, like the first worker this group
  // started (ForkServer::Start). Idempotent. Errors: FailedPrecondition when no worker was
  // started yet; as ForkServer::Start.
  absl::Status StartForkServer();
  bool fork_server_ready() const;
  // SIGKILL to the fork server (its children die with it); no more forks. For a group that a new
  // round replaces: a retired group is kept until the agent exits, its server need not be.
  void StopForkServer();

  // A replacement under --restart-policy rank: ActivateStandby when a standby is ready, else a
  // child of the fork server when it is ready, else (or when either fails) StartOne.
  // Errors: as StartOne.
  absl::StatusOr<pid_t> StartReplacement(const WorkerSpec& spec);

  // SIGKILL to every standby's process group; starts no more. Idempotent.
  void StopStandbys();

  // Standbys running, and those of them that reported ready.
  int standbys() const;
  int standbys_ready() const;

  // Sends `sig` to the process group of every live worker (not to standbys).
  void Signal(int sig);

  // `sig` (SIGTERM unless told) to every live worker's group, then SIGKILL to the groups still
  // there after `grace`. Stops the standbys (StopStandbys).
  void Stop(absl::Duration grace, int sig = SIGTERM);

  // SIGKILL to every worker's process group, exited ones included (their leftovers), and to the
  // standbys'.
  void KillAll();

  int alive() const { return alive_; }
  // True once every worker exited and its output pipes reached EOF.
  bool drained() const { return alive_ == 0 && open_pipes_ == 0; }
  // Runs `callback` once drained() holds (at once if it already does).
  void OnDrained(std::function<void()> callback);

  // Where forwarded worker output goes instead of the agent's stdout and stderr (for tests).
  // Before Start.
  void SetConsole(int stdout_fd, int stderr_fd);

 private:
  struct Worker;
  void WatchExit(Worker& w);
  void Pump(Worker& w, bool is_stderr);
  void PipeClosed(Worker& w);
  absl::Status LaunchStandby();
  // Starts standbys up to the target, kStandbyBatch now and the rest from the event loop.
  absl::Status LaunchStandbyBatch();
  void ReadChannel(Worker& w);
  void OnStandbyExit(Worker& w, int status);
  void TopUpStandbysLater();
  // A worker from its started process (StartOne, StartForked); watches its exit and output.
  Worker& AddWorker(const WorkerSpec& spec, pid_t pid, const std::array<int, 2>& files, int exit_fd,
                    int stdout_fd, int stderr_fd);
  // Reports a worker's exit (the exit callback) once its status is known.
  void Finish(Worker& w, int status);
  absl::StatusOr<pid_t> StartForked(const WorkerSpec& spec);
  void OnForkedExit(pid_t pid, int status);

  boost::asio::io_context& io_;
  ProcessLauncher* launcher_;
  ExitCallback on_exit_;
  GroupCallback on_spawn_;
  GroupCallback on_reaped_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int alive_ = 0;
  int open_pipes_ = 0;
  boost::asio::steady_timer kill_timer_;
  std::function<void()> on_drained_;
  int console_out_ = STDOUT_FILENO;
  int console_err_ = STDERR_FILENO;
  // Standbys: the spec they start from (set by the first StartOne), how many to keep, how many
  // more unexpected exits are replaced, whether they are off, and the next "[standby<k>]" index.
  std::unique_ptr<WorkerSpec> standby_spec_;
  std::unique_ptr<WorkerSpec> first_spec_;
  int standby_target_ = 0;
  int standby_respawns_left_ = 0;
  bool standbys_off_ = false;
  int next_standby_index_ = 0;
  bool standby_batch_posted_ = false;  // LaunchStandbyBatch's next batch is posted.
  std::unique_ptr<ForkServer> fork_server_;
  bool fork_fallback_logged_ = false;  // "the fork server is not ready" was logged.
  // Expires with the group: posted work checks it.
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

// Standbys started per turn of the event loop (WorkerGroup::StartStandbys): as the agent's
// kSpawnBatch for workers.
inline constexpr int kStandbyBatch = 32;

// Variables of a worker's environment that belong to its rank, left out of a standby's
// (BuildWorkerEnv's per-rank keys): it learns them when activated.
inline constexpr const char* kStandbyDroppedEnv[] = {"RANK",
                                                     "LOCAL_RANK",
                                                     "ROLE_RANK",
                                                     "TORCHELASTIC_RESTART_COUNT",
                                                     "TORCHELASTIC_ERROR_FILE",
                                                     "OMPI_COMM_WORLD_RANK",
                                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                                     "TF_CONFIG",
                                                     "DGT_PROGRESS_SLOT",
                                                     "DGT_STACKS_FILE"};

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_WORKER_GROUP_H_
