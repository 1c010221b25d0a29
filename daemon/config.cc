#include "daemon/config.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "yaml-cpp/yaml.h"

namespace dgt::daemon {
namespace {

constexpr double kMaxStopGraceS = 3600;
constexpr size_t kMaxNodeNameBytes = 128;

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
    const std::string key = kv.first.as<std::string>();
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

absl::Status CheckRunAsUser(const Errors& e, const AgentConfig& c) {
  errno = 0;
  const struct passwd* pw = ::getpwnam(c.run_as_user.c_str());
  if (pw == nullptr) return e.Got("run_as_user", "no such user", c.run_as_user);
  if (pw->pw_uid == 0 && !c.allow_root) {
    return e.Got("run_as_user", "jobs may not run as root (uid 0) unless allow_root: true is set",
                 c.run_as_user);
  }
  return absl::OkStatus();
}

absl::Status ParseKey(const Errors& e, const std::string& key, const YAML::Node& v,
                      AgentConfig* c) {
  if (key == "rendezvous_endpoints") {
    if (!v.IsSequence() || v.size() == 0) {
      return e.Got(key, "must be a non-empty list of \"host:port\"", FlowText(v));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string item_key = absl::StrCat(key, "[", i, "]");
      auto s = Scalar(e, item_key, v[i]);
      if (!s.ok()) return s.status();
      auto hp = ParseHostPort(*s, -1, item_key);
      if (!hp.ok()) return e.Got(item_key, "must be host:port with a port in 1..65535", *s);
      c->rendezvous_endpoints.push_back(*s);
    }
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
    if (s->empty() || s->find_first_of(" \t\n/[]") != std::string::npos) {
      return e.Got(key, "must be a host name or an IP address (no port)", *s);
    }
    c->advertise_address = *s;
    return absl::OkStatus();
  }
  if (key == "labels") {
    if (!v.IsMap()) return e.Got(key, "must be a map of name: value", FlowText(v));
    for (const auto& kv : v) {
      const std::string name = kv.first.as<std::string>();
      if (name.empty()) return e.Bad(key, "a label name is empty");
      auto value = Scalar(e, absl::StrCat(key, ".", name), kv.second);
      if (!value.ok()) return value.status();
      c->labels[name] = *value;
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
  return e.Bad(key,
               "unknown key (known: rendezvous_endpoints, node_name, advertise_address, labels, "
               "run_as_user, allow_root, work_dir, tls, token_file, dgt_run, stop_grace_s, "
               "watchdog)");
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
      const std::string key = kv.first.as<std::string>();
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
  if (c.dgt_run.empty() || ::access(c.dgt_run.c_str(), X_OK) != 0) {
    return e.Got("dgt_run", "must be an executable file (dgt-run)", c.dgt_run);
  }
  return c;
}

absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path,
                                            const ConfigDefaults& defaults) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read the config file (", std::strerror(errno), ")"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseAgentConfig(text.str(), path, defaults);
}

}  // namespace dgt::daemon
