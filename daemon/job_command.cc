#include "daemon/job_command.h"

#include <grp.h>
#include <pwd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dgt::daemon {
namespace {

constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";

bool ValidEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char ch : name) {
    if (!absl::ascii_isalnum(ch) && ch != '_') return false;
  }
  return true;
}

// The node's health thresholds of agent.yaml as dgt-run's health flags, each only where it
// differs from dgt-run's default, so that a job's dgt-run checks the node as its daemon does:
// before the join and, every health_interval_s while the job runs, with a failure taking the
// node out of the run (docs/JOBS.md "Health"). health_checks' commands are not passed: they run
// as the daemon's user (root), and the job's dgt-run runs as run_as_user. Seconds are written
// without an exponent ("%.9g" over 0.1 s to a year).
void AppendHealthFlags(const agent::HealthFlags& health, std::vector<std::string>* argv) {
  const agent::HealthFlags defaults;
  if (health.interval_s != defaults.interval_s) {
    argv->push_back(absl::StrFormat("--health-interval=%.9g", health.interval_s));
  }
  if (health.expected_gpus != defaults.expected_gpus) {
    argv->push_back(absl::StrCat("--expected-gpus=", health.expected_gpus));
  }
  if (health.min_free_disk != defaults.min_free_disk) {
    argv->push_back(absl::StrCat("--min-free-disk=", health.min_free_disk));
  }
  if (health.min_shm_size != defaults.min_shm_size) {
    argv->push_back(absl::StrCat("--min-shm-size=", health.min_shm_size));
  }
}

}  // namespace

absl::Status ValidateJobId(absl::string_view job_id) {
  bool ok = !job_id.empty() && job_id.size() <= kMaxJobIdBytes;
  for (char ch : job_id) {
    ok = ok && (absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-');
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id must be 1..", kMaxJobIdBytes, " bytes of [a-z0-9-], got '",
                     absl::CEscape(job_id.substr(0, 2 * kMaxJobIdBytes)), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunAsUser> LookupRunAsUser(const std::string& name, bool allow_root) {
  struct passwd pwd {};
  struct passwd* result = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(name.c_str(), &pwd, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return absl::NotFoundError(absl::StrCat("run_as_user: no such user '", name, "'"));
  }
  if (pwd.pw_uid == 0 && !allow_root) {
    return absl::PermissionDeniedError(absl::StrCat(
        "run_as_user: jobs may not run as root (uid 0) unless allow_root: true, got '", name, "'"));
  }
  RunAsUser user;
  user.name = name;
  user.uid = pwd.pw_uid;
  user.gid = pwd.pw_gid;
  user.home = pwd.pw_dir != nullptr ? pwd.pw_dir : "/";
  user.shell = pwd.pw_shell != nullptr && pwd.pw_shell[0] != '\0' ? pwd.pw_shell : "/bin/sh";
  int n = 64;
  for (int attempt = 0; attempt < 4; ++attempt) {
    user.groups.resize(n);
    int count = n;
    if (::getgrouplist(name.c_str(), pwd.pw_gid, user.groups.data(), &count) >= 0) {
      user.groups.resize(count);
      return user;
    }
    n = count > n ? count : n * 4;
  }
  user.groups = {pwd.pw_gid};
  return user;
}

absl::StatusOr<JobLaunch> BuildJobLaunch(const AgentConfig& config,
                                         const dgt::jobs::v1::StartJob& start,
                                         const RunAsUser& user,
                                         const std::map<std::string, std::string>& daemon_env) {
  if (auto s = ValidateJobId(start.job_id()); !s.ok()) return s;
  const auto& spec = start.spec();
  const std::string& id = start.job_id();
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, ": ", what));
  };
  if (spec.command().empty()) return bad("spec.command is empty");
  if (start.rdzv_endpoint().empty()) return bad("rdzv_endpoint is empty");
  if (spec.instance_count() < 1) {
    return bad(absl::StrCat("instance_count must be >= 1, got ", spec.instance_count()));
  }
  if (spec.max_restarts() < 0) {
    return bad(absl::StrCat("max_restarts must be >= 0, got ", spec.max_restarts()));
  }
  const std::string policy = spec.restart_policy().empty() ? "group" : spec.restart_policy();
  if (policy != "group" && policy != "rank") {
    return bad(absl::StrCat("restart_policy must be group or rank, got '", policy, "'"));
  }
  const auto& dist = spec.distribution();
  const std::string type = dist.type().empty() ? "pytorch" : dist.type();
  if (type != "pytorch" && type != "tensorflow") {
    return bad(absl::StrCat("distribution.type must be pytorch or tensorflow, got '", type, "'",
                            type == "mpi" ? " (mpi is not supported by dgt-run)" : ""));
  }
  const int nproc = dist.process_count_per_instance();
  if (nproc < 0 || (type == "pytorch" && nproc < 1)) {
    return bad(absl::StrCat("distribution.process_count_per_instance must be >= 1, got ", nproc));
  }
  if (type == "tensorflow" && dist.worker_count() < 1) {
    return bad(absl::StrCat("distribution.worker_count must be >= 1, got ", dist.worker_count()));
  }
  if (dist.parameter_server_count() < 0) {
    return bad(absl::StrCat("distribution.parameter_server_count must be >= 0, got ",
                            dist.parameter_server_count()));
  }
  if (!spec.code_dir().empty() && spec.code_dir()[0] != '/') {
    return bad(absl::StrCat("code_dir must be an absolute path, got '", spec.code_dir(), "'"));
  }

  JobLaunch l;
  l.job_dir = absl::StrCat(config.work_dir, "/", id);
  l.log_dir = l.job_dir + "/logs";
  l.dgt_run_log = l.job_dir + "/dgt-run.log";
  l.cwd = spec.code_dir().empty() ? l.job_dir : spec.code_dir();

  auto& a = l.argv;
  a.push_back(config.dgt_run);
  a.push_back(absl::StrCat("--nnodes=", spec.instance_count()));
  if (nproc >= 1) a.push_back(absl::StrCat("--nproc-per-node=", nproc));
  a.emplace_back("--rdzv-backend=dgt");
  a.push_back("--rdzv-endpoint=" + start.rdzv_endpoint());
  a.push_back("--rdzv-id=" + id);
  a.push_back("--node-id=" + config.node_name);
  if (!config.advertise_address.empty()) a.push_back("--local-addr=" + config.advertise_address);
  a.push_back(absl::StrCat("--max-restarts=", spec.max_restarts()));
  a.push_back("--restart-policy=" + policy);
  a.insert(a.end(), {"--log-dir", l.log_dir, "--redirects", "3"});
  if (!config.tls.ca_file.empty()) a.push_back("--rdzv-tls-ca=" + config.tls.ca_file);
  if (!config.tls.cert_file.empty()) a.push_back("--rdzv-tls-cert=" + config.tls.cert_file);
  if (!config.tls.key_file.empty()) a.push_back("--rdzv-tls-key=" + config.tls.key_file);
  if (!config.token_file.empty()) a.push_back("--rdzv-token-file=" + config.token_file);
  AppendHealthFlags(config.health, &a);
  if (type == "tensorflow") {
    a.insert(a.end(),
             {"--distribution", "tensorflow", "--worker-count", absl::StrCat(dist.worker_count()),
              "--parameter-server-count", absl::StrCat(dist.parameter_server_count())});
  }
  a.insert(a.end(), {"--no-python", "--", "/bin/sh", "-c", spec.command()});

  std::map<std::string, std::string> env;
  auto it = daemon_env.find("PATH");
  env["PATH"] = it != daemon_env.end() && !it->second.empty() ? it->second : kDefaultPath;
  env["HOME"] = user.home;
  env["USER"] = user.name;
  env["LOGNAME"] = user.name;
  env["SHELL"] = user.shell;
  for (const char* name : {"LANG", "LC_ALL", "TZ"}) {
    if (auto found = daemon_env.find(name); found != daemon_env.end()) env[name] = found->second;
  }
  for (const auto& [name, value] : spec.environment_variables()) {
    if (!ValidEnvName(name)) {
      return bad(
          absl::StrCat("environment_variables: name must match [A-Za-z_][A-Za-z0-9_]*, got '",
                       absl::CEscape(name), "'"));
    }
    env[name] = value;
  }
  for (const auto& [name, value] : env) l.env.push_back(absl::StrCat(name, "=", value));
  return l;
}

}  // namespace dgt::daemon
