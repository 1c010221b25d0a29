#include "cli/status_command.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "rendezvous/client.h"
#include "replica/endpoint_list.h"

namespace dgt::cli {
namespace {

namespace v1 = ::dgt::rendezvous::v1;

// proto3's JSON mapping writes int64 fields as strings; `round` is the only int64 in the status
// messages, and scripts (jq, Python) expect a number. Converts every "round" string back.
void RoundsAsNumbers(nlohmann::ordered_json& j) {
  if (j.is_object()) {
    for (auto& [key, value] : j.items()) {
      if (key == "round" && value.is_string()) {
        value = std::stoll(value.get<std::string>());
      } else {
        RoundsAsNumbers(value);
      }
    }
  } else if (j.is_array()) {
    for (auto& e : j) RoundsAsNumbers(e);
  }
}

struct StatusFlags {
  std::string endpoint = "127.0.0.1:29400";
  std::string run_id;
  std::string tls_ca, tls_cert, tls_key, token_file;
  std::string timeout = "10";
  bool json = false;
};

// One GetStatus call to `endpoint`, bounded by `deadline`.
grpc::Status QueryStatus(const std::string& endpoint, const dgt::rendezvous::ClientOptions& client,
                         const std::string& run_id, absl::Time deadline,
                         v1::GetStatusResponse* response) {
  auto channel = dgt::rendezvous::CreateClientChannel(endpoint, client);
  if (!channel.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(channel.status().message()));
  }
  grpc::ClientContext ctx;
  dgt::rendezvous::AuthorizeCall(client, &ctx);
  ctx.set_deadline(absl::ToChronoTime(deadline));
  auto stub = dgt::rendezvous::NewRendezvousStub(*channel);
  v1::GetStatusRequest request;
  request.set_run_id(run_id);
  return stub->GetStatus(&ctx, request, response);
}

int RunStatus(const StatusFlags& f) {
  // One service, or the replicas of one (as dgt-run's --rdzv-endpoint A,B): the leader's answer,
  // else the first standby's.
  auto list = replica::ParseEndpointList(f.endpoint, 29400, "--rdzv-endpoint");
  auto timeout = ParseDuration("--timeout", f.timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
  absl::Status bad = !list.ok() ? list.status() : timeout.status();
  if (!bad.ok()) {
    std::fprintf(stderr, "dgt status: error: %s\n", std::string(bad.message()).c_str());
    return 2;
  }
  dgt::rendezvous::ClientOptions client;
  client.tls = {f.tls_cert, f.tls_key, f.tls_ca};
  if (!f.token_file.empty()) {
    auto token = dgt::rendezvous::ReadTokenFile(f.token_file);
    if (!token.ok()) {
      std::fprintf(stderr, "dgt status: error: %s\n",
                   std::string(token.status().message()).c_str());
      return 2;
    }
    client.token = *std::move(token);
  }
  const absl::Time deadline = absl::Now() + *timeout;
  v1::GetStatusResponse response;
  std::string answered;  // The endpoint whose answer `response` is.
  grpc::Status st;
  for (const HostPort& hp : *list) {
    const std::string endpoint = FormatHostPort(hp.host, hp.port);
    v1::GetStatusResponse r;
    grpc::Status s = QueryStatus(endpoint, client, f.run_id, deadline, &r);
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      std::fprintf(stderr, "dgt status: error: %s\n", s.error_message().c_str());
      return 2;
    }
    if (!s.ok()) {
      // The most telling failure: a refusal over "unreachable".
      if (st.ok() || st.error_code() == grpc::StatusCode::UNAVAILABLE ||
          st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        st = s;
      }
      continue;
    }
    if (answered.empty() || r.from_leader()) {
      response = std::move(r);
      answered = endpoint;
    }
    if (response.from_leader()) break;
  }
  if (answered.empty()) {
    // One line in dgt-run's words, exit codes as docs/EXIT_CODES.md; gRPC's own text ("failed to
    // connect to all addresses; last error: UNKNOWN: ipv4:...") only for the other codes.
    const std::string where = list->size() == 1
                                  ? absl::StrCat("the rendezvous service at ", f.endpoint)
                                  : absl::StrCat("any of the rendezvous replicas at ", f.endpoint);
    switch (st.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        std::fprintf(stderr,
                     "dgt status: error: cannot reach %s within %s (is dgt-rendezvous running "
                     "there? with TLS, pass --rdzv-tls-ca)\n",
                     where.c_str(), absl::FormatDuration(*timeout).c_str());
        return 69;  // Rendezvous unavailable.
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        std::fprintf(stderr, "dgt status: error: the rendezvous service at %s refused: %s\n",
                     f.endpoint.c_str(), st.error_message().c_str());
        return 77;  // Not admitted.
      default:
        std::fprintf(stderr, "dgt status: error: %s: %s\n", f.endpoint.c_str(),
                     st.error_message().c_str());
        return 1;
    }
  }
  if (!response.replica().empty() && !f.json) {
    // A replica (dgt-rendezvous --backend=etcd): which one answered, and whether it leads.
    std::printf("replica %s at %s: %s\n", response.replica().c_str(), answered.c_str(),
                response.from_leader()
                    ? "the leader"
                    : absl::StrCat("a standby (leader: ",
                                   response.leader_address().empty() ? "none known"
                                                                     : response.leader_address(),
                                   "; its runs may lag the leader's)")
                          .c_str());
  }
  if (f.json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;  // node_rank 0 and round 0 are values too.
    (void)google::protobuf::util::MessageToJsonString(response, &out, options);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(out);
    RoundsAsNumbers(j);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::fputs(
        FormatStatus(response, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())).c_str(),
        stdout);
  }
  if (!f.run_id.empty() && response.runs_size() == 0) {
    std::fprintf(stderr, "dgt status: run '%s' is not known to %s\n", f.run_id.c_str(),
                 list->size() == 1 ? f.endpoint.c_str() : answered.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

std::string FormatStatus(const v1::GetStatusResponse& status, double now_unix_s) {
  if (status.runs_size() == 0) return "no runs\n";
  std::string out;
  for (const v1::RunStatus& r : status.runs()) {
    absl::StrAppend(&out, "run ", r.run_id(), ": ", r.state(), ", round ", r.round(), ", restarts ",
                    r.restart_count(), ", nodes ", r.nodes_size(), " (min ", r.min_nodes(),
                    ", max ", r.max_nodes(), "), world size ", r.world_size());
    if (!r.master_addr().empty()) {
      absl::StrAppend(&out, ", master ",
                      FormatHostPort(r.master_addr(), static_cast<uint16_t>(r.master_port())));
    }
    absl::StrAppend(&out, "\n");
    if (!r.outcome().empty()) absl::StrAppend(&out, "  outcome: ", r.outcome(), "\n");
    absl::StrAppend(&out, absl::StrFormat("  %-9s %-24s %-40s %5s %s\n", "NODE RANK", "NODE ID",
                                          "ADDRESS", "NPROC", "LAST CONTACT"));
    for (const v1::NodeStatus& n : r.nodes()) {
      // A node without a rank while a round runs is a hot spare (docs/RENDEZVOUS.md).
      std::string rank = n.node_rank() >= 0       ? absl::StrCat(n.node_rank())
                         : r.state() == "running" ? "spare"
                                                  : "waiting";
      absl::StrAppend(&out, absl::StrFormat("  %-9s %-24s %-40s %5d %.1f s ago%s\n", rank,
                                            n.node_id(), n.address(), n.nproc_per_node(),
                                            now_unix_s - n.last_contact_unix_s(),
                                            n.succeeded() ? " (succeeded)" : ""));
    }
  }
  return out;
}

void AddStatusCommand(CLI::App& app, std::function<int()>* run) {
  auto flags = std::make_shared<StatusFlags>();
  // As the job commands (cli/jobs_command.cc): $DGT_RDZV_ENDPOINT is the default endpoint.
  if (const char* env = std::getenv("DGT_RDZV_ENDPOINT"); env != nullptr && *env != '\0') {
    flags->endpoint = env;
  }
  CLI::App* cmd = app.add_subcommand("status",
                                     "Runs, rounds, nodes and ranks of a rendezvous "
                                     "service");
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", flags->endpoint,
                  "dgt-rendezvous HOST[:PORT], or its replicas' A,B,... (the leader answers; "
                  "default $DGT_RDZV_ENDPOINT, else 127.0.0.1:29400)")
      ->capture_default_str();
  cmd->add_option("--rdzv-id,--rdzv_id", flags->run_id, "Only this run");
  cmd->add_option("--rdzv-tls-ca", flags->tls_ca, "PEM CA of the service's certificate");
  cmd->add_option("--rdzv-tls-cert", flags->tls_cert, "PEM client certificate (mutual TLS)");
  cmd->add_option("--rdzv-tls-key", flags->tls_key, "PEM client key (mutual TLS)");
  cmd->add_option("--rdzv-token-file", flags->token_file, "File holding the bearer token");
  cmd->add_option("--timeout", flags->timeout, "Seconds to wait for the service (up to a year)")
      ->type_name("SECONDS")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print the status as JSON");
  cmd->callback([flags, run] { *run = [flags] { return RunStatus(*flags); }; });
}

}  // namespace dgt::cli
