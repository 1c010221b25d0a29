#include "cli/store_command.h"

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "dgt/store/client.h"
#include "dgt/store/server.h"

namespace dgt::cli {
namespace {

struct ServeFlags {
  std::string listen = "127.0.0.1:29500";
  uint64_t max_key_bytes = 0;
  uint64_t max_value_bytes = 0;
  uint64_t max_keys_per_request = 0;
  size_t max_connections = 0;
  double idle_timeout_s = 0;
};

struct ClientFlags {
  std::string endpoint = "127.0.0.1:29500";
  std::string protocol = "v2";
  double timeout_s = 30;
};

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
  if (f.max_key_bytes) options.max_key_bytes = f.max_key_bytes;
  if (f.max_value_bytes) options.max_value_bytes = f.max_value_bytes;
  if (f.max_keys_per_request) options.max_keys_per_request = f.max_keys_per_request;
  if (f.max_connections) options.max_connections = f.max_connections;
  options.idle_timeout = absl::Seconds(f.idle_timeout_s);
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
    return 1;
  }
  std::cout << "dgt store listening on port " << server.port() << std::endl;
  spdlog::info("store: listening on {}", FormatHostPort(options.host, server.port()));
  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("store: stopping on signal {}", sig);
  server.Stop();
  return 0;
}

// Connects an operator client, or prints why not.
std::unique_ptr<store::Client> ConnectOrReport(const ClientFlags& f, absl::string_view cmd) {
  auto hp = ParseHostPort(f.endpoint, -1, "--endpoint");
  if (!hp.ok()) {
    std::cerr << "dgt store " << cmd << ": " << hp.status().message() << "\n";
    return nullptr;
  }
  store::ClientOptions options;
  options.host = hp->host;
  options.port = hp->port;
  options.timeout = absl::Seconds(f.timeout_s);
  options.protocol = f.protocol == "v1" ? store::Protocol::kV1 : store::Protocol::kV2;
  auto client = store::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "dgt store " << cmd << ": " << client.status().message() << "\n";
    return nullptr;
  }
  return std::move(*client);
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
  cmd->add_option("--timeout", f->timeout_s, "Deadline of the command in seconds")
      ->check(CLI::PositiveNumber)
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
  serve->add_option("--max-key-bytes", serve_flags->max_key_bytes, "Longest key (default 64 KiB)");
  serve->add_option("--max-value-bytes", serve_flags->max_value_bytes,
                    "Longest value (default 64 MiB)");
  serve->add_option("--max-keys-per-request", serve_flags->max_keys_per_request,
                    "Most keys in one request (default 131072)");
  serve->add_option("--max-connections", serve_flags->max_connections,
                    "Most open connections (default 65536)");
  serve
      ->add_option("--idle-timeout", serve_flags->idle_timeout_s,
                   "Close connections silent this many seconds (0: never, the default)")
      ->check(CLI::NonNegativeNumber);
  serve->callback([run, serve_flags] { *run = [serve_flags] { return Serve(*serve_flags); }; });

  auto flags = std::make_shared<ClientFlags>();
  auto key = std::make_shared<std::string>();
  auto value = std::make_shared<std::string>();
  auto delta = std::make_shared<int64_t>(1);
  auto keys = std::make_shared<std::vector<std::string>>();

  CLI::App* get = store->add_subcommand("get", "Print the value of KEY (waits for it)");
  get->add_option("key", *key, "Key")->required();
  AddClientFlags(get, flags.get());
  get->callback([=] {
    *run = [=] {
      auto c = ConnectOrReport(*flags, "get");
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
      auto c = ConnectOrReport(*flags, "set");
      if (!c) return 1;
      if (int rc = Report("set", c->Set(*key, *value)); rc != 0) return rc;
      // SET has no reply: a round trip makes sure the server applied it before we exit.
      return Report("set", c->NumKeys().status());
    };
  });

  CLI::App* add = store->add_subcommand("add", "Add DELTA to the counter KEY; print the sum");
  add->add_option("key", *key, "Key")->required();
  add->add_option("delta", *delta, "Amount (default 1)");
  AddClientFlags(add, flags.get());
  add->callback([=] {
    *run = [=] {
      auto c = ConnectOrReport(*flags, "add");
      if (!c) return 1;
      auto sum = c->Add(*key, *delta);
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
      auto c = ConnectOrReport(*flags, "wait");
      if (!c) return 1;
      return Report("wait", c->Wait(*keys, absl::Seconds(flags->timeout_s)));
    };
  });

  CLI::App* list = store->add_subcommand(
      "keys", "Print every key, one a line (v2: LIST_KEYS); with --protocol v1, the count");
  AddClientFlags(list, flags.get());
  list->callback([=] {
    *run = [=] {
      auto c = ConnectOrReport(*flags, "keys");
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
