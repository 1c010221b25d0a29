#include "daemon/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "common/read_file.h"
#include "replica/endpoint_list.h"
#include "yaml-cpp/yaml.h"

namespace dgt::daemon {
namespace {

constexpr double kMaxStopGraceS = 3600;
constexpr size_t kMaxNodeNameBytes = 128;
// Label names as Kubernetes label keys (an optional "prefix/" then a name): at most 253 bytes.
constexpr size_t kMaxLabelNameBytes = 253;
constexpr size_t kMaxLabelValueBytes = 1024;

// Builds "<file>: <key>: <what>" errors.
class Errors {
 public:
  explicit Errors(absl::string_view file) : file_(file) {}
  absl::Status Bad(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", key, ": ", what));
  }
  absl::Status Got(absl::string_view key, absl::string_view what, absl::string_view value) const {
    return Bad(key, absl::StrCat(what, ", got '", value, "'"));
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

std::string FlowText(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

absl::StatusOr<std::string> Scalar(const Errors& e, const std::string& key, const YAML::Node& n) {
  if (!n.IsScalar()) return e.Got(key, "must be a string", FlowText(n));
  return n.Scalar();
}

// A map key: a YAML scalar. `where` is "" at the top level, else the enclosing key ("labels").
// A key that is a list or a map ("[a]: 2") is refused naming its line and column, as
// "<file>:<line>:<column>: [<where>: ]a key must be a string, got '[a]'".
absl::StatusOr<std::string> Key(absl::string_view file, absl::string_view where,
                                const YAML::Node& key) {
  if (key.IsScalar()) return key.Scalar();
  const YAML::Mark mark = key.Mark();
  return absl::InvalidArgumentError(
      absl::StrCat(file, ":", mark.line + 1, ":", mark.column + 1, ": ", where,
                   where.empty() ? "" : ": ", "a key must be a string, got '", FlowText(key), "'"));
}

absl::StatusOr<std::string> AbsolutePath(const Errors& e, const std::string& key,
                                         const YAML::Node& n) {
  auto s = Scalar(e, key, n);
  if (!s.ok()) return s.status();
  if (s->empty() || (*s)[0] != '/') return e.Got(key, "must be an absolute path", *s);
  return s;
}

absl::Status Readable(const Errors& e, const std::string& key, const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) {
    return e.Got(key, absl::StrCat("cannot read the file (", std::strerror(errno), ")"), path);
  }
  return absl::OkStatus();
}

absl::Status ParseTls(const Errors& e, const YAML::Node& n, rendezvous::TlsFiles* tls) {
  if (!n.IsMap()) return e.Got("tls", "must be a map of ca_file, cert_file, key_file", FlowText(n));
  for (const auto& kv : n) {
    auto key_or = Key(e.file(), "tls", kv.first);
    if (!key_or.ok()) return key_or.status();
    const std::string& key = *key_or;
    std::string* target = key == "ca_file"     ? &tls->ca_file
                          : key == "cert_file" ? &tls->cert_file
                          : key == "key_file"  ? &tls->key_file
                                               : nullptr;
    const std::string path = "tls." + key;
    if (target == nullptr) {
      return e.Bad(path, "unknown key (tls takes ca_file, cert_file, key_file)");
    }
    auto value = AbsolutePath(e, path, kv.second);
    if (!value.ok()) return value.status();
    if (auto s = Readable(e, path, *value); !s.ok()) return s;
    *target = *value;
  }
  if (tls->cert_file.empty() != tls->key_file.empty()) {
    return e.Bad("tls", "cert_file and key_file go together (mutual TLS); one is missing");
  }
  if ((!tls->cert_file.empty()) && tls->ca_file.empty()) {
    return e.Bad("tls", "cert_file and key_file need ca_file (TLS to the service)");
  }
  if (auto s = rendezvous::CheckClientTlsFiles(*tls); !s.ok()) {
    return e.Bad("tls", s.message());
  }
  return absl::OkStatus();
}

// Kubernetes-style label names: 1..253 bytes of [A-Za-z0-9._/-], beginning and ending with a
// letter or digit ("gpu", "topology.dgt.io/zone").
absl::Status CheckLabel(const Errors& e, const std::string& name) {
  const auto alnum = [](char ch) { return absl::ascii_isalnum(static_cast<unsigned char>(ch)); };
  const bool chars = std::all_of(name.begin(), name.end(), [&](char ch) {
    return alnum(ch) || ch == '.' || ch == '_' || ch == '-' || ch == '/';
  });
  if (name.empty() || name.size() > kMaxLabelNameBytes || !chars || !alnum(name.front()) ||
      !alnum(name.back())) {
    return e.Got("labels",
                 absl::StrCat("a label name must be 1..", kMaxLabelNameBytes,
                              " bytes of letters, digits, '.', '_', '-' and '/', beginning and "
                              "ending with a letter or digit"),
                 absl::CHexEscape(name));
  }
  return absl::OkStatus();
}

// The errno of open(path, O_RDONLY) as uid/gid with `groups` (0 when it opens): a child
// process switches to them and tries, so permissions, ACLs and the directories on the way all
// count. Only as root (another user's ids are out of reach otherwise): 0 then.
int OpenErrnoAs(const std::string& path, uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  if (::geteuid() != 0 || uid == 0) return 0;
  const pid_t pid = ::fork();
  if (pid < 0) return 0;  // Not checked; dgt-run reports it.
  if (pid == 0) {
    // Only syscalls from here: the parent may have threads.
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
        ::setuid(uid) != 0) {
      ::_exit(0);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ::_exit(fd >= 0 ? 0 : (errno & 0xff));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 0;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

absl::Status CheckRunAsUser(const Errors& e, const AgentConfig& c) {
  errno = 0;
  const struct passwd* pw = ::getpwnam(c.run_as_user.c_str());
  if (pw == nullptr) return e.Got("run_as_user", "no such user", c.run_as_user);
  if (pw->pw_uid == 0 && !c.allow_root) {
    return e.Got("run_as_user", "jobs may not run as root (uid 0) unless allow_root: true is set",
                 c.run_as_user);
  }
  // dgt-run runs as run_as_user and reads token_file itself (--rdzv-token-file).
  if (!c.token_file.empty()) {
    const uid_t uid = pw->pw_uid;
    const gid_t gid = pw->pw_gid;
    int count = 64;
    std::vector<gid_t> groups(count);
    if (::getgrouplist(pw->pw_name, gid, groups.data(), &count) < 0) {
      groups.resize(count);
      if (::getgrouplist(pw->pw_name, gid, groups.data(), &count) < 0) count = 0;
    }
    groups.resize(count);
    if (const int err = OpenErrnoAs(c.token_file, uid, gid, groups); err != 0) {
      return e.Bad(
          "token_file",
          absl::StrCat("'", c.token_file, "' is not readable by run_as_user '", c.run_as_user,
                       "' (", std::strerror(err), "): dgt-run runs as that user and reads it"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseKey(const Errors& e, const std::string& key, const YAML::Node& v,
                      AgentConfig* c) {
  if (key == "rendezvous_endpoints") {
    if (!v.IsSequence() || v.size() == 0) {
      return e.Got(key, "must be a non-empty list of \"host:port\"", FlowText(v));
    }
    std::vector<std::string> items;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string item_key = absl::StrCat(key, "[", i, "]");
      auto s = Scalar(e, item_key, v[i]);
      if (!s.ok()) return s.status();
      // ParseHostPort reads " 42381" as a port (leading blanks); dgt-run's gRPC target would not.
      const bool blank = std::any_of(s->begin(), s->end(), [](char ch) {
        return absl::ascii_isspace(static_cast<unsigned char>(ch)) || ch == ',';
      });
      auto hp = ParseHostPort(*s, -1, item_key);
      if (blank || !hp.ok()) {
        return e.Got(item_key, "must be host:port with a port in 1..65535 (no blanks)", *s);
      }
      items.push_back(*s);
    }
    // Two items naming one replica (same host in any case and port), as dgt-run's
    // --rdzv-endpoint refuses them.
    auto list = replica::ParseEndpointList(absl::StrJoin(items, ","), -1, key);
    if (!list.ok())
      return absl::InvalidArgumentError(absl::StrCat(e.file(), ": ", list.status().message()));
    // Aliases ("localhost:1" and "127.0.0.1:1"): the same address once resolved. A name that
    // does not resolve now (DNS not up yet at boot) is not compared; one item is not resolved.
    if (auto same = replica::FindSameReplica(*list)) {
      return e.Bad(key, absl::StrCat("'", items[same->first], "' and '", items[same->second],
                                     "' are the same replica (both ", same->address,
                                     "); list each replica once"));
    }
    c->rendezvous_endpoints = std::move(items);
    return absl::OkStatus();
  }
  if (key == "node_name") {
    auto s = Scalar(e, key, v);
    if (!s.ok()) return s.status();
    if (s->empty() || s->size() > kMaxNodeNameBytes) {
      return e.Got(key, absl::StrCat("must be 1..", kMaxNodeNameBytes, " bytes"), *s);
    }
    for (char ch : *s) {
      if (!absl::ascii_isalnum(ch) && ch != '-' && ch != '_' && ch != '.') {
        return e.Got(key, "may hold only letters, digits, '-', '_' and '.'", *s);
      }
    }
    c->node_name = *s;
    return absl::OkStatus();
  }
  if (key == "advertise_address") {
    auto s = Scalar(e, key, v);
    if (!s.ok()) return s.status();
    in6_addr v6{};
    const bool is_v6 = ::inet_pton(AF_INET6, s->c_str(), &v6) == 1;
    if (!is_v6 && s->find(':') != std::string::npos) {
      return e.Got(key,
                   "must be a host name or an IP address without a port (dgt-run picks the "
                   "ports of each job)",
                   *s);
    }
    const bool name_chars = std::all_of(s->begin(), s->end(), [](char ch) {
      return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' ||
             ch == '_';
    });
    if (s->empty() || (!is_v6 && !name_chars)) {
      return e.Got(key, "must be a host name or an IP address (no port)", *s);
    }
    c->advertise_address = *s;
    return absl::OkStatus();
  }
  if (key == "labels") {
    if (!v.IsMap()) return e.Got(key, "must be a map of name: value", FlowText(v));
    for (const auto& kv : v) {
      auto name = Key(e.file(), key, kv.first);
      if (!name.ok()) return name.status();
      if (auto s = CheckLabel(e, *name); !s.ok()) return s;
      const std::string value_key = absl::StrCat(key, ".", *name);
      auto value = Scalar(e, value_key, kv.second);
      if (!value.ok()) return value.status();
      const bool printable = std::all_of(value->begin(), value->end(),
                                         [](char ch) { return ch >= 0x20 && ch <= 0x7e; });
      if (!printable || value->size() > kMaxLabelValueBytes) {
        return e.Got(value_key,
                     absl::StrCat("a label value must be printable ASCII, at most ",
                                  kMaxLabelValueBytes, " bytes"),
                     absl::CHexEscape(*value));
      }
      c->labels[*name] = *value;
    }
    return absl::OkStatus();
  }
  if (key == "run_as_user") {
    auto s = Scalar(e, key, v);
    if (!s.ok()) return s.status();
    if (s->empty()) return e.Got(key, "must name a user", *s);
    c->run_as_user = *s;
    return absl::OkStatus();
  }
  if (key == "allow_root" || key == "watchdog") {
    bool b = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) {
      return e.Got(key, "must be true or false", FlowText(v));
    }
    if (key == "allow_root") {
      c->allow_root = b;
    } else {
      c->watchdog = b;
    }
    return absl::OkStatus();
  }
  if (key == "work_dir") {
    auto s = AbsolutePath(e, key, v);
    if (!s.ok()) return s.status();
    // Created when missing (with its parents); something else already there is refused.
    struct stat st {};
    if (::stat(s->c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return e.Got(key, "exists and is not a directory", *s);
    }
    c->work_dir = *s;
    return absl::OkStatus();
  }
  if (key == "tls") return ParseTls(e, v, &c->tls);
  if (key == "token_file") {
    auto s = AbsolutePath(e, key, v);
    if (!s.ok()) return s.status();
    auto token = rendezvous::ReadTokenFile(*s);
    if (!token.ok()) return e.Got(key, "must be a readable, non-empty token file", *s);
    c->token_file = *s;
    return absl::OkStatus();
  }
  if (key == "dgt_run") {
    auto s = AbsolutePath(e, key, v);
    if (!s.ok()) return s.status();
    c->dgt_run = *s;
    return absl::OkStatus();
  }
  if (key == "stop_grace_s") {
    double d = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, d) || !std::isfinite(d) || d <= 0 ||
        d > kMaxStopGraceS) {
      return e.Got(key, absl::StrCat("must be a number of seconds in (0, ", kMaxStopGraceS, "]"),
                   FlowText(v));
    }
    c->stop_grace_s = d;
    return absl::OkStatus();
  }
  if (key == "health_checks") {
    if (!v.IsSequence()) return e.Got(key, "must be a list of shell commands", FlowText(v));
    std::vector<std::string> commands;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string item_key = absl::StrCat(key, "[", i, "]");
      auto s = Scalar(e, item_key, v[i]);
      if (!s.ok()) return s.status();
      if (absl::StripAsciiWhitespace(*s).empty()) {
        return e.Got(item_key, "must be a command (run with /bin/sh -c)", *s);
      }
      commands.push_back(*s);
    }
    c->health.commands = std::move(commands);
    return absl::OkStatus();
  }
  if (key == "health_interval_s" || key == "health_check_timeout_s") {
    const bool interval = key == "health_interval_s";
    const double min_s = absl::ToDoubleSeconds(agent::kMinHealthPeriod);
    const double max_s = absl::ToDoubleSeconds(kMaxFlagDuration);
    double d = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, d) || !std::isfinite(d) || d > max_s ||
        (d < min_s && !(interval && d == 0))) {
      return e.Got(
          key,
          absl::StrCat("must be ", interval ? "0 (a round only at start) or " : "",
                       "a number of seconds from ", FormatFlagSeconds(agent::kMinHealthPeriod),
                       " to ", FormatFlagSeconds(kMaxFlagDuration)),
          FlowText(v));
    }
    (interval ? c->health.interval_s : c->health.check_timeout_s) = d;
    return absl::OkStatus();
  }
  if (key == "expected_gpus") {
    int n = 0;
    if (!v.IsScalar() || !YAML::convert<int>::decode(v, n) || n < 0 || n > agent::kMaxGpus) {
      return e.Got(key, absl::StrCat("must be an integer from 0 to ", agent::kMaxGpus),
                   FlowText(v));
    }
    c->health.expected_gpus = n;
    return absl::OkStatus();
  }
  if (key == "min_free_disk" || key == "min_shm_size") {
    auto text = Scalar(e, key, v);
    if (!text.ok()) return text.status();
    auto bytes = agent::ParseByteSize(key, *text);
    if (!bytes.ok()) {
      return e.Got(key, "must be a size (bytes, or with K, M, G, T), at most 1048576T", *text);
    }
    (key == "min_free_disk" ? c->health.min_free_disk : c->health.min_shm_size) = *bytes;
    return absl::OkStatus();
  }
  return e.Bad(key,
               "unknown key (known: rendezvous_endpoints, node_name, advertise_address, labels, "
               "run_as_user, allow_root, work_dir, tls, token_file, dgt_run, stop_grace_s, "
               "watchdog, health_checks, health_interval_s, health_check_timeout_s, "
               "expected_gpus, min_free_disk, min_shm_size)");
}

}  // namespace

absl::StatusOr<AgentConfig> ParseAgentConfig(absl::string_view yaml_text,
                                             absl::string_view file_name,
                                             const ConfigDefaults& defaults) {
  const Errors e(file_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& ex) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ":", ex.mark.line + 1, ":", ex.mark.column + 1, ": ", ex.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": must be a map of keys (rendezvous_endpoints: [...], ...)"));
  }
  AgentConfig c;
  c.node_name = defaults.hostname;
  c.dgt_run = defaults.dgt_run;
  std::set<std::string> seen;
  try {
    for (const auto& kv : root) {
      auto key_or = Key(file_name, "", kv.first);
      if (!key_or.ok()) return key_or.status();
      const std::string& key = *key_or;
      if (!seen.insert(key).second) return e.Bad(key, "given twice");
      if (auto s = ParseKey(e, key, kv.second, &c); !s.ok()) return s;
    }
  } catch (const YAML::Exception& ex) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ":", ex.mark.line + 1, ":", ex.mark.column + 1, ": ", ex.msg));
  }
  if (c.rendezvous_endpoints.empty()) {
    return e.Bad("rendezvous_endpoints", "is required (a list of \"host:port\")");
  }
  if (c.node_name.empty()) return e.Bad("node_name", "is required (the hostname is unknown)");
  if (auto s = CheckRunAsUser(e, c); !s.ok()) return s;
  struct stat st {};
  if (c.dgt_run.empty() || ::stat(c.dgt_run.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(c.dgt_run.c_str(), X_OK) != 0) {
    return e.Got("dgt_run",
                 S_ISDIR(st.st_mode) && !c.dgt_run.empty()
                     ? "is a directory; must be an executable file (dgt-run)"
                     : "must be an executable file (dgt-run)",
                 c.dgt_run);
  }
  return c;
}

absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path,
                                            const ConfigDefaults& defaults) {
  CappedRead read = ReadFileUpTo(path, kMaxConfigFileBytes);
  switch (read.outcome) {
    case CappedRead::Outcome::kOk:
      break;
    case CappedRead::Outcome::kDirectory:
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a config file"));
    case CappedRead::Outcome::kUnreadable:
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot read the config file (", std::strerror(read.error), ")"));
    case CappedRead::Outcome::kTooLarge:
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", kMaxConfigFileBytes,
                                                     " bytes, the limit of a config file"));
  }
  const std::string& text = read.text;
  return ParseAgentConfig(text, path, defaults);
}

}  // namespace dgt::daemon
