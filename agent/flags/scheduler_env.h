// Scheduler environments as sources of dgt-run's settings: Slurm's SLURM_* variables under
// `srun`, and Kubernetes' Indexed Job and JobSet (JOB_COMPLETION_INDEX, the pod's labels through
// the downward API, the headless Service's DNS names). An explicit flag wins over PET_*, which
// wins over these (docs/SCHEDULERS.md lists what is read).
//
// Thread-safe: pure functions over the getenv and FQDN seams, which must be safe to call.
#ifndef DGT_AGENT_FLAGS_SCHEDULER_ENV_H_
#define DGT_AGENT_FLAGS_SCHEDULER_ENV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dgt::agent {

enum class Scheduler { kNone, kSlurm, kKubernetes };

// One setting a scheduler supplies. `value` is the text a flag would take; `source` names the
// variables it came from ("SLURM_NODEID"). A non-empty `error` means the scheduler cannot supply
// it (e.g. SLURM_NODEID missing): using it is a usage error with that message, while a flag or
// PET_* variable that gives the setting makes the error moot.
struct SchedulerSetting {
  std::string value;
  std::string source;
  std::string error;
};

struct SchedulerDefaults {
  Scheduler scheduler = Scheduler::kNone;
  std::optional<SchedulerSetting> nnodes;
  std::optional<SchedulerSetting> node_rank;
  std::optional<SchedulerSetting> master_addr;
  std::optional<SchedulerSetting> master_port;
  std::optional<SchedulerSetting> run_id;
  std::optional<SchedulerSetting> nproc_per_node;
};

// The master port a Slurm job gets when none is given: kSlurmPortBase + (SLURM_JOB_ID mod
// kSlurmPortSpan), 15000..24999. Below Linux's ephemeral ports (32768 and up) and clear of the
// default ports 29400 and 29500, so two jobs sharing a node differ unless their ids are equal
// modulo 10000.
inline constexpr int kSlurmPortBase = 15000;
inline constexpr int kSlurmPortSpan = 10000;
int SlurmMasterPort(uint64_t job_id);

// The DNS name of index 0 from this pod's own fully qualified name, as Kubernetes names the pods
// of an Indexed Job ("<job>-<index>.<service>...": "<job>-0.<service>...") or of a JobSet
// ("<jobset>-<rjob>-<job index>-<index>.<service>...": "<jobset>-<rjob>-0-0.<service>...").
// `job_index` is the JobSet's job index, or nullopt for an Indexed Job.
// Errors: InvalidArgument when the name has no domain (the pod has no subdomain, so no headless
// Service names it) or does not end with the indices.
absl::StatusOr<std::string> KubernetesIndexZeroName(absl::string_view own_fqdn,
                                                    int64_t completion_index,
                                                    std::optional<int64_t> job_index);

// What the scheduler dgt-run runs under supplies, read through `getenv_fn`; `own_fqdn_fn`
// (called only for a Kubernetes pod) returns this host's fully qualified name, or "" when it has
// none.
// Slurm (SLURM_JOB_ID set): nnodes from SLURM_STEP_NUM_NODES, else SLURM_NNODES, else
// SLURM_JOB_NUM_NODES; the node rank from SLURM_NODEID; the master from the first host of
// SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else SLURM_NODELIST; the master port from
// SLURM_JOB_ID (SlurmMasterPort); the run id "<SLURM_JOB_ID>.<SLURM_STEP_ID>" (or the job id
// alone outside a step); nproc-per-node from SLURM_GPUS_ON_NODE.
// Kubernetes (JOB_COMPLETION_INDEX set): the node rank is DGT_JOBSET_JOB_INDEX *
// DGT_JOBSET_PODS_PER_JOB (default 1) + JOB_COMPLETION_INDEX, the master is index 0's DNS name
// (KubernetesIndexZeroName).
// Outside a job step (no SLURM_STEP_ID: sbatch's batch script, salloc's shell) nnodes above 1
// is an error in its setting: only one dgt-run would start.
// Errors: InvalidArgument when srun started more than one task on this node (one dgt-run per
// task), naming the variable and what to run instead. Problems with one setting are reported in
// that setting's `error`.
absl::StatusOr<SchedulerDefaults> ReadSchedulerDefaults(const char* (*getenv_fn)(const char*),
                                                        std::string (*own_fqdn_fn)());

// This host's fully qualified name (gethostname, then its canonical name through getaddrinfo,
// which reads the /etc/hosts entry Kubernetes writes for a pod with a subdomain); "" on failure.
std::string OwnFqdn();

}  // namespace dgt::agent

#endif  // DGT_AGENT_FLAGS_SCHEDULER_ENV_H_
