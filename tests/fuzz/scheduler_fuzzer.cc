// Stateful libFuzzer target over the FIFO gang scheduler of the jobs service (jobs/scheduler.h).
// The input decodes into a sequence of operations on up to 5 node daemons and the jobs they are
// sent: submits (1 to 3 nodes and 0 or 1 spare, with or without a label), cancels, registrations
// (listing the jobs the daemon still runs, or none after a crash), stream breaks, drains,
// `started` and `exited` updates (exit code 0 or not), and ticks of a simulated clock. After
// every step:
//   - no node is in two jobs: a StartJob goes only to a registered, not draining node that
//     carries the job's labels and runs no other job (its daemon's view), and a node the
//     scheduler has busy with a job is an active part of that job only (once: a part a spare
//     took is history);
//   - FIFO order holds among the jobs that fit: no job leaves the queue while one submitted
//     before it is still queued;
//   - a job in a terminal state (succeeded, failed, cancelled) never changes state again, and a
//     cancelled or finished job is never started;
// and at the end, once every job is cancelled and every daemon reported its exits or left, every
// job is in exactly one terminal state. A divergence aborts with what broke on stderr.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dgt/jobs/v1/jobs.pb.h"
#include "jobs/scheduler.h"

namespace {

namespace v1 = dgt::jobs::v1;
using dgt::jobs::Action;
using dgt::jobs::Scheduler;
using dgt::jobs::SchedulerOptions;

constexpr int kNodes = 5;
constexpr int kMaxSteps = 64;

// The steps of the current input, printed with a divergence (DGT_FUZZ_TRACE=1 only: it costs).
std::string* trace = nullptr;

[[noreturn]] void Diverge(const std::string& what) {
  if (trace != nullptr) std::fprintf(stderr, "%s", trace->c_str());
  std::fprintf(stderr, "scheduler_fuzzer divergence: %s\n", what.c_str());
  std::abort();
}

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// A node daemon as the scheduler's peer sees it.
struct Daemon {
  std::string name;
  std::string label;  // Its "pool" label: "a" or "b".
  bool registered = false;
  bool draining = false;
  std::map<std::string, v1::StartJob> running;  // Jobs it runs (StartJob received, not exited).
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider* in) : in_(in), scheduler_(Options()) {
    for (int i = 0; i < kNodes; ++i) {
      daemons_[i].name = absl::StrCat("node", i);
      daemons_[i].label = in_->ConsumeBool() ? "a" : "b";
    }
  }

  void Run() {
    for (int step = 0; step < kMaxSteps && in_->remaining_bytes() > 0; ++step) {
      Step();
      Check();
    }
    Finish();
  }

 private:
  static SchedulerOptions Options() {
    SchedulerOptions o;
    o.rdzv_endpoint = "10.0.0.1:29400";
    o.lost_node_grace = absl::Seconds(10);
    return o;
  }

  void Step() {
    Daemon& d = daemons_[in_->ConsumeIntegralInRange<int>(0, kNodes - 1)];
    const int op = in_->ConsumeIntegralInRange<int>(0, 9);
    if (trace != nullptr) {
      absl::StrAppend(trace, "t=", absl::ToUnixSeconds(now_), " ", d.name, " op ", op, "\n");
    }
    switch (op) {
      case 0:
      case 1:
        Submit();
        return;
      case 2: {  // Cancel a job by id (possibly unknown or finished).
        const int n = in_->ConsumeIntegralInRange<int>(1, static_cast<int>(submitted_.size()) + 1);
        Cancel(absl::StrCat("job-", n));
        return;
      }
      case 3:
        Register(d, /*crashed=*/in_->ConsumeBool());
        return;
      case 4:
        if (d.registered) {
          d.registered = false;
          std::vector<Action> out;
          scheduler_.Deregister(d.name, now_, &out);
          Deliver(out);
        }
        return;
      case 5:
        if (d.registered && !d.draining) {
          d.draining = true;
          std::vector<Action> out;
          scheduler_.Drain(d.name, now_, &out);
          Deliver(out);
        }
        return;
      case 6:
      case 7: {  // An update for one of its jobs: started, or exited with a code.
        if (!d.registered || d.running.empty()) return;
        auto it = d.running.begin();
        std::advance(it, in_->ConsumeIntegralInRange<size_t>(0, d.running.size() - 1));
        v1::JobUpdate u;
        u.set_job_id(it->first);
        if (in_->ConsumeBool()) {
          u.set_event(v1::JOB_EVENT_STARTED);
        } else {
          u.set_event(v1::JOB_EVENT_EXITED);
          u.set_exit_code(in_->ConsumeBool() ? 0 : 1);
          u.set_message("dgt-run exited");
          d.running.erase(it);
        }
        Update(d, u);
        return;
      }
      default: {
        now_ += absl::Seconds(in_->ConsumeIntegralInRange<int>(0, 15));
        std::vector<Action> out;
        scheduler_.Tick(now_, &out);
        Deliver(out);
        return;
      }
    }
  }

  void Submit() {
    v1::JobSpec spec;
    spec.set_command("python train.py");
    spec.set_instance_count(in_->ConsumeIntegralInRange<int>(1, 3));
    spec.mutable_distribution()->set_process_count_per_instance(1);
    spec.set_max_restarts(in_->ConsumeIntegralInRange<int>(0, 1));
    spec.set_spare_instances(in_->ConsumeIntegralInRange<int>(0, 1));
    if (in_->ConsumeBool()) (*spec.mutable_node_labels())["pool"] = in_->ConsumeBool() ? "a" : "b";
    std::vector<Action> out;
    absl::StatusOr<std::string> id = scheduler_.Submit(spec, now_, &out);
    if (!id.ok()) Diverge(absl::StrCat("a valid Submit failed: ", id.status().ToString()));
    if (*id != absl::StrCat("job-", submitted_.size() + 1)) {
      Diverge(absl::StrCat("job id ", *id, " after ", submitted_.size(), " submits"));
    }
    submitted_.push_back(*id);
    Deliver(out);
  }

  void Cancel(const std::string& id) {
    std::vector<Action> out;
    absl::StatusOr<v1::JobInfo> info = scheduler_.Cancel(id, 5, now_, &out);
    if (info.ok()) cancelled_.insert(id);
    Deliver(out);
  }

  void Register(Daemon& d, bool crashed) {
    if (d.registered) {
      // A second daemon with a registered name is refused.
      v1::NodeHello hello;
      hello.set_node_name(d.name);
      std::vector<Action> out;
      if (scheduler_.Register(hello, now_, &out).code() != absl::StatusCode::kAlreadyExists) {
        Diverge(absl::StrCat("a second daemon named ", d.name, " is not refused"));
      }
      if (!out.empty()) Diverge("a refused registration sent actions");
      return;
    }
    if (crashed) d.running.clear();  // Its dgt-runs died with it.
    d.registered = true;
    d.draining = false;
    v1::NodeHello hello;
    hello.set_node_name(d.name);
    hello.set_hostname(d.name);
    hello.add_addresses("10.0.1.1");
    (*hello.mutable_labels())["pool"] = d.label;
    for (const auto& [id, start] : d.running) {
      hello.add_running_job_ids(id);
      *hello.add_running_jobs() = start;
    }
    std::vector<Action> out;
    if (absl::Status s = scheduler_.Register(hello, now_, &out); !s.ok()) {
      Diverge(absl::StrCat("Register of ", d.name, " failed: ", s.ToString()));
    }
    Deliver(out);
  }

  void Update(Daemon& d, const v1::JobUpdate& u) {
    if (trace != nullptr) absl::StrAppend(trace, "  update ", u.ShortDebugString(), "\n");
    std::vector<Action> out;
    // NotFound is allowed: the service may have dropped the job from this node (replaced it).
    absl::Status s = scheduler_.OnUpdate(d.name, u, now_, &out);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      Diverge(absl::StrCat("OnUpdate failed: ", s.ToString()));
    }
    Deliver(out);
  }

  Daemon& DaemonNamed(const std::string& name) {
    for (Daemon& d : daemons_) {
      if (d.name == name) return d;
    }
    Diverge(absl::StrCat("an action for unknown node '", name, "'"));
  }

  // Checks each action against the state before it and hands it to its daemon.
  void Deliver(const std::vector<Action>& out) {
    for (const Action& a : out) {
      if (trace != nullptr) {
        absl::StrAppend(trace, "  -> ", a.node, " ", a.message.ShortDebugString().substr(0, 120),
                        "\n");
      }
      Daemon& d = DaemonNamed(a.node);
      if (!d.registered) Diverge(absl::StrCat("an action for unregistered node ", d.name));
      if (a.message.has_start()) {
        const v1::StartJob& start = a.message.start();
        const std::string& id = start.job_id();
        if (d.draining) Diverge(absl::StrCat("StartJob ", id, " to draining node ", d.name));
        if (cancelled_.contains(id)) Diverge(absl::StrCat("cancelled job ", id, " started"));
        if (Terminal(last_state_[id])) Diverge(absl::StrCat("finished job ", id, " started"));
        for (const auto& [other, s] : d.running) {
          if (other != id) {
            Diverge(absl::StrCat("node ", d.name, " started on ", id, " while running ", other));
          }
        }
        const auto& labels = start.spec().node_labels();
        if (auto l = labels.find("pool"); l != labels.end() && l->second != d.label) {
          Diverge(absl::StrCat("job ", id, " needs pool ", l->second, ", node ", d.name, " is ",
                               d.label));
        }
        d.running[id] = start;
      } else if (a.message.has_cancel()) {
        // The daemon stops the job and reports its exit later (or at the end).
      }
    }
  }

  void Check() {
    std::vector<v1::JobInfo> jobs = scheduler_.Jobs();
    std::map<std::string, std::string> active;  // Node -> job it is an active part of.
    std::map<std::string, std::string> busy_with;
    for (const v1::NodeInfo& n : scheduler_.Nodes()) busy_with[n.node_name()] = n.job_id();
    bool queued_before = false;
    for (const v1::JobInfo& job : jobs) {
      const std::string& id = job.job_id();
      const v1::JobState was = last_state_[id];
      if (Terminal(was) && job.state() != was) {
        Diverge(absl::StrCat("job ", id, " left terminal state ", was, " for ", job.state()));
      }
      if (was == v1::JOB_STATE_QUEUED && job.state() != v1::JOB_STATE_QUEUED &&
          job.state() != v1::JOB_STATE_CANCELLED && queued_before) {
        Diverge(absl::StrCat("job ", id, " started while an earlier job is queued"));
      }
      if (cancelled_.contains(id) && (job.state() == v1::JOB_STATE_STARTING) &&
          was == v1::JOB_STATE_QUEUED) {
        Diverge(absl::StrCat("cancelled job ", id, " went to starting"));
      }
      if (job.state() == v1::JOB_STATE_QUEUED) queued_before = true;
      if (job.state() == v1::JOB_STATE_STARTING || job.state() == v1::JOB_STATE_RUNNING) {
        if (job.nodes_size() != job.spec().instance_count() + job.spec().spare_instances()) {
          Diverge(absl::StrCat("job ", id, " has ", job.nodes_size(), " nodes, asked for ",
                               job.spec().instance_count(), " and ", job.spec().spare_instances(),
                               " spares"));
        }
        if (job.spares_used() > job.spec().spare_instances()) {
          Diverge(absl::StrCat("job ", id, " used ", job.spares_used(), " of ",
                               job.spec().spare_instances(), " spares"));
        }
        for (const v1::JobNode& n : job.nodes()) {
          // A lost node's part keeps its name until its replacement starts: only the node a
          // registered node is busy with counts as its job. A part a spare took is history: the
          // node may hold another part of the same job since (a replacement).
          if (n.taken_by_spare() || n.exit_code() != -1 || busy_with[n.node_name()] != id) {
            continue;
          }
          auto [it, fresh] = active.emplace(n.node_name(), id);
          if (!fresh) {
            Diverge(absl::StrCat("node ", n.node_name(), " is in jobs ", it->second, " and ", id));
          }
        }
      }
      last_state_[id] = job.state();
    }
    if (jobs.size() != submitted_.size()) {
      Diverge(absl::StrCat(jobs.size(), " jobs listed, ", submitted_.size(), " submitted"));
    }
  }

  // Cancels everything, lets every daemon report its exits, and waits out every grace: every
  // job must then be in exactly one terminal state.
  void Finish() {
    for (const std::string& id : submitted_) Cancel(id);
    Check();
    for (Daemon& d : daemons_) {
      if (!d.registered) continue;
      while (!d.running.empty()) {
        v1::JobUpdate u;
        u.set_job_id(d.running.begin()->first);
        u.set_event(v1::JOB_EVENT_EXITED);
        u.set_exit_code(143);
        d.running.erase(d.running.begin());
        Update(d, u);
        Check();
      }
    }
    for (Daemon& d : daemons_) {
      if (!d.registered) continue;
      d.registered = false;
      std::vector<Action> out;
      scheduler_.Deregister(d.name, now_, &out);
      Deliver(out);
    }
    now_ += absl::Minutes(5);
    std::vector<Action> out;
    scheduler_.Tick(now_, &out);
    Deliver(out);
    Check();
    for (const v1::JobInfo& job : scheduler_.Jobs()) {
      if (!Terminal(job.state())) {
        Diverge(absl::StrCat("job ", job.job_id(), " is still in state ", job.state(),
                             " after every node left"));
      }
    }
  }

  FuzzedDataProvider* in_;
  Scheduler scheduler_;
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  std::array<Daemon, kNodes> daemons_;
  std::vector<std::string> submitted_;
  std::set<std::string> cancelled_;  // Jobs a Cancel succeeded on.
  std::map<std::string, v1::JobState> last_state_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool traced = std::getenv("DGT_FUZZ_TRACE") != nullptr;
  std::string steps;
  trace = traced ? &steps : nullptr;
  FuzzedDataProvider in(data, size);
  Harness harness(&in);
  harness.Run();
  return 0;
}
