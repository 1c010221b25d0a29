#include "agent/flags/scheduler_env.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/flags/hostlist.h"

namespace dgt::agent {
namespace {

// The largest node count or rank a scheduler variable may give (as --nnodes takes).
constexpr int64_t kMaxSchedulerNodes = 1000000;

using Getenv = const char* (*)(const char*);

// The first of `names` that is set (even empty), or nullptr.
const char* FirstSet(Getenv getenv_fn, std::initializer_list<const char*> names,
                     const char** which) {
  for (const char* name : names) {
    if (const char* v = getenv_fn(name); v != nullptr) {
      *which = name;
      return v;
    }
  }
  return nullptr;
}

// A whole number in [0, max] from variable `name`, or an error that names it.
absl::StatusOr<int64_t> ReadCount(absl::string_view name, const char* value, int64_t max) {
  int64_t n = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &n) || n < 0 || n > max ||
      absl::StrContains(value, '+') || absl::StrContains(value, ' ')) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be an integer from 0 to ", max,
                                                   ", got '", value == nullptr ? "" : value, "'"));
  }
  return n;
}

SchedulerSetting Value(std::string value, std::string source) {
  return SchedulerSetting{std::move(value), std::move(source), ""};
}
SchedulerSetting Error(std::string source, std::string error) {
  return SchedulerSetting{"", std::move(source), std::move(error)};
}

// srun starts one dgt-run per task: more than one on a node means several agents each
// starting their own workers on it.
absl::Status CheckOneTaskPerNode(Getenv getenv_fn, int64_t node_id, int64_t nnodes) {
  const char* per_node = getenv_fn("SLURM_STEP_TASKS_PER_NODE");
  std::string seen;
  int64_t tasks = 1;
  if (per_node != nullptr) {
    auto counts = ExpandTaskCounts(per_node, "SLURM_STEP_TASKS_PER_NODE");
    if (!counts.ok()) return counts.status();
    if (node_id >= 0 && node_id < static_cast<int64_t>(counts->size())) {
      tasks = (*counts)[node_id];
    } else {
      for (int c : *counts) tasks = std::max<int64_t>(tasks, c);
    }
    seen = absl::StrCat("SLURM_STEP_TASKS_PER_NODE=", per_node);
  } else if (const char* ntasks = getenv_fn("SLURM_STEP_NUM_TASKS"); ntasks != nullptr) {
    auto n = ReadCount("SLURM_STEP_NUM_TASKS", ntasks, kMaxSchedulerNodes * 1024);
    if (!n.ok()) return n.status();
    if (nnodes > 0 && *n > nnodes) tasks = (*n + nnodes - 1) / nnodes;
    seen = absl::StrCat("SLURM_STEP_NUM_TASKS=", ntasks, " on ", nnodes, " node(s)");
  }
  if (tasks <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "srun started ", tasks, " tasks on this node (", seen, "), so ", tasks,
      " dgt-run agents would each start their own workers; dgt-run starts a "
      "node's workers itself: run one task per node, e.g. srun --ntasks-per-node=1 dgt-run "
      "--nproc-per-node=",
      tasks, " train.py"));
}

absl::Status ReadSlurm(Getenv getenv_fn, const char* job_id_text, SchedulerDefaults* d) {
  d->scheduler = Scheduler::kSlurm;
  const char* step_id = getenv_fn("SLURM_STEP_ID");
  if (step_id == nullptr) step_id = getenv_fn("SLURM_STEPID");

  const char* nnodes_var = nullptr;
  const char* nnodes_text = FirstSet(
      getenv_fn, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, &nnodes_var);
  int64_t nnodes = -1;
  if (nnodes_text != nullptr) {
    auto n = ReadCount(nnodes_var, nnodes_text, kMaxSchedulerNodes);
    if (n.ok() && *n > 1 && step_id == nullptr) {
      // sbatch's batch script runs on the first node only: a dgt-run there would wait for the
      // other nodes until the join timeout.
      d->nnodes =
          Error(nnodes_var,
                absl::StrCat("dgt-run is not in a job step (SLURM_JOB_ID=", job_id_text,
                             " without SLURM_STEP_ID: the batch script or salloc's shell) of ",
                             nnodes_var, "=", *n,
                             " nodes, so it alone would wait for the others: "
                             "start one per node with srun --ntasks-per-node=1 dgt-run ..., or "
                             "pass --nnodes"));
    } else if (n.ok() && *n >= 1) {
      nnodes = *n;
      d->nnodes = Value(absl::StrCat(nnodes), nnodes_var);
    } else {
      d->nnodes = Error(nnodes_var, absl::StrCat(nnodes_var, " must be an integer from 1 to ",
                                                 kMaxSchedulerNodes, ", got '", nnodes_text, "'"));
    }
  }

  int64_t node_id = -1;
  if (const char* v = getenv_fn("SLURM_NODEID"); v != nullptr) {
    auto n = ReadCount("SLURM_NODEID", v, kMaxSchedulerNodes);
    if (!n.ok()) {
      d->node_rank = Error("SLURM_NODEID", std::string(n.status().message()));
    } else if (nnodes > 0 && *n >= nnodes) {
      d->node_rank = Error("SLURM_NODEID", absl::StrCat("SLURM_NODEID=", *n, " is not below ",
                                                        nnodes_var, "=", nnodes));
    } else {
      node_id = *n;
      d->node_rank = Value(absl::StrCat(*n), "SLURM_NODEID");
    }
  } else if (nnodes > 1) {
    d->node_rank = Error("SLURM_NODEID",
                         absl::StrCat("SLURM_NODEID is not set, but SLURM_JOB_ID=", job_id_text,
                                      " and ", nnodes_var, "=", nnodes,
                                      ": start dgt-run under srun with one task per node (srun "
                                      "--ntasks-per-node=1 dgt-run ...), or pass --node-rank"));
  }

  if (step_id != nullptr) {
    if (auto s = CheckOneTaskPerNode(getenv_fn, node_id, nnodes); !s.ok()) return s;
  }

  const char* list_var = nullptr;
  const char* list = FirstSet(
      getenv_fn, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_var);
  if (list != nullptr) {
    auto hosts = ExpandHostlist(list, list_var);
    if (hosts.ok()) {
      d->master_addr = Value(hosts->front(), absl::StrCat(list_var, " (its first host)"));
    } else {
      d->master_addr = Error(list_var, std::string(hosts.status().message()));
    }
  }

  uint64_t job_id = 0;
  if (absl::SimpleAtoi(job_id_text, &job_id) && !absl::StrContains(job_id_text, '+')) {
    d->master_port = Value(absl::StrCat(SlurmMasterPort(job_id)), "SLURM_JOB_ID");
    if (step_id != nullptr && *step_id != '\0') {
      d->run_id = Value(absl::StrCat(job_id_text, ".", step_id), "SLURM_JOB_ID.SLURM_STEP_ID");
    } else {
      d->run_id = Value(job_id_text, "SLURM_JOB_ID");
    }
  } else {
    std::string e = absl::StrCat("SLURM_JOB_ID must be a job number, got '", job_id_text, "'");
    d->master_port = Error("SLURM_JOB_ID", e);
    d->run_id = Error("SLURM_JOB_ID", e);
  }
  if (const char* gpus = getenv_fn("SLURM_GPUS_ON_NODE"); gpus != nullptr) {
    auto n = ReadCount("SLURM_GPUS_ON_NODE", gpus, 4096);
    if (!n.ok()) {
      d->nproc_per_node = Error("SLURM_GPUS_ON_NODE", std::string(n.status().message()));
    } else if (*n > 0) {
      d->nproc_per_node = Value(absl::StrCat(*n), "SLURM_GPUS_ON_NODE");
    }
  }
  return absl::OkStatus();
}

void ReadKubernetes(Getenv getenv_fn, const char* completion_text, std::string (*own_fqdn_fn)(),
                    SchedulerDefaults* d) {
  d->scheduler = Scheduler::kKubernetes;
  auto completion = ReadCount("JOB_COMPLETION_INDEX", completion_text, kMaxSchedulerNodes);
  if (!completion.ok()) {
    d->node_rank = Error("JOB_COMPLETION_INDEX", std::string(completion.status().message()));
    d->master_addr = d->node_rank;
    return;
  }
  std::optional<int64_t> job_index;
  int64_t pods_per_job = 1;
  std::string source = "JOB_COMPLETION_INDEX";
  if (const char* v = getenv_fn("DGT_JOBSET_JOB_INDEX"); v != nullptr) {
    auto j = ReadCount("DGT_JOBSET_JOB_INDEX", v, kMaxSchedulerNodes);
    if (!j.ok()) {
      d->node_rank = Error("DGT_JOBSET_JOB_INDEX", std::string(j.status().message()));
      d->master_addr = d->node_rank;
      return;
    }
    job_index = *j;
    source = "DGT_JOBSET_JOB_INDEX, JOB_COMPLETION_INDEX";
    if (const char* p = getenv_fn("DGT_JOBSET_PODS_PER_JOB"); p != nullptr) {
      auto n = ReadCount("DGT_JOBSET_PODS_PER_JOB", p, kMaxSchedulerNodes);
      if (!n.ok() || *n < 1) {
        d->node_rank = Error("DGT_JOBSET_PODS_PER_JOB",
                             absl::StrCat("DGT_JOBSET_PODS_PER_JOB must be an integer from 1 to ",
                                          kMaxSchedulerNodes, ", got '", p, "'"));
        return;
      }
      pods_per_job = *n;
      source = "DGT_JOBSET_JOB_INDEX, DGT_JOBSET_PODS_PER_JOB, JOB_COMPLETION_INDEX";
    }
  }
  if (*completion >= pods_per_job && job_index.has_value() && *job_index > 0) {
    d->node_rank =
        Error(source, absl::StrCat("JOB_COMPLETION_INDEX=", *completion,
                                   " is not below "
                                   "DGT_JOBSET_PODS_PER_JOB=",
                                   pods_per_job, " in JobSet job ", *job_index,
                                   ": set DGT_JOBSET_PODS_PER_JOB to the child Job's parallelism"));
  } else {
    d->node_rank = Value(absl::StrCat(job_index.value_or(0) * pods_per_job + *completion), source);
  }
  const std::string fqdn = own_fqdn_fn();
  auto master = KubernetesIndexZeroName(fqdn, *completion, job_index);
  if (master.ok()) {
    d->master_addr = Value(*master, "the pod's DNS name, index 0");
  } else {
    d->master_addr = Error("the pod's DNS name", std::string(master.status().message()));
  }
}

const char* RealGetenv(const char* name) { return std::getenv(name); }

}  // namespace

int SlurmMasterPort(uint64_t job_id) {
  return kSlurmPortBase + static_cast<int>(job_id % kSlurmPortSpan);
}

absl::StatusOr<std::string> KubernetesIndexZeroName(absl::string_view own_fqdn,
                                                    int64_t completion_index,
                                                    std::optional<int64_t> job_index) {
  const size_t dot = own_fqdn.find('.');
  const std::string fix =
      "set the pod's subdomain to a headless Service (docs/SCHEDULERS.md), or pass --master-addr";
  if (own_fqdn.empty() || dot == absl::string_view::npos || dot + 1 == own_fqdn.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot name index 0: this pod's name '", own_fqdn, "' has no domain; ", fix));
  }
  const absl::string_view host = own_fqdn.substr(0, dot);
  const absl::string_view domain = own_fqdn.substr(dot);
  const std::string suffix = job_index.has_value()
                                 ? absl::StrCat("-", *job_index, "-", completion_index)
                                 : absl::StrCat("-", completion_index);
  if (host.size() <= suffix.size() || !absl::EndsWith(host, suffix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot name index 0: this pod's name '", own_fqdn, "' does not end with its ",
        job_index.has_value() ? "JobSet job index and completion index '" : "completion index '",
        suffix, "'; ", fix));
  }
  return absl::StrCat(host.substr(0, host.size() - suffix.size()),
                      job_index.has_value() ? "-0-0" : "-0", domain);
}

absl::StatusOr<SchedulerDefaults> ReadSchedulerDefaults(const char* (*getenv_fn)(const char*),
                                                        std::string (*own_fqdn_fn)()) {
  if (getenv_fn == nullptr) getenv_fn = RealGetenv;
  if (own_fqdn_fn == nullptr) own_fqdn_fn = OwnFqdn;
  SchedulerDefaults d;
  if (const char* job_id = getenv_fn("SLURM_JOB_ID"); job_id != nullptr) {
    if (auto s = ReadSlurm(getenv_fn, job_id, &d); !s.ok()) return s;
  } else if (const char* index = getenv_fn("JOB_COMPLETION_INDEX"); index != nullptr) {
    ReadKubernetes(getenv_fn, index, own_fqdn_fn, &d);
  }
  return d;
}

std::string OwnFqdn() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "";
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host, nullptr, &hints, &found) != 0) return "";
  std::string name = found->ai_canonname != nullptr ? found->ai_canonname : "";
  ::freeaddrinfo(found);
  return name;
}

}  // namespace dgt::agent
