#include "cli/store_command.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "dgt/store/client.h"
#include "dgt/store/server.h"

namespace dgt::cli {
namespace {

// Numbers stay text until common/flag_parse.h checks them (CLI11 would take "-5" into a
// uint64_t as a huge limit, and "nan" seconds).
struct ServeFlags {
  std::string listen = "127.0.0.1:29500";
  // ServerOptions' defaults, as text.
  std::string max_key_bytes = absl::StrCat(store::ServerOptions{}.max_key_bytes);
  std::string max_value_bytes = absl::StrCat(store::ServerOptions{}.max_value_bytes);
  std::string max_keys_per_request = absl::StrCat(store::ServerOptions{}.max_keys_per_request);
  std::string max_connections = absl::StrCat(store::ServerOptions{}.max_connections);
  std::string idle_timeout = "0";
};

struct ClientFlags {
  std::string endpoint = "127.0.0.1:29500";
  std::string protocol = "v2";
  std::string timeout = "30";
};

// Largest accepted limits: values and keys the wire's u64 lengths and the client's 4 GiB reply
// bound can carry, and more connections than any file-descriptor limit allows.
constexpr int64_t kMaxKeyBytes = int64_t{1} << 30;
constexpr int64_t kMaxValueBytes = int64_t{1} << 32;
constexpr int64_t kMaxKeysPerRequest = int64_t{1} << 24;
constexpr int64_t kMaxConnections = int64_t{1} << 20;

// Fills `options` from the --max-* and --idle-timeout text.
absl::Status ParseServeLimits(const ServeFlags& f, store::ServerOptions* options) {
  for (const auto& [flag, text, max, target] :
       {std::tuple<const char*, const std::string&, int64_t, uint64_t*>{
            "--max-key-bytes", f.max_key_bytes, kMaxKeyBytes, &options->max_key_bytes},
        {"--max-value-bytes", f.max_value_bytes, kMaxValueBytes, &options->max_value_bytes},
        {"--max-keys-per-request", f.max_keys_per_request, kMaxKeysPerRequest,
         &options->max_keys_per_request}}) {
    auto n = ParseInt64(flag, text, 1, max);
    if (!n.ok()) return n.status();
    *target = static_cast<uint64_t>(*n);
  }
  auto connections = ParseInt64("--max-connections", f.max_connections, 1, kMaxConnections);
  if (!connections.ok()) return connections.status();
  options->max_connections = static_cast<size_t>(*connections);
  auto idle =
      ParseDuration("--idle-timeout", f.idle_timeout, absl::ZeroDuration(), kMaxFlagDuration);
  if (!idle.ok()) return idle.status();
  options->idle_timeout = *idle;
  return absl::OkStatus();
}

// Raises RLIMIT_NOFILE to its hard limit: a store may hold one socket per worker.
void RaiseFileLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int Serve(const ServeFlags& f) {
  // Port 0 (any free port) is fine for a listener, unlike for an endpoint to dial.
  absl::string_view listen = f.listen;
  const bool any_port = absl::EndsWith(listen, ":0");
  auto hp = any_port ? ParseHostPort(listen.substr(0, listen.size() - 2), 0, "--listen")
                     : ParseHostPort(listen, -1, "--listen");
  if (!hp.ok()) {
    std::cerr << "dgt store serve: error: " << hp.status().message() << "\n";
    return 2;
  }
  store::ServerOptions options;
  options.host = hp->host;
  options.port = hp->port;
  if (absl::Status s = ParseServeLimits(f, &options); !s.ok()) {
    std::cerr << "dgt store serve: error: " << s.message() << "\n";
    return 2;
  }
  RaiseFileLimit();

  // Block the stop signals before the I/O thread starts, so only sigwait below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  store::Server server(options);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "dgt store serve: error: " << s.message() << "\n";
    // A --listen host that is not an IP literal is a usage error; a port in use is not.
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << "dgt store listening on port " << server.port() << std::endl;
  spdlog::info("store: listening on {}", FormatHostPort(options.host, server.port()));
  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("store: stopping on signal {}", sig);
  server.Stop();
  return 0;
}

// How long the operator's client waits for a store's answer to the torch 2.x opening.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(5);

// The client flags checked, or a usage error (exit 2) printed.
struct ClientSetup {
  store::ClientOptions options;
  int exit_code = 0;  // 2 when a flag is wrong.
};

ClientSetup ParseClientFlags(const ClientFlags& f, absl::string_view cmd) {
  ClientSetup setup;
  auto hp = ParseHostPort(f.endpoint, -1, "--endpoint");
  auto timeout = ParseDuration("--timeout", f.timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
  absl::Status bad = !hp.ok() ? hp.status() : timeout.status();
  if (!bad.ok()) {
    std::cerr << "dgt store " << cmd << ": error: " << bad.message() << "\n";
    setup.exit_code = 2;
    return setup;
  }
  setup.options.host = hp->host;
  setup.options.port = hp->port;
  setup.options.timeout = *timeout;
  // A torch 1.x store never answers the 2.x opening: say "pass --protocol v1" after this, not
  // after the whole --timeout. (A 2.x store answers at once.)
  setup.options.handshake_timeout = kHandshakeTimeout;
  setup.options.protocol = f.protocol == "v1" ? store::Protocol::kV1 : store::Protocol::kV2;
  return setup;
}

// Connects an operator client, or prints why not.
std::unique_ptr<store::Client> ConnectOrReport(const store::ClientOptions& options,
                                               absl::string_view cmd) {
  auto client = store::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "dgt store " << cmd << ": " << client.status().message();
    // The library names protocol v1; the flag that selects it is ours.
    if (options.protocol == store::Protocol::kV2 &&
        absl::StrContains(client.status().message(), "torch 2.x handshake")) {
      std::cerr << " (pass --protocol v1)";
    }
    std::cerr << "\n";
    return nullptr;
  }
  return std::move(*client);
}

// After an ADD that the store answered by closing the connection: why, when the key's value is
// not a decimal integer. Stores do that then (torch's servers and dgt's alike: torch's clients
// expect it) and say why only in their own log. Asks on a fresh connection, for at most 5 s;
// nullopt when the value is an integer, the key is gone or the store does not answer.
std::optional<std::string> NotACounter(store::ClientOptions options, absl::string_view key) {
  options.timeout = std::min(options.timeout, absl::Seconds(5));
  auto client = store::Client::Connect(options);
  if (!client.ok()) return std::nullopt;
  // CHECK before GET: a torch 1.x store drops the connection on a GET of a missing key.
  auto present = (*client)->Check({std::string(key)});
  if (!present.ok() || !*present) return std::nullopt;
  auto value = (*client)->Get(key);
  int64_t n = 0;
  if (!value.ok() || absl::SimpleAtoi(*value, &n)) return std::nullopt;
  constexpr size_t kShown = 64;
  std::string shown = absl::CEscape(absl::string_view(*value).substr(0, kShown));
  if (value->size() > kShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("the value of key '", key, "' is not a decimal integer ('", shown,
                      "'): ADD adds to a counter; the store refused it and closed the connection");
}

int Report(absl::string_view cmd, const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << "dgt store " << cmd << ": " << absl::StatusCodeToString(s.code()) << ": "
            << s.message() << "\n";
  return absl::IsDeadlineExceeded(s) ? 3 : 1;
}

void AddClientFlags(CLI::App* cmd, ClientFlags* f) {
  cmd->add_option("--endpoint", f->endpoint, "Store address HOST:PORT ([v6]:PORT)")
      ->capture_default_str();
  cmd->add_option("--protocol", f->protocol, "Wire protocol: v2 (torch >= 2.2) or v1 (1.x)")
      ->check(CLI::IsMember({"v1", "v2"}))
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout, "Deadline of the command in seconds (up to a year)")
      ->type_name("SECONDS")
      ->capture_default_str();
}

}  // namespace

void AddStoreCommand(CLI::App& app, std::function<int()>* run) {
  CLI::App* store = app.add_subcommand("store", "c10d-compatible store (torch TCPStore protocol)");
  store->require_subcommand(1);

  auto serve_flags = std::make_shared<ServeFlags>();
  CLI::App* serve = store->add_subcommand("serve", "Run a standalone store server");
  serve->add_option("--listen", serve_flags->listen, "Address to bind, HOST:PORT (port 0: any)")
      ->capture_default_str();
  serve
      ->add_option("--max-key-bytes", serve_flags->max_key_bytes,
                   absl::StrCat("Longest key in bytes, 1 to ", kMaxKeyBytes, " (64 KiB)"))
      ->type_name("INT")
      ->capture_default_str();
  serve
      ->add_option("--max-value-bytes", serve_flags->max_value_bytes,
                   absl::StrCat("Longest value in bytes, 1 to ", kMaxValueBytes, " (64 MiB)"))
      ->type_name("INT")
      ->capture_default_str();
  serve
      ->add_option("--max-keys-per-request", serve_flags->max_keys_per_request,
                   absl::StrCat("Most keys in one request, 1 to ", kMaxKeysPerRequest))
      ->type_name("INT")
      ->capture_default_str();
  serve
      ->add_option("--max-connections", serve_flags->max_connections,
                   absl::StrCat("Most open connections, 1 to ", kMaxConnections))
      ->type_name("INT")
      ->capture_default_str();
  serve
      ->add_option("--idle-timeout", serve_flags->idle_timeout,
                   "Close connections silent this many seconds (0: never), up to a year")
      ->type_name("SECONDS")
      ->capture_default_str();
  serve->callback([run, serve_flags] { *run = [serve_flags] { return Serve(*serve_flags); }; });

  auto flags = std::make_shared<ClientFlags>();
  auto key = std::make_shared<std::string>();
  auto value = std::make_shared<std::string>();
  auto delta = std::make_shared<std::string>("1");
  auto keys = std::make_shared<std::vector<std::string>>();

  CLI::App* get = store->add_subcommand("get", "Print the value of KEY (waits for it)");
  get->add_option("key", *key, "Key")->required();
  AddClientFlags(get, flags.get());
  get->callback([=] {
    *run = [=] {
      ClientSetup setup = ParseClientFlags(*flags, "get");
      if (setup.exit_code != 0) return setup.exit_code;
      auto c = ConnectOrReport(setup.options, "get");
      if (!c) return 1;
      auto v = c->Get(*key);
      if (!v.ok()) return Report("get", v.status());
      std::cout << *v << std::endl;
      return 0;
    };
  });

  CLI::App* set = store->add_subcommand("set", "Store VALUE under KEY");
  set->add_option("key", *key, "Key")->required();
  set->add_option("value", *value, "Value")->required();
  AddClientFlags(set, flags.get());
  set->callback([=] {
    *run = [=] {
      ClientSetup setup = ParseClientFlags(*flags, "set");
      if (setup.exit_code != 0) return setup.exit_code;
      auto c = ConnectOrReport(setup.options, "set");
      if (!c) return 1;
      if (int rc = Report("set", c->Set(*key, *value)); rc != 0) return rc;
      // SET has no reply: a round trip makes sure the server applied it before we exit.
      return Report("set", c->NumKeys().status());
    };
  });

  CLI::App* add = store->add_subcommand("add", "Add DELTA to the counter KEY; print the sum");
  add->add_option("key", *key, "Key")->required();
  add->add_option("delta", *delta, "Amount, a 64-bit signed integer (default 1)")->type_name("INT");
  AddClientFlags(add, flags.get());
  add->callback([=] {
    *run = [=] {
      ClientSetup setup = ParseClientFlags(*flags, "add");
      if (setup.exit_code != 0) return setup.exit_code;
      auto amount = ParseInt64("DELTA", *delta, std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max());
      if (!amount.ok()) {
        std::cerr << "dgt store add: error: " << amount.status().message() << "\n";
        return 2;
      }
      auto c = ConnectOrReport(setup.options, "add");
      if (!c) return 1;
      auto sum = c->Add(*key, *amount);
      if (absl::IsUnavailable(sum.status())) {
        if (auto why = NotACounter(setup.options, *key)) {
          std::cerr << "dgt store add: error: " << *why << "\n";
          return 1;
        }
      }
      if (!sum.ok()) return Report("add", sum.status());
      std::cout << *sum << std::endl;
      return 0;
    };
  });

  CLI::App* wait = store->add_subcommand("wait", "Block until every KEY exists (exit 3: timeout)");
  wait->add_option("keys", *keys, "Keys")->required();
  AddClientFlags(wait, flags.get());
  wait->callback([=] {
    *run = [=] {
      ClientSetup setup = ParseClientFlags(*flags, "wait");
      if (setup.exit_code != 0) return setup.exit_code;
      auto c = ConnectOrReport(setup.options, "wait");
      if (!c) return 1;
      return Report("wait", c->Wait(*keys, setup.options.timeout));
    };
  });

  CLI::App* list = store->add_subcommand(
      "keys", "Print every key, one a line (v2: LIST_KEYS); with --protocol v1, the count");
  AddClientFlags(list, flags.get());
  list->callback([=] {
    *run = [=] {
      ClientSetup setup = ParseClientFlags(*flags, "keys");
      if (setup.exit_code != 0) return setup.exit_code;
      auto c = ConnectOrReport(setup.options, "keys");
      if (!c) return 1;
      if (flags->protocol == "v1") {
        auto n = c->NumKeys();
        if (!n.ok()) return Report("keys", n.status());
        std::cout << *n << std::endl;
        return 0;
      }
      auto all = c->ListKeys();
      if (!all.ok()) return Report("keys", all.status());
      for (const std::string& k : *all) std::cout << k << "\n";
      std::cout.flush();
      return 0;
    };
  });
}

}  // namespace dgt::cli
