// WorkerGroup's fork server (--fork-server on; docs/RECOVERY.md "Fork server"): replacements
// forked by one pre-imported Python process (agent/workers/fork_server.h).
#include <signal.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/workers/fork_server.h"
#include "agent/workers/worker_group.h"
#include "agent/workers/worker_group_internal.h"
#include "common/logging.h"

namespace dgt::agent {

absl::Status WorkerGroup::StartForkServer() {
  if (fork_server_ != nullptr) return absl::OkStatus();
  if (first_spec_ == nullptr) {
    return absl::FailedPreconditionError("the fork server starts like a worker: none was started");
  }
  ForkServer::Options options;
  options.launcher = launcher_;
  options.console_out = console_out_;
  options.console_err = console_err_;
  auto server = std::make_unique<ForkServer>(
      io_, options, [this](pid_t pid, int status) { OnForkedExit(pid, status); }, on_spawn_,
      on_reaped_);
  if (absl::Status s = server->Start(*first_spec_); !s.ok()) return s;
  fork_server_ = std::move(server);
  return absl::OkStatus();
}

bool WorkerGroup::fork_server_ready() const {
  return fork_server_ != nullptr && fork_server_->ready();
}

void WorkerGroup::StopForkServer() {
  if (fork_server_ != nullptr) fork_server_->Kill();
}

absl::StatusOr<pid_t> WorkerGroup::StartForked(const WorkerSpec& spec) {
  absl::StatusOr<std::array<int, 2>> opened = OpenLogFiles(spec);
  if (!opened.ok()) return opened.status();
  const std::array<int, 2> files = *opened;
  absl::StatusOr<ForkServer::Forked> forked = fork_server_->Fork(spec);
  if (!forked.ok()) {
    for (int fd : files) {
      if (fd >= 0) ::close(fd);
    }
    return forked.status();
  }
  if (on_spawn_) on_spawn_(forked->pid);
  Worker& w =
      AddWorker(spec, forked->pid, files, forked->exit_fd, forked->stdout_fd, forked->stderr_fd);
  w.forked = true;
  spdlog::info("dgt-run: {} rank {} (attempt {}) as pid {}, forked by the fork server",
               spec.attempt > 0 ? "restarted" : "started", spec.rank, spec.attempt, forked->pid);
  return forked->pid;
}

void WorkerGroup::OnForkedExit(pid_t pid, int status) {
  for (auto& w : workers_) {
    if (w->forked && w->pid == pid && !w->exited) {
      w->forked_status = status;
      if (w->ended) Finish(*w, status);
      return;
    }
  }
}

}  // namespace dgt::agent
