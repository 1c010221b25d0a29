#include "cli/status_command.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "rendezvous/client.h"

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

int RunStatus(const StatusFlags& f) {
  auto hp = ParseHostPort(f.endpoint, 29400, "--rdzv-endpoint");
  auto timeout = ParseDuration("--timeout", f.timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
  absl::Status bad = !hp.ok() ? hp.status() : timeout.status();
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
  auto channel = dgt::rendezvous::CreateClientChannel(FormatHostPort(hp->host, hp->port), client);
  if (!channel.ok()) {
    std::fprintf(stderr, "dgt status: error: %s\n",
                 std::string(channel.status().message()).c_str());
    return 2;
  }
  grpc::ClientContext ctx;
  dgt::rendezvous::AuthorizeCall(client, &ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + *timeout));
  auto stub = dgt::rendezvous::NewRendezvousStub(*channel);
  v1::GetStatusRequest request;
  request.set_run_id(f.run_id);
  v1::GetStatusResponse response;
  grpc::Status st = stub->GetStatus(&ctx, request, &response);
  if (!st.ok()) {
    // One line in dgt-run's words, exit codes as docs/EXIT_CODES.md; gRPC's own text ("failed to
    // connect to all addresses; last error: UNKNOWN: ipv4:...") only for the other codes.
    switch (st.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        std::fprintf(stderr,
                     "dgt status: error: cannot reach the rendezvous service at %s within %s "
                     "(is dgt-rendezvous running there? with TLS, pass --rdzv-tls-ca)\n",
                     f.endpoint.c_str(), absl::FormatDuration(*timeout).c_str());
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
                 f.endpoint.c_str());
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
      std::string rank = n.node_rank() >= 0 ? absl::StrCat(n.node_rank()) : "waiting";
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
  CLI::App* cmd = app.add_subcommand("status",
                                     "Runs, rounds, nodes and ranks of a rendezvous "
                                     "service");
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", flags->endpoint, "dgt-rendezvous HOST[:PORT]")
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
