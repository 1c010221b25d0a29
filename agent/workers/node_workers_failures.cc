// NodeWorkers: rank restarts, failure publishing and the failure summary.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/workers/node_workers.h"
#include "common/logging.h"
#include "common/store_keys.h"

namespace dgt::agent {
namespace {

std::string Rfc3339Millis(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

}  // namespace

absl::Time NodeWorkers::RestartRank(const WorkerExit& e, int attempt) {
  auto spec = MakeSpec(e.local_rank, attempt);
  // A ready warm standby takes the rank, else a fresh process (WorkerGroup::StartReplacement).
  absl::StatusOr<pid_t> pid =
      spec.ok() ? group_->StartReplacement(*spec) : absl::StatusOr<pid_t>(spec.status());
  if (!pid.ok()) {
    spdlog::error("dgt-run: cannot restart rank {}: {}", e.rank, pid.status().message());
    sink_(lifecycle_->OnRankRestartFailed(e));
    return absl::InfinitePast();
  }
  const absl::Time started = absl::Now();
  hang_.Started(e.local_rank, e.rank, *pid);
  spdlog::info(
      "dgt-run: restarted rank {} (local rank {}) as pid {} with "
      "TORCHELASTIC_RESTART_COUNT={} ({} of --max-restarts={})",
      e.rank, e.local_rank, *pid, attempt, lifecycle_->restarts_used(), options_.max_restarts);
  PublishRestart(e.rank, attempt);
  return started;
}

void NodeWorkers::EnsurePublisher() {
  if (!publisher_) {
    // On the loop: its callbacks run on io_.
    publisher_ =
        std::make_unique<FailurePublisher>(io_.get_executor(), FailurePublisher::Options{});
  }
}

void NodeWorkers::PublishFailure(const WorkerExit& e, bool restart, int attempt) {
  EnsurePublisher();
  WorkerGroup* group = group_.get();
  const absl::Time start = absl::Now();
  publisher_->Publish(
      assignment_.master_addr, assignment_.master_port, e.rank,
      absl::StrCat("rank ", e.rank, " ", e.Describe()),
      [this, e, restart, attempt, group, start](const absl::StatusOr<int>& generation) {
        const absl::Time published = absl::Now();
        if (generation.ok()) {
          spdlog::info("dgt-run: published the failure of rank {}: recovery generation {} ({} ms)",
                       e.rank, *generation, absl::ToInt64Milliseconds(absl::Now() - start));
        } else {
          // Survivors still notice through their communicators, and a replacement opens the
          // generation itself.
          spdlog::warn("dgt-run: cannot publish the failure of rank {}: {}", e.rank,
                       generation.status().message());
        }
        if (!restart) return;
        if (lifecycle_->OnFailurePublished(/*group_current=*/group_.get() == group)) {
          const absl::Time started = RestartRank(e, attempt);
          if (started != absl::InfinitePast()) {
            // Wall-clock nanoseconds, to line up with the trainers' EVENT lines.
            spdlog::info(
                "dgt-run: recovery timeline of rank {}: exit_seen_ns={} publish_start_ns={} "
                "published_ns={} replacement_started_ns={}",
                e.rank, absl::ToUnixNanos(e.time), absl::ToUnixNanos(start),
                absl::ToUnixNanos(published), absl::ToUnixNanos(started));
          }
        }
        if (group_) sink_(lifecycle_->OnWorkersIdle(group_->alive(), env_.clock->Now()));
      });
}

void NodeWorkers::PublishRestart(int rank, int generation) {
  // A torch TCPStore client reads it as store.get("dgt/restart/<rank>").
  PublishRestartGeneration(io_.get_executor(), assignment_.master_addr, assignment_.master_port,
                           rank, generation);
}

NodeWorkers::Failure NodeWorkers::MakeFailure(const WorkerExit& e) const {
  Failure f;
  f.exit = e;
  if (!log_root_.empty()) {
    f.error_file = (std::filesystem::path(log_root_) / absl::StrCat("attempt_", e.attempt) /
                    absl::StrCat(e.local_rank) / "error.json")
                       .string();
    f.error = ReadTorchErrorFile(f.error_file);
  }
  if (const HangReport* hang = hang_.ReportFor(e.pid)) f.hang = *hang;
  return f;
}

std::string NodeWorkers::Summary(const std::string& host) const {
  if (failures_.empty()) return "";
  auto describe = [this, &host](const Failure& f, bool full) {
    const WorkerExit& e = f.exit;
    std::string exit = e.signal != 0
                           ? absl::StrCat("signal ", e.signal, " (", SignalName(e.signal), ")")
                           : absl::StrCat("exit code ", e.exit_code);
    std::string text =
        absl::StrCat("  rank ", e.rank, " (local rank ", e.local_rank, "), host ", host,
                     " (node rank ", assignment_.node_rank, "), pid ", e.pid, ", attempt ",
                     e.attempt, "\n", "    ", exit, " at ", Rfc3339Millis(e.time), "\n");
    if (f.hang) {
      absl::StrAppend(&text, "    hung: ", f.hang->reason, "\n");
      if (!f.hang->stacks.empty() && !full) {
        absl::StrAppend(&text, "    stacks: ", f.hang->stacks_file, "\n");
      } else if (!f.hang->stacks.empty()) {
        std::string stacks = f.hang->stacks;
        while (!stacks.empty() && stacks.back() == '\n') stacks.pop_back();
        absl::StrAppend(&text, "    stacks (", f.hang->stacks_file, "):\n      ",
                        absl::StrJoin(absl::StrSplit(stacks, '\n'), "\n      "), "\n");
      } else {
        absl::StrAppend(&text, "    ", f.hang->note, "\n");
      }
    }
    if (f.error) {
      absl::StrAppend(&text, "    error file: ", f.error_file, "\n",
                      "    message: ", f.error->message, "\n");
      if (full && !f.error->traceback.empty()) {
        std::string tb = f.error->traceback;
        while (!tb.empty() && tb.back() == '\n') tb.pop_back();
        absl::StrAppend(&text, "    traceback:\n      ",
                        absl::StrJoin(absl::StrSplit(tb, '\n'), "\n      "), "\n");
      }
    } else if (full && !e.stderr_tail.empty()) {
      absl::StrAppend(&text, "    error file: <none written>; last stderr lines:\n      ",
                      absl::StrJoin(e.stderr_tail, "\n      "), "\n");
    }
    return text;
  };
  std::string text = absl::StrCat("dgt-run: run '", options_.run_id, "' failed\n",
                                  "Root cause (first failure):\n", describe(failures_[0], true));
  if (failures_.size() > 1) {
    absl::StrAppend(&text, "Other failures:\n");
    for (size_t i = 1; i < failures_.size(); ++i) {
      absl::StrAppend(&text, describe(failures_[i], false));
    }
  }
  if (!recovered_failures_.empty()) {
    absl::StrAppend(&text, "Restarted in place before that (--restart-policy rank):\n");
    bool peer_failed_after = false;  // Not just the restarted rank failing again.
    for (const Failure& f : recovered_failures_) {
      absl::StrAppend(&text, describe(f, false));
      peer_failed_after |= f.exit.rank != failures_[0].exit.rank;
    }
    if (peer_failed_after) {
      absl::StrAppend(&text,
                      "  note: a worker that cannot rebuild its communicator around a replaced "
                      "peer (torch.distributed process groups cannot) fails when one is "
                      "restarted; use --restart-policy group for such trainers, or one that "
                      "rebuilds it: Python's dgt.recovery (Trainer) or "
                      "dgt::worker::ElasticGroup (docs/RECOVERY.md)\n");
    }
  }
  return text;
}

void NodeWorkers::RecordFailure(const WorkerExit& exit, bool recovered, bool root_cause) {
  std::vector<Failure>& list = recovered ? recovered_failures_ : failures_;
  list.insert(root_cause ? list.begin() : list.end(), MakeFailure(exit));
}

std::string NodeWorkers::TakeSummary(const std::string& host) {
  if (failures_.empty()) return "";
  std::string summary = Summary(host);
  KeepTempLogRootForSummary(&summary);
  return summary;
}

void NodeWorkers::KeepTempLogRootForSummary(std::string* summary) {
  if (!log_root_is_temp_ || log_root_.empty()) return;
  bool names_a_file = false;
  for (const auto* list : {&failures_, &recovered_failures_}) {
    for (const Failure& f : *list) {
      names_a_file |= f.error.has_value() || (f.hang && !f.hang->stacks_file.empty());
    }
  }
  if (!names_a_file) return;
  // The summary names error files in the temporary log directory: removing it at exit would
  // leave the user paths that no longer exist.
  log_root_is_temp_ = false;
  if (absl::Status s = watchdog_.KeepOnExit(); !s.ok()) {
    spdlog::warn("dgt-run: the watchdog may still remove {}: {}", log_root_, s.message());
  }
  absl::StrAppend(summary, "kept: ", log_root_,
                  " (the temporary log directory, for the error file(s) named above)\n");
}

}  // namespace dgt::agent
