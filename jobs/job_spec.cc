#include "jobs/job_spec.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "common/utf8.h"
#include "yaml-cpp/yaml.h"

namespace dgt::jobs {
namespace {

absl::Status Bad(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

// How a YAML node reads in an error message: a scalar as its text, else its kind.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", node.Scalar(), "'");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

absl::Status ReadString(const YAML::Node& node, absl::string_view path, std::string* out) {
  if (!node.IsScalar()) return Bad(path, absl::StrCat("must be a string, got ", Describe(node)));
  *out = node.Scalar();
  return absl::OkStatus();
}

// Whether text is a decimal integer however large: optional sign, then digits only.
bool IsIntegerText(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "-")) absl::ConsumePrefix(&text, "+");
  return !text.empty() && absl::c_all_of(text, [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// Reads an int32 key whose valid values are [min, max] (Validate checks that range; a number
// beyond int32 is refused here with the same words, not int32's range).
absl::Status ReadInt(const YAML::Node& node, absl::string_view path, int32_t min, int32_t max,
                     int32_t* out) {
  int64_t v = 0;
  if (node.IsScalar() && IsIntegerText(node.Scalar()) &&
      (!absl::SimpleAtoi(node.Scalar(), &v) || v < INT32_MIN || v > INT32_MAX)) {
    return Bad(path, absl::StrCat("must be >= ", min, " and <= ", max, ", got ", node.Scalar()));
  }
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v)) {
    return Bad(path, absl::StrCat("must be an integer, got ", Describe(node)));
  }
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status ReadMap(const YAML::Node& node, absl::string_view path,
                     google::protobuf::Map<std::string, std::string>* out) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return Bad(path, absl::StrCat("must be a map, got ", Describe(node)));
  for (const auto& kv : node) {
    std::string key, value;
    if (!kv.first.IsScalar()) return Bad(path, "keys must be strings");
    key = kv.first.Scalar();
    if (absl::Status s = ReadString(kv.second, absl::StrCat(path, ".", key), &value); !s.ok()) {
      return s;
    }
    (*out)[key] = value;
  }
  return absl::OkStatus();
}

constexpr const char* kSpecKeys[] = {
    "name",         "command",      "code_dir",       "environment_variables", "instance_count",
    "distribution", "max_restarts", "restart_policy", "node_labels",           "spare_instances"};
constexpr const char* kDistributionKeys[] = {"type", "process_count_per_instance", "worker_count",
                                             "parameter_server_count"};

absl::Status UnknownKey(absl::string_view path, absl::string_view key, const auto& known) {
  return Bad(absl::StrCat(path, key),
             absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
}

// yaml-cpp keeps every pair of a map with a repeated key (a lookup sees the first, iteration
// all): refuse the repeat, as unknown keys are, rather than let one silently win.
absl::Status CheckDuplicateKeys(const YAML::Node& map, absl::string_view path) {
  if (!map.IsMap()) return absl::OkStatus();
  // key -> 1-based line and column of its first occurrence.
  absl::flat_hash_map<std::string, std::pair<int, int>> marks;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) continue;  // Refused by the readers ("keys must be strings").
    const std::string& key = kv.first.Scalar();
    const std::pair<int, int> mark(kv.first.Mark().line + 1, kv.first.Mark().column + 1);
    auto [it, inserted] = marks.try_emplace(key, mark);
    if (!inserted) {
      // One line twice (a flow map, "{gpu: a, gpu: b}"): the columns tell them apart.
      const auto [first_line, first_column] = it->second;
      return Bad(absl::StrCat(path, key),
                 first_line == mark.first
                     ? absl::StrCat("duplicate key (line ", mark.first, ", columns ", first_column,
                                    " and ", mark.second, ")")
                     : absl::StrCat("duplicate key (lines ", first_line, " and ", mark.first, ")"));
    }
    if (absl::Status s = CheckDuplicateKeys(kv.second, absl::StrCat(path, key, ".")); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadDistribution(const YAML::Node& node, v1::Distribution* d) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return Bad("distribution", absl::StrCat("must be a map, got ", Describe(node)));
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string path = absl::StrCat("distribution.", key);
    absl::Status s;
    if (key == "type") {
      s = ReadString(kv.second, path, d->mutable_type());
    } else if (key == "process_count_per_instance") {
      int32_t v = 0;
      s = ReadInt(kv.second, path, 1, kMaxProcessesPerInstance, &v);
      d->set_process_count_per_instance(v);
    } else if (key == "worker_count") {
      int32_t v = 0;
      s = ReadInt(kv.second, path, 1, INT32_MAX, &v);
      d->set_worker_count(v);
    } else if (key == "parameter_server_count") {
      int32_t v = 0;
      s = ReadInt(kv.second, path, 0, INT32_MAX, &v);
      d->set_parameter_server_count(v);
    } else {
      s = UnknownKey("distribution.", key, kDistributionKeys);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// A job file is UTF-8 text. Checked before YAML, by line and column (in characters, 1-based):
// - invalid UTF-8 would reach protobuf, whose serializer refuses the string field with no
//   message of ours;
// - yaml-cpp reads a raw NUL byte as the start of an escape ("\0n" becomes a newline), so the
//   shell would run what follows it.
absl::Status CheckJobFileText(absl::string_view text) {
  const size_t start = absl::StartsWith(text, "\xEF\xBB\xBF") ? 3 : 0;  // A UTF-8 byte-order mark.
  int line = 1, column = 1;
  for (size_t at = start; at < text.size();) {
    const size_t length = Utf8SequenceLength(text.substr(at));
    if (length == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "not UTF-8: byte 0x%02X at line %d, column %d (byte %d); a job file must be UTF-8",
          static_cast<unsigned char>(text[at]), line, column, at));
    }
    if (text[at] == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ", column ", column, " (byte ", at,
                       "): a NUL byte; a job file must not contain one"));
    }
    if (text[at] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    at += length;
  }
  return absl::OkStatus();
}

// A NUL byte in a string that becomes a command line, an environment entry or a file name would
// cut it short where it is used (execve, setenv); a string that is not UTF-8 cannot be sent
// (protobuf refuses it). Refused, naming the key and the byte.
absl::Status CheckString(absl::string_view path, absl::string_view value) {
  if (const size_t at = value.find('\0'); at != absl::string_view::npos) {
    return Bad(path, absl::StrCat("must not contain a NUL byte (found at byte ", at, ")"));
  }
  if (const size_t at = FirstInvalidUtf8(value); at != absl::string_view::npos) {
    return Bad(path, absl::StrFormat("must be valid UTF-8 (invalid byte 0x%02X at byte %d)",
                                     static_cast<unsigned char>(value[at]), at));
  }
  return absl::OkStatus();
}

// The first NUL byte or invalid UTF-8 in any string of `spec`, named by its key path.
absl::Status CheckStrings(const v1::JobSpec& spec) {
  for (const auto& [path, value] :
       {std::pair<absl::string_view, absl::string_view>{"command", spec.command()},
        {"name", spec.name()},
        {"code_dir", spec.code_dir()},
        {"distribution.type", spec.distribution().type()},
        {"restart_policy", spec.restart_policy()}}) {
    if (absl::Status s = CheckString(path, value); !s.ok()) return s;
  }
  for (const auto& [map_path, map] :
       {std::pair<absl::string_view, const google::protobuf::Map<std::string, std::string>*>{
            "environment_variables", &spec.environment_variables()},
        {"node_labels", &spec.node_labels()}}) {
    for (const auto& [key, value] : *map) {
      if (key.find('\0') != std::string::npos) {
        return Bad(map_path, absl::StrCat("a key must not contain a NUL byte, got '",
                                          absl::CEscape(key), "'"));
      }
      if (FirstInvalidUtf8(key) != absl::string_view::npos) {
        return Bad(map_path,
                   absl::StrCat("a key must be valid UTF-8, got '", absl::CEscape(key), "'"));
      }
      if (absl::Status s = CheckString(absl::StrCat(map_path, ".", key), value); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

bool ValidEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path) {
  CappedRead read = ReadFileUpTo(path, kMaxJobFileBytes);
  switch (read.outcome) {
    case CappedRead::Outcome::kOk:
      return std::move(read.text);
    case CappedRead::Outcome::kDirectory:
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a job file"));
    case CappedRead::Outcome::kUnreadable:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the job file ", path, ": ", std::strerror(read.error)));
    case CappedRead::Outcome::kTooLarge:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": larger than ", kMaxJobFileBytes, " bytes, the limit of a job file"));
}

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view text) {
  // Job files are UTF-8 (a UTF-8 byte-order mark is fine). A UTF-16 or UTF-32 file is refused by
  // its byte-order mark: read as YAML, its keys and values would be named wrongly in every error.
  struct Bom {
    absl::string_view bytes;
    const char* encoding;
    const char* hex;
  };
  for (const Bom& bom :
       {Bom{absl::string_view("\xFF\xFE\0\0", 4), "UTF-32 little-endian", "FF FE 00 00"},
        Bom{absl::string_view("\0\0\xFE\xFF", 4), "UTF-32 big-endian", "00 00 FE FF"},
        Bom{"\xFF\xFE", "UTF-16 little-endian", "FF FE"},
        Bom{"\xFE\xFF", "UTF-16 big-endian", "FE FF"}}) {
    if (absl::StartsWith(text, bom.bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("not UTF-8: the file starts with a ",
                                                     bom.encoding, " byte-order mark (", bom.hex,
                                                     "); save it as UTF-8"));
    }
  }
  if (absl::Status s = CheckJobFileText(text); !s.ok()) return s;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid YAML: line ", e.mark.line + 1, ": ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "must be a map of job keys (command, instance_count, ...), got ", Describe(root)));
  }
  if (absl::Status s = CheckDuplicateKeys(root, ""); !s.ok()) return s;
  v1::JobSpec spec;
  bool pcpi_set = false;
  try {
    for (const auto& kv : root) {
      if (!kv.first.IsScalar()) return absl::InvalidArgumentError("keys must be strings");
      const std::string key = kv.first.Scalar();
      absl::Status s;
      int32_t v = 0;
      if (key == "name") {
        s = ReadString(kv.second, key, spec.mutable_name());
      } else if (key == "command") {
        s = ReadString(kv.second, key, spec.mutable_command());
      } else if (key == "code_dir") {
        s = ReadString(kv.second, key, spec.mutable_code_dir());
      } else if (key == "environment_variables") {
        s = ReadMap(kv.second, key, spec.mutable_environment_variables());
      } else if (key == "instance_count") {
        s = ReadInt(kv.second, key, 1, kMaxInstanceCount, &v);
        spec.set_instance_count(v);
      } else if (key == "distribution") {
        s = ReadDistribution(kv.second, spec.mutable_distribution());
        pcpi_set = kv.second.IsMap() && kv.second["process_count_per_instance"].IsDefined();
      } else if (key == "max_restarts") {
        s = ReadInt(kv.second, key, 0, kMaxRestarts, &v);
        spec.set_max_restarts(v);
      } else if (key == "restart_policy") {
        s = ReadString(kv.second, key, spec.mutable_restart_policy());
      } else if (key == "node_labels") {
        s = ReadMap(kv.second, key, spec.mutable_node_labels());
      } else if (key == "spare_instances") {
        s = ReadInt(kv.second, key, 0, kMaxSpareInstances, &v);
        spec.set_spare_instances(v);
      } else {
        s = UnknownKey("", key, kSpecKeys);
      }
      if (!s.ok()) return s;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid YAML: line ", e.mark.line + 1, ": ", e.msg));
  }
  if (!pcpi_set) spec.mutable_distribution()->set_process_count_per_instance(1);
  return spec;
}

absl::Status Validate(const v1::JobSpec& spec) {
  if (spec.command().empty()) {
    return Bad("command", "required (the shell command every worker process runs)");
  }
  if (absl::Status s = CheckStrings(spec); !s.ok()) return s;
  if (spec.name().size() > kMaxNameBytes) {
    return Bad("name",
               absl::StrCat("must be at most ", kMaxNameBytes, " bytes, got ", spec.name().size()));
  }
  if (!spec.code_dir().empty() && spec.code_dir()[0] != '/') {
    return Bad("code_dir", absl::StrCat("must be an absolute path, got '", spec.code_dir(), "'"));
  }
  for (const auto& [name, value] : spec.environment_variables()) {
    if (!ValidEnvName(name)) {
      return Bad(absl::StrCat("environment_variables.", name),
                 "name must match [A-Za-z_][A-Za-z0-9_]*");
    }
  }
  const int32_t n = spec.instance_count();
  if (n < 1 || n > kMaxInstanceCount) {
    return Bad("instance_count",
               absl::StrCat("must be >= 1", n > 0 ? " and <= " : "",
                            n > 0 ? absl::StrCat(kMaxInstanceCount) : "", ", got ", n));
  }
  const v1::Distribution& d = spec.distribution();
  if (d.type() == "mpi") {
    return Bad("distribution.type", "'mpi' is not supported by dgt-run (pytorch or tensorflow)");
  }
  if (!d.type().empty() && d.type() != "pytorch" && d.type() != "tensorflow") {
    return Bad("distribution.type",
               absl::StrCat("must be pytorch or tensorflow, got '", d.type(), "'"));
  }
  const int32_t p = d.process_count_per_instance();
  if (p < 1 || p > kMaxProcessesPerInstance) {
    return Bad(
        "distribution.process_count_per_instance",
        absl::StrCat("must be >= 1",
                     p > 0 ? absl::StrCat(" and <= ", kMaxProcessesPerInstance) : "", ", got ", p));
  }
  if (d.type() == "tensorflow") {
    if (d.worker_count() < 1) {
      return Bad("distribution.worker_count",
                 absl::StrCat("must be >= 1 for tensorflow, got ", d.worker_count()));
    }
    if (d.parameter_server_count() < 0) {
      return Bad("distribution.parameter_server_count",
                 absl::StrCat("must be >= 0, got ", d.parameter_server_count()));
    }
    const int64_t processes = static_cast<int64_t>(n) * p;
    if (int64_t{d.worker_count()} + d.parameter_server_count() != processes) {
      return Bad("distribution",
                 absl::StrCat("worker_count (", d.worker_count(), ") + parameter_server_count (",
                              d.parameter_server_count(), ") must equal instance_count (", n,
                              ") x process_count_per_instance (", p, ") = ", processes));
    }
  } else if (d.worker_count() != 0 || d.parameter_server_count() != 0) {
    return Bad(
        d.worker_count() != 0 ? "distribution.worker_count" : "distribution.parameter_server_count",
        "only for distribution.type tensorflow");
  }
  if (spec.max_restarts() < 0 || spec.max_restarts() > kMaxRestarts) {
    return Bad("max_restarts",
               absl::StrCat("must be >= 0 and <= ", kMaxRestarts, ", got ", spec.max_restarts()));
  }
  if (!spec.restart_policy().empty() && spec.restart_policy() != "group" &&
      spec.restart_policy() != "rank") {
    return Bad("restart_policy",
               absl::StrCat("must be group or rank, got '", spec.restart_policy(), "'"));
  }
  for (const auto& [key, value] : spec.node_labels()) {
    if (key.empty()) return Bad("node_labels", "a label key must not be empty");
  }
  const int32_t spares = spec.spare_instances();
  if (spares < 0 || spares > kMaxSpareInstances) {
    return Bad("spare_instances",
               absl::StrCat("must be >= 0 and <= ", kMaxSpareInstances, ", got ", spares));
  }
  if (spares > 0 && d.type() == "tensorflow") {
    // TF_CONFIG names every worker's address: a spare cannot take a lost worker's place in it.
    return Bad("spare_instances", "only for distribution.type pytorch (tensorflow has none)");
  }
  return absl::OkStatus();
}

bool ValidJobId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxJobIdBytes) return false;
  for (char c : id) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace dgt::jobs
