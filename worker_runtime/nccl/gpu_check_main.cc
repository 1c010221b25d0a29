// dgt-nccl-check: runs dgt's real NCCL path on this machine's GPUs, one rank per GPU (threads of
// this process, bootstrapped through an in-process store): init at generation 0, an all-reduce
// with a checked result, abort, re-init at generation 1, a second checked all-reduce. Prints one
// "gpu-check: key=value ..." line per step (docs/PERFORMANCE.md, "GPU check").
// Usage: dgt-nccl-check [MAX_RANKS]   (--help, --version)
// Exit status: 0 PASS, 1 a step failed, 2 no NCCL library or no GPU here, or a bad argument.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/flag_parse.h"
#include "common/version.h"
#include "dgt/store/memory_store.h"
#include "dgt/worker/nccl_api.h"
#include "dgt/worker/nccl_communicator.h"

namespace {

std::mutex print_mu;
void Print(const std::string& line) {
  std::lock_guard<std::mutex> lock(print_mu);
  std::printf("gpu-check: %s\n", line.c_str());
  std::fflush(stdout);
}

double Ms(absl::Time start) { return absl::ToDoubleMilliseconds(absl::Now() - start); }

// One generation on one rank: init, all-reduce checked. Returns false on failure.
bool RunGeneration(dgt::worker::NcclApi& api, dgt::store::Store& store, int rank, int n,
                   int generation, std::unique_ptr<dgt::worker::Communicator>* out) {
  dgt::worker::NcclOptions nopts;
  nopts.device = rank;
  dgt::worker::NcclCommunicatorFactory factory(api, nopts);
  dgt::worker::CommunicatorOptions o;
  o.rank = rank;
  o.size = n;
  o.generation = generation;
  o.key_prefix = dgt::worker::CommKeyPrefix("gpu-check", generation);
  o.init_timeout = absl::Seconds(60);
  o.op_timeout = absl::Seconds(30);
  absl::Time t = absl::Now();
  auto comm = factory.Create(store, o);
  const double init_ms = Ms(t);
  if (!comm.ok()) {
    Print(absl::StrCat("rank=", rank, " gen=", generation, " init=FAIL error=\"",
                       comm.status().ToString(), "\""));
    return false;
  }
  std::vector<int64_t> v(1024, rank + 1);
  std::vector<float> f(1024, 0.5f * static_cast<float>(rank + 1));
  t = absl::Now();
  absl::Status s = (*comm)->AllReduce(absl::MakeSpan(v), dgt::worker::ReduceOp::kSum);
  if (s.ok()) s = (*comm)->AllReduce(absl::MakeSpan(f), dgt::worker::ReduceOp::kSum);
  const double ar_ms = Ms(t);
  const int64_t want = int64_t{n} * (n + 1) / 2;
  bool ok = s.ok();
  for (int64_t x : v) ok = ok && x == want;
  for (float x : f) ok = ok && x == 0.5f * static_cast<float>(want);
  Print(absl::StrCat("rank=", rank, " gen=", generation, " init_ms=", init_ms, " allreduce_ms=",
                     ar_ms, " expected=", want, " got=", v[0], " result=", ok ? "OK" : "WRONG",
                     s.ok() ? "" : " error=\"" + s.ToString() + "\""));
  *out = std::move(*comm);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dgt-nccl-check: runs dgt's NCCL path on this machine's GPUs (one rank per GPU): init, a "
      "checked all-reduce, abort, re-init at the next generation, a second checked all-reduce",
      "dgt-nccl-check"};
  std::string max_ranks_text = "0";
  app.add_option("MAX_RANKS", max_ranks_text, "Use at most this many GPUs (0 = all)")
      ->type_name("INT")
      ->capture_default_str();
  app.set_version_flag("--version", absl::StrCat("dgt-nccl-check ", dgt::kVersion));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::printf("dgt-nccl-check %s\n", dgt::kVersion);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dgt-nccl-check: error: %s\n", e.what());
    return 2;
  }
  auto max_ranks = dgt::ParseInt64("MAX_RANKS", max_ranks_text, 0, 4096);
  if (!max_ranks.ok()) {
    std::fprintf(stderr, "dgt-nccl-check: error: %s\n",
                 std::string(max_ranks.status().message()).c_str());
    return 2;
  }
  const absl::Time start = absl::Now();
  auto api = dgt::worker::LoadRealNcclApi();
  if (!api.ok()) {
    Print(absl::StrCat("FAIL no NCCL: ", api.status().message()));
    return 2;
  }
  auto count = (*api)->DeviceCount();
  if (!count.ok() || *count == 0) {
    Print(absl::StrCat("FAIL no CUDA GPU: ",
                       count.ok() ? "cudaGetDeviceCount returned 0" : count.status().message()));
    return 2;
  }
  int n = *count;
  if (*max_ranks > 0) n = std::min(n, static_cast<int>(*max_ranks));
  Print(absl::StrCat("nccl_version=", (*api)->Version(), " gpus=", *count, " ranks=", n));
  dgt::store::MemoryStore store;
  std::vector<int> ok(n, 0);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<dgt::worker::Communicator> comm;
      if (!RunGeneration(**api, store, r, n, 0, &comm)) return;
      absl::Time t = absl::Now();
      comm->Abort("gpu-check: abort before re-init");
      comm.reset();
      Print(absl::StrCat("rank=", r, " gen=0 abort_ms=", Ms(t)));
      if (!RunGeneration(**api, store, r, n, 1, &comm)) return;
      ok[r] = 1;
    });
  }
  for (auto& t : threads) t.join();
  bool all = true;
  for (int x : ok) all = all && x;
  Print(absl::StrCat(all ? "PASS" : "FAIL", " total_ms=", Ms(start)));
  return all ? 0 : 1;
}
