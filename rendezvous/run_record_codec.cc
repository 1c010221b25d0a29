#include "rendezvous/run_record_codec.h"

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace dgt::rendezvous {
namespace {

using nlohmann::json;

// About this many nodes per bucket key.
constexpr int kNodesPerBucket = 32;

json TimeToJson(absl::Time t) {
  if (t == absl::InfiniteFuture()) return "inf";
  if (t == absl::InfinitePast()) return "-inf";
  return absl::ToUnixNanos(t);
}

json DurationToJson(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  if (d == -absl::InfiniteDuration()) return "-inf";
  return absl::ToInt64Nanoseconds(d);
}

json OptionalTime(const std::optional<absl::Time>& t) {
  return t.has_value() ? TimeToJson(*t) : json(nullptr);
}

json FailureToJson(const WorkerFailure& f) {
  return json{{"rank", f.rank},     {"local_rank", f.local_rank}, {"exit_code", f.exit_code},
              {"signal", f.signal}, {"node_id", f.node_id},       {"time", TimeToJson(f.time)}};
}

json OptionalFailure(const std::optional<WorkerFailure>& f) {
  return f.has_value() ? FailureToJson(*f) : json(nullptr);
}

json OptionalString(const std::optional<std::string>& s) {
  return s.has_value() ? json(*s) : json(nullptr);
}

// A node as a JSON array (compact: a bucket of 100 nodes is about 7 KB):
// [node_id, session, address, nproc, store_port, node_rank, succeeded, failed, last_contact].
json NodeToJson(const NodeRecord& n) {
  return json::array({n.node_id, n.session, n.address, n.nproc, n.store_port, n.node_rank,
                      n.succeeded, n.failed, TimeToJson(n.last_contact)});
}

// The run without its nodes (they are in the bucket keys).
json RunToJson(const RunRecord& r) {
  json failures = json::array();
  for (const WorkerFailure& f : r.failures) failures.push_back(FailureToJson(f));
  return json{
      {"run_id", r.run_id},
      {"min_nodes", r.min_nodes},
      {"max_nodes", r.max_nodes},
      {"nproc_per_node", r.nproc_per_node},
      {"max_restarts", r.max_restarts},
      {"spare_nodes", r.spare_nodes},
      {"in_place_spares", r.in_place_spares},
      {"last_call_timeout", DurationToJson(r.last_call_timeout)},
      {"join_timeout", DurationToJson(r.join_timeout)},
      {"state", RunStateName(r.state)},
      {"connected", r.connected},
      {"members", r.members},
      {"succeeded", r.succeeded},
      {"round", r.round},
      {"restart_count", r.restart_count},
      {"world_size", r.world_size},
      {"master_addr", r.master_addr},
      {"master_port", r.master_port},
      {"last_call_deadline", OptionalTime(r.last_call_deadline)},
      {"join_deadline", OptionalTime(r.join_deadline)},
      {"scale_up_deadline", OptionalTime(r.scale_up_deadline)},
      {"failures", std::move(failures)},
      {"failure_messages", r.failure_messages},
      {"failure_deadline", OptionalTime(r.failure_deadline)},
      {"recovering", r.recovering},
      {"expected_members", r.expected_members},
      {"rank_rejoined", r.rank_rejoined},
      {"rejoin_deadline", OptionalTime(r.rejoin_deadline)},
      {"deferred_restart", OptionalString(r.deferred_restart)},
      {"pending_reason", OptionalString(r.pending_reason)},
      {"pending_restart_increment", r.pending_restart_increment},
      {"outcome", r.outcome},
      {"finished", json{{"succeeded", r.finished.succeeded},
                        {"message", r.finished.message},
                        {"failure", OptionalFailure(r.finished.failure)},
                        {"too_few_nodes", r.finished.too_few_nodes}}},
      {"closed_at", TimeToJson(r.closed_at)},
  };
}

// Reads typed values out of parsed JSON without exceptions: the first mismatch is kept (error())
// and every later read returns a default value.
class Reader {
 public:
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  void Fail(std::string error) {
    if (ok()) error_ = std::move(error);
  }

  // The member `key` of `obj`; null (and an error) when `obj` is not an object or lacks it.
  const json* Member(const json& obj, const char* key) {
    if (!ok()) return nullptr;
    if (!obj.is_object()) {
      Fail(absl::StrCat("\"", key, "\" is not in a JSON object"));
      return nullptr;
    }
    auto it = obj.find(key);
    if (it == obj.end()) {
      Fail(absl::StrCat("no \"", key, "\""));
      return nullptr;
    }
    return &*it;
  }

  // `j` as a T (an integer, bool, string, or a vector of bool or string); `what` names it in the
  // error.
  template <typename T>
  T As(const json& j, absl::string_view what) {
    if (!ok()) return T{};
    if constexpr (std::is_same_v<T, bool>) {
      if (j.is_boolean()) return j.get<bool>();
      Fail(absl::StrCat("\"", what, "\" is not a boolean"));
    } else if constexpr (std::is_integral_v<T>) {
      if (j.is_number_integer()) return j.get<T>();
      Fail(absl::StrCat("\"", what, "\" is not an integer"));
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (j.is_string()) return j.get<std::string>();
      Fail(absl::StrCat("\"", what, "\" is not a string"));
    } else {
      static_assert(std::is_same_v<T, std::vector<bool>> ||
                    std::is_same_v<T, std::vector<std::string>>);
      using Element = typename T::value_type;
      T out;
      if (!j.is_array()) {
        Fail(absl::StrCat("\"", what, "\" is not an array"));
        return out;
      }
      for (const json& e : j) out.push_back(As<Element>(e, what));
      return out;
    }
    return T{};
  }

  template <typename T>
  T Get(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    return j != nullptr ? As<T>(*j, key) : T{};
  }

  // A time: Unix nanoseconds, or "inf" / "-inf".
  absl::Time TimeAs(const json& j, absl::string_view what) {
    if (!ok()) return absl::InfinitePast();
    if (j.is_string()) {
      const std::string& s = j.get_ref<const std::string&>();
      if (s == "inf") return absl::InfiniteFuture();
      if (s == "-inf") return absl::InfinitePast();
    } else if (j.is_number_integer()) {
      return absl::FromUnixNanos(j.get<int64_t>());
    }
    Fail(absl::StrCat("\"", what, "\" is not a time (nanoseconds, \"inf\" or \"-inf\")"));
    return absl::InfinitePast();
  }
  absl::Time Time(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    return j != nullptr ? TimeAs(*j, key) : absl::InfinitePast();
  }

  // A duration: nanoseconds, or "inf" / "-inf".
  absl::Duration Duration(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    if (j == nullptr) return absl::ZeroDuration();
    if (j->is_string()) {
      const std::string& s = j->get_ref<const std::string&>();
      if (s == "inf") return absl::InfiniteDuration();
      if (s == "-inf") return -absl::InfiniteDuration();
    } else if (j->is_number_integer()) {
      return absl::Nanoseconds(j->get<int64_t>());
    }
    Fail(absl::StrCat("\"", key, "\" is not a duration (nanoseconds, \"inf\" or \"-inf\")"));
    return absl::ZeroDuration();
  }

  std::optional<absl::Time> OptionalTime(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    if (j == nullptr || j->is_null()) return std::nullopt;
    return TimeAs(*j, key);
  }

  std::optional<std::string> OptionalString(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    if (j == nullptr || j->is_null()) return std::nullopt;
    return As<std::string>(*j, key);
  }

  WorkerFailure Failure(const json& j) {
    WorkerFailure f;
    f.rank = Get<int32_t>(j, "rank");
    f.local_rank = Get<int32_t>(j, "local_rank");
    f.exit_code = Get<int32_t>(j, "exit_code");
    f.signal = Get<int32_t>(j, "signal");
    f.node_id = Get<std::string>(j, "node_id");
    f.time = Time(j, "time");
    return f;
  }

  std::optional<WorkerFailure> OptionalFailure(const json& obj, const char* key) {
    const json* j = Member(obj, key);
    if (j == nullptr || j->is_null()) return std::nullopt;
    return Failure(*j);
  }

  RunState State(const json& obj, const char* key) {
    const std::string name = Get<std::string>(obj, key);
    if (!ok()) return RunState::kGathering;
    for (RunState s : {RunState::kGathering, RunState::kRunning, RunState::kClosed}) {
      if (name == RunStateName(s)) return s;
    }
    Fail(absl::StrCat("unknown state '", name, "'"));
    return RunState::kGathering;
  }

  NodeRecord Node(const json& j) {
    NodeRecord node;
    if (!j.is_array() || j.size() != 9) {
      Fail("a node is not an array of 9");
      return node;
    }
    node.node_id = As<std::string>(j[0], "node_id");
    node.session = As<SessionId>(j[1], "session");
    node.address = As<std::string>(j[2], "address");
    node.nproc = As<int32_t>(j[3], "nproc");
    node.store_port = As<int32_t>(j[4], "store_port");
    node.node_rank = As<int32_t>(j[5], "node_rank");
    node.succeeded = As<bool>(j[6], "succeeded");
    node.failed = As<bool>(j[7], "failed");
    node.last_contact = TimeAs(j[8], "last_contact");
    return node;
  }

  RunRecord Run(const json& j) {
    RunRecord r;
    r.run_id = Get<std::string>(j, "run_id");
    r.min_nodes = Get<int32_t>(j, "min_nodes");
    r.max_nodes = Get<int32_t>(j, "max_nodes");
    r.nproc_per_node = Get<int32_t>(j, "nproc_per_node");
    r.max_restarts = Get<int32_t>(j, "max_restarts");
    // Absent in a record an older replica wrote: no spares.
    r.spare_nodes = j.contains("spare_nodes") ? Get<int32_t>(j, "spare_nodes") : 0;
    r.in_place_spares = j.contains("in_place_spares") && Get<bool>(j, "in_place_spares");
    r.last_call_timeout = Duration(j, "last_call_timeout");
    r.join_timeout = Duration(j, "join_timeout");
    r.state = State(j, "state");
    r.connected = Get<int32_t>(j, "connected");
    r.members = Get<int32_t>(j, "members");
    r.succeeded = Get<int32_t>(j, "succeeded");
    r.round = Get<int64_t>(j, "round");
    r.restart_count = Get<int32_t>(j, "restart_count");
    r.world_size = Get<int32_t>(j, "world_size");
    r.master_addr = Get<std::string>(j, "master_addr");
    r.master_port = Get<int32_t>(j, "master_port");
    r.last_call_deadline = OptionalTime(j, "last_call_deadline");
    r.join_deadline = OptionalTime(j, "join_deadline");
    r.scale_up_deadline = OptionalTime(j, "scale_up_deadline");
    if (const json* failures = Member(j, "failures"); failures != nullptr) {
      if (!failures->is_array()) Fail("\"failures\" is not an array");
      for (const json& f : *failures) {
        if (!ok()) break;
        r.failures.push_back(Failure(f));
      }
    }
    r.failure_messages = Get<std::vector<std::string>>(j, "failure_messages");
    r.failure_deadline = OptionalTime(j, "failure_deadline");
    r.recovering = Get<bool>(j, "recovering");
    r.expected_members = Get<int32_t>(j, "expected_members");
    r.rank_rejoined = Get<std::vector<bool>>(j, "rank_rejoined");
    r.rejoin_deadline = OptionalTime(j, "rejoin_deadline");
    r.deferred_restart = OptionalString(j, "deferred_restart");
    r.pending_reason = OptionalString(j, "pending_reason");
    r.pending_restart_increment = Get<int32_t>(j, "pending_restart_increment");
    r.outcome = Get<std::string>(j, "outcome");
    if (const json* finished = Member(j, "finished"); finished != nullptr) {
      r.finished.succeeded = Get<bool>(*finished, "succeeded");
      r.finished.message = Get<std::string>(*finished, "message");
      r.finished.failure = OptionalFailure(*finished, "failure");
      r.finished.too_few_nodes =
          finished->contains("too_few_nodes") && Get<bool>(*finished, "too_few_nodes");
    }
    r.closed_at = Time(j, "closed_at");
    return r;
  }

 private:
  std::string error_;
};

}  // namespace

int NodeBuckets(int32_t max_nodes) {
  const int64_t wanted = (static_cast<int64_t>(max_nodes) + kNodesPerBucket - 1) / kNodesPerBucket;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, kMaxNodeBuckets));
}

int NodeBucket(absl::string_view node_id, int buckets) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits: stable across builds and hosts.
  for (unsigned char c : node_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int>(h % static_cast<uint64_t>(std::max(buckets, 1)));
}

std::string EncodeRunRecord(const RunRecord& run, absl::string_view writer, int buckets) {
  return json{{"version", kRunRecordVersion},
              {"writer", std::string(writer)},
              {"buckets", buckets},
              {"run", RunToJson(run)}}
      .dump();
}

namespace {

// The bytes of `text` as a JSON string, quotes included, as nlohmann::json's dump writes it
// (control bytes escaped, other bytes as they are).
int64_t JsonStringBytes(absl::string_view text) {
  int64_t bytes = 2;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') {
      bytes += 2;
    } else if (u < 0x20) {
      bytes += 6;
    } else {
      bytes += 1;
    }
  }
  return bytes;
}

}  // namespace

int64_t NodeEntryBytesBound(absl::string_view node_id, absl::string_view address) {
  // [id,session,address,nproc,store_port,node_rank,succeeded,failed,last_contact] and the comma
  // before the next entry: 2 brackets + 9 separators, a uint64 (20), three int32 (11 each), two
  // "false" (5 each) and an int64 of nanoseconds (20).
  constexpr int64_t kRest = 2 + 9 + 20 + 3 * 11 + 2 * 5 + 20;
  return JsonStringBytes(node_id) + JsonStringBytes(address) + kRest;
}

absl::Status CheckRunFitsRequest(int64_t nodes, absl::string_view node_id,
                                 absl::string_view address, int64_t max_request_bytes) {
  const int64_t per_node = NodeEntryBytesBound(node_id, address);
  const int64_t room = max_request_bytes - kRunWriteReserveBytes;
  const int64_t fit = room > 0 ? room / per_node : 0;
  if (nodes <= fit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--nnodes MAX with --spare-nodes: ", nodes, " nodes need up to ",
                   nodes * per_node + kRunWriteReserveBytes,
                   " bytes in one etcd write; this dgt-rendezvous allows ", max_request_bytes,
                   " (--etcd-max-request-bytes, as etcd's --max-request-bytes), enough for ", fit,
                   " nodes like this one"));
}

std::string EncodeNodeBucket(const std::vector<const NodeRecord*>& nodes) {
  json list = json::array();
  for (const NodeRecord* n : nodes) list.push_back(NodeToJson(*n));
  return json{{"version", kRunRecordVersion}, {"nodes", std::move(list)}}.dump();
}

absl::StatusOr<std::vector<NodeRecord>> DecodeNodeBucket(absl::string_view value) {
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("node bucket: not a JSON object");
  }
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kRunRecordVersion) {
    return absl::UnimplementedError(absl::StrCat("node bucket: not version ", kRunRecordVersion,
                                                 " (this dgt reads version ", kRunRecordVersion,
                                                 ")"));
  }
  Reader reader;
  std::vector<NodeRecord> nodes;
  if (const json* list = reader.Member(j, "nodes"); list != nullptr) {
    if (!list->is_array()) reader.Fail("\"nodes\" is not an array");
    for (const json& n : *list) {
      if (!reader.ok()) break;
      nodes.push_back(reader.Node(n));
    }
  }
  if (!reader.ok())
    return absl::InvalidArgumentError(absl::StrCat("node bucket: ", reader.error()));
  return nodes;
}

absl::StatusOr<RunRecord> DecodeRunRecord(absl::string_view value, std::string* writer,
                                          int* buckets) {
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("run record: not a JSON object");
  }
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer()) {
    return absl::InvalidArgumentError("run record: no integer \"version\"");
  }
  if (version->get<int64_t>() != kRunRecordVersion) {
    return absl::UnimplementedError(absl::StrCat("run record: version ", version->get<int64_t>(),
                                                 " (this dgt reads version ", kRunRecordVersion,
                                                 ")"));
  }
  Reader reader;
  std::string w = reader.Get<std::string>(j, "writer");
  const int b = reader.Get<int>(j, "buckets");
  if (reader.ok() && (b < 1 || b > kMaxNodeBuckets)) {
    return absl::InvalidArgumentError(
        absl::StrCat("run record: \"buckets\" ", b, " is not in 1..", kMaxNodeBuckets));
  }
  RunRecord run;
  if (const json* r = reader.Member(j, "run"); r != nullptr) run = reader.Run(*r);
  if (!reader.ok()) return absl::InvalidArgumentError(absl::StrCat("run record: ", reader.error()));
  if (writer != nullptr) *writer = std::move(w);
  if (buckets != nullptr) *buckets = b;
  return run;
}

}  // namespace dgt::rendezvous
