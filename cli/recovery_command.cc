#include "cli/recovery_command.h"

#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "common/flag_parse.h"
#include "common/host_port.h"
#include "dgt/store/client.h"
#include "dgt/worker/recovery_keys.h"

namespace dgt::cli {
namespace {

struct FailFlags {
  std::string endpoint = "127.0.0.1:29500";
  std::string rank;
  std::string group = "world";
  std::string reason = "reported by dgt recovery fail";
  std::string timeout = "10";
};

int RunFail(const FailFlags& f) {
  auto hp = ParseHostPort(f.endpoint, -1, "--endpoint");
  auto rank = ParseInt64("--rank", f.rank, 0, std::numeric_limits<int32_t>::max());
  auto timeout = ParseDuration("--timeout", f.timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
  absl::Status bad = !hp.ok() ? hp.status() : !rank.ok() ? rank.status() : timeout.status();
  if (!bad.ok()) {
    std::cerr << "dgt recovery fail: error: " << bad.message() << "\n";
    return 2;
  }
  store::ClientOptions o;
  o.host = hp->host;
  o.port = hp->port;
  o.timeout = *timeout;
  auto client = store::Client::Connect(o);
  if (!client.ok()) {
    std::cerr << "dgt recovery fail: " << client.status().message() << "\n";
    return 1;
  }
  auto g =
      worker::recovery::PublishRankFailure(**client, f.group, static_cast<int>(*rank), f.reason);
  if (!g.ok()) {
    std::cerr << "dgt recovery fail: " << g.status().message() << "\n";
    return 1;
  }
  std::cout << "generation " << *g << "\n";
  return 0;
}

}  // namespace

void AddRecoveryCommand(CLI::App& app, std::function<int()>* run) {
  CLI::App* rec = app.add_subcommand("recovery", "In-place recovery of a job's ranks");
  rec->require_subcommand(1);
  auto flags = std::make_shared<FailFlags>();
  CLI::App* fail = rec->add_subcommand(
      "fail", "Report a rank as failed: opens the next generation and lists the rank in it");
  fail->add_option("--endpoint", flags->endpoint, "The job's store, host:port");
  fail->add_option("--rank", flags->rank, "The failed global rank")->required()->type_name("INT");
  fail->add_option("--group", flags->group, "Recovery group name");
  fail->add_option("--reason", flags->reason, "Why (stored with the generation)");
  fail->add_option("--timeout", flags->timeout, "Seconds to reach the store (up to a year)")
      ->type_name("SECONDS");
  fail->callback([flags, run] { *run = [flags] { return RunFail(*flags); }; });
}

}  // namespace dgt::cli
