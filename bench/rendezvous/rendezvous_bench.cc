// Rendezvous benchmark: N simulated agents join one run at a dgt-rendezvous service over real
// gRPC on loopback; prints when every assignment arrived after the last join, per-agent latency
// percentiles, and how long the survivors took to get a new round after one agent vanished.
//
// Usage: rendezvous_bench --endpoint 127.0.0.1:PORT --agents 10000 [--channels 64]
//                         [--timeout-s 120]
// Agents are callback-API bidi streams spread over --channels TCP connections. Bounded: the
// whole run gives up after --timeout-s.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace v1 = ::dgt::rendezvous::v1;
using Clock = std::chrono::steady_clock;

namespace {

struct Shared {
  absl::Mutex mu;
  int assigned_round0 = 0;
  int assigned_round1 = 0;
  Clock::time_point last_join_written{};
  std::vector<Clock::time_point> round0_at;
  std::vector<Clock::time_point> round1_at;
  // Streams that ended before the bench cancelled them, by status: a lost stream must not pass
  // for a slow service.
  std::map<std::string, int> early_ends;
};

class SimAgent : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ServiceMessage> {
 public:
  SimAgent(int index, int total, v1::Rendezvous::Stub* stub, Shared* shared, int local)
      : index_(local), shared_(shared) {
    const int agents = total;
    v1::AgentMessage join;
    v1::JoinRequest* j = join.mutable_join();
    j->set_run_id("bench");
    j->set_node_id(absl::StrCat("node-", 100000 + index));
    (void)local;
    j->set_min_nodes(agents - 1);  // One agent may vanish and the run goes on.
    j->set_max_nodes(agents);
    j->set_nproc_per_node(8);
    j->set_address(
        absl::StrCat("10.", index / 65536 % 256, ".", index / 256 % 256, ".", index % 256));
    j->set_store_port(20000 + index % 40000);
    j->set_last_call_timeout_s(600);
    stub->async()->Session(&context_, this);
    Enqueue(std::move(join));
    StartRead(&incoming_);
    StartCall();
  }

  void Cancel() {
    cancelled_ = true;
    context_.TryCancel();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (first_write_) {
      first_write_ = false;
      absl::MutexLock s(&shared_->mu);
      shared_->last_join_written = std::max(shared_->last_join_written, Clock::now());
    }
    queue_.pop_front();
    if (ok && !queue_.empty()) StartWrite(&queue_.front());
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (incoming_.has_assignment()) {
      const v1::Assignment& a = incoming_.assignment();
      auto now = Clock::now();
      {
        absl::MutexLock s(&shared_->mu);
        if (a.round() == 0) {
          ++shared_->assigned_round0;
          shared_->round0_at[index_] = now;
        } else if (a.round() == 1) {
          ++shared_->assigned_round1;
          shared_->round1_at[index_] = now;
        }
      }
      if (a.node_rank() == 0) {
        // Like a real agent: the store that served this round is spent; announce the next.
        v1::AgentMessage ready;
        ready.mutable_store_ready()->set_store_port(30000 + static_cast<int>(a.round()));
        Enqueue(std::move(ready));
      }
    }
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock s(&shared_->mu);
      if (!cancelled_) {
        ++shared_->early_ends[absl::StrCat(status.error_code(), " ", status.error_message())];
      }
    }
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

  // Streams must end before their reactor is destroyed.
  void AwaitDone(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&done_), deadline);
  }

 private:
  void Enqueue(v1::AgentMessage m) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(m));
    if (queue_.size() == 1) StartWrite(&queue_.front());
  }

  const int index_;
  Shared* shared_;
  grpc::ClientContext context_;
  v1::ServiceMessage incoming_;
  absl::Mutex mu_;
  std::deque<v1::AgentMessage> queue_;
  std::atomic<bool> cancelled_ = false;
  bool first_write_ = true;
  bool done_ = false;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void Percentiles(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  std::printf("%s: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", what, at(0.50), at(0.99), v.back());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rendezvous_bench"};
  std::string endpoint;
  int agents = 1000;
  int total = 0;
  int first = 0;
  int channels = 64;
  double timeout_s = 120;
  double between_rounds_s = 0;
  app.add_option("--endpoint", endpoint, "dgt-rendezvous HOST:PORT")->required();
  app.add_option("--agents", agents, "Simulated agents")->check(CLI::Range(2, 100000));
  app.add_option("--channels", channels, "TCP connections")->check(CLI::Range(1, 4096));
  app.add_option("--total-agents", total,
                 "Agents of the run across all bench processes "
                 "(default: --agents)");
  app.add_option("--first-index", first, "Index of this process's first agent");
  app.add_option("--timeout-s", timeout_s, "Give up after this many seconds");
  app.add_option("--between-rounds-s", between_rounds_s,
                 "Seconds to wait after round 0 is assigned (\"round 0 assigned\" is printed "
                 "first) before an agent is lost; lets run.sh read the etcd metrics per round")
      ->check(CLI::Range(0.0, 60.0));
  CLI11_PARSE(app, argc, argv);

  if (total == 0) total = agents;
  Shared shared;
  shared.round0_at.resize(agents);
  shared.round1_at.resize(agents);
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("dgt.bench.channel", c);  // Distinct args: a connection per channel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    chans.push_back(grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Rendezvous::NewStub(chans.back()));
  }
  const auto start = Clock::now();
  std::vector<std::unique_ptr<SimAgent>> sims;
  sims.reserve(agents);
  for (int i = 0; i < agents; ++i) {
    sims.push_back(
        std::make_unique<SimAgent>(first + i, total, stubs[i % channels].get(), &shared, i));
  }
  const absl::Time abs_deadline = absl::Now() + absl::Seconds(timeout_s);
  auto wait_for = [&](const std::function<bool()>& predicate) {
    absl::MutexLock lock(&shared.mu);
    return shared.mu.AwaitWithDeadline(absl::Condition(&predicate), abs_deadline);
  };
  bool ok = wait_for([&] { return shared.assigned_round0 == agents; });
  int exit_code = 0;
  if (!ok) {
    std::printf("FAILED: %d of %d agents assigned within %.0f s\n", shared.assigned_round0, agents,
                timeout_s);
    exit_code = 1;
  } else {
    absl::MutexLock lock(&shared.mu);
    auto last = *std::max_element(shared.round0_at.begin(), shared.round0_at.end());
    std::printf("agents: %d over %d connections\n", agents, channels);
    std::printf("all joins sent after %.1f ms\n", Ms(shared.last_join_written - start));
    std::printf("last join -> every assignment delivered: %.1f ms\n",
                Ms(last - shared.last_join_written));
    std::vector<double> lat;
    for (auto t : shared.round0_at) lat.push_back(Ms(t - shared.last_join_written));
    Percentiles("per-agent assignment after the last join", lat);
  }
  if (ok && between_rounds_s > 0) {
    std::printf("round 0 assigned; waiting %.1f s\n", between_rounds_s);
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(between_rounds_s));
  }
  if (ok) {
    // One agent vanishes (its stream is cancelled, as when its process dies): the survivors get
    // round 1 without it.
    // Only the process holding agent 0 kills one; the others just watch for round 1.
    const int victim = first == 0 ? agents / 2 : -1;
    auto killed_at = Clock::now();
    if (victim >= 0) sims[victim]->Cancel();
    const int survivors = victim >= 0 ? agents - 1 : agents;
    bool ok1 = wait_for([&] { return shared.assigned_round1 == survivors; });
    if (!ok1) {
      std::printf("FAILED: %d of %d survivors got the new round\n", shared.assigned_round1,
                  survivors);
      exit_code = 1;
    } else {
      absl::MutexLock lock(&shared.mu);
      std::vector<double> lat;
      for (int i = 0; i < agents; ++i) {
        if (i != victim) lat.push_back(Ms(shared.round1_at[i] - killed_at));
      }
      Percentiles("agent lost -> survivor has its new round", lat);
    }
  }
  {
    absl::MutexLock lock(&shared.mu);
    for (const auto& [what, n] : shared.early_ends) {
      std::printf("streams ended early: %d with status %s\n", n, what.c_str());
      exit_code = 1;
    }
  }
  for (auto& s : sims) s->Cancel();
  for (auto& s : sims) s->AwaitDone(abs_deadline + absl::Seconds(10));
  return exit_code;
}
