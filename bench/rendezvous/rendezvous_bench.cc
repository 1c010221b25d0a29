// Rendezvous benchmark: N simulated agents join one run at a dgt-rendezvous service over real
// gRPC on loopback; prints when every assignment arrived after the last join, per-agent latency
// percentiles, and how long the survivors took to get a new round after one agent vanished.
//
// Usage: rendezvous_bench --endpoint 127.0.0.1:PORT --agents 10000 [--channels 64]
//                         [--timeout-s 120]
// Agents are callback-API bidi streams spread over --channels TCP connections. Bounded: the
// whole run gives up after --timeout-s.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

// --- Failover (--failover): agents connected to several replicas (--endpoint a,b) rejoin their
// round on another replica after the one serving them is SIGKILLed. They do as dgt-run does with
// `--rdzv-endpoint a,b` (docs/ETCD.md's replica contract). On a stream's end they try the next
// endpoint at once (a standby's UNAVAILABLE, a refused connection) and pause 100 ms after a full
// pass. They rejoin with their assignment (JoinRequest.rejoin).

// Runs callbacks at a time, on its own thread (a stream's end must not start the next stream
// from inside gRPC's callback, nor sleep there).
class Retrier {
 public:
  Retrier() : thread_([this] { Loop(); }) {}
  ~Retrier() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void At(absl::Time when, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.emplace(when, std::move(fn));
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this] {
          return stop_ || (!queue_.empty() && queue_.begin()->first <= absl::Now());
        };
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(5));
        if (stop_) return;
        if (queue_.empty() || queue_.begin()->first > absl::Now()) continue;
        fn = std::move(queue_.begin()->second);
        queue_.erase(queue_.begin());
      }
      fn();
    }
  }
  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

struct FailoverShared {
  absl::Mutex mu;
  int assigned = 0;              // Agents with their first assignment.
  std::map<int, int> served_by;  // Endpoint index -> agents first assigned there.
  bool killed = false;
  Clock::time_point killed_at;
  int back = 0;     // Agents assigned again after the kill.
  int changed = 0;  // ... with another round or node rank than before.
  std::vector<double> back_ms;
  int attempts_after_kill = 0;
  std::map<std::string, int> ends_after_kill;  // Stream ends after the kill, by status.
};

class FailoverAgent;

// One Session stream of a FailoverAgent on one endpoint.
class Attempt : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ServiceMessage> {
 public:
  Attempt(FailoverAgent* agent, v1::Rendezvous::Stub* stub, int endpoint,
          const v1::AgentMessage& join)
      : agent_(agent), endpoint_(endpoint), join_(join) {
    stub->async()->Session(&context_, this);
    StartWrite(&join_);
    StartRead(&incoming_);
    StartCall();
  }
  void OnWriteDone(bool /*ok*/) override {}
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  void Cancel() { context_.TryCancel(); }
  void AwaitDone(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&done_), deadline);
  }

 private:
  FailoverAgent* agent_;
  const int endpoint_;
  grpc::ClientContext context_;
  v1::AgentMessage join_;
  v1::ServiceMessage incoming_;
  absl::Mutex mu_;
  bool done_ = false;
};

class FailoverAgent {
 public:
  FailoverAgent(int index, int total, std::vector<v1::Rendezvous::Stub*> stubs,
                FailoverShared* shared, Retrier* retrier)
      : stubs_(std::move(stubs)), shared_(shared), retrier_(retrier) {
    v1::JoinRequest* j = join_.mutable_join();
    j->set_run_id("bench");
    j->set_node_id(absl::StrCat("node-", 100000 + index));
    j->set_min_nodes(total);
    j->set_max_nodes(total);
    j->set_nproc_per_node(8);
    j->set_address(
        absl::StrCat("10.", index / 65536 % 256, ".", index / 256 % 256, ".", index % 256));
    j->set_store_port(20000 + index % 40000);
    j->set_last_call_timeout_s(600);
  }

  void Connect(int endpoint) {
    v1::AgentMessage join = join_;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || attempts_.size() >= 1000) return;  // Bounded.
      if (has_assignment_) *join.mutable_join()->mutable_rejoin() = assignment_;
    }
    // Not under mu_: gRPC may run a reaction (OnDone) inline.
    auto attempt = std::make_unique<Attempt>(this, stubs_[endpoint], endpoint, join);
    {
      absl::MutexLock lock(&mu_);
      attempts_.push_back(std::move(attempt));
    }
    absl::MutexLock s(&shared_->mu);
    if (shared_->killed) ++shared_->attempts_after_kill;
  }

  void OnAssignment(int endpoint, const v1::Assignment& a) {
    absl::MutexLock lock(&mu_);
    absl::MutexLock s(&shared_->mu);
    if (!has_assignment_) {
      has_assignment_ = true;
      assignment_ = a;
      ++shared_->assigned;
      ++shared_->served_by[endpoint];
    } else if (shared_->killed && !back_) {
      back_ = true;
      ++shared_->back;
      shared_->back_ms.push_back(Ms(Clock::now() - shared_->killed_at));
      if (a.round() != assignment_.round() || a.node_rank() != assignment_.node_rank()) {
        ++shared_->changed;
      }
    }
  }

  // A stream ended: the next endpoint, at once, or after 100 ms once every endpoint was tried.
  void OnAttemptDone(int endpoint, const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    {
      absl::MutexLock s(&shared_->mu);
      if (shared_->killed) {
        std::string what = status.error_message().substr(0, status.error_message().find(':'));
        ++shared_->ends_after_kill[absl::StrCat(status.error_code(), " ", what)];
      }
    }
    const int next = (endpoint + 1) % static_cast<int>(stubs_.size());
    const absl::Duration pause =
        next == first_endpoint_ ? absl::Milliseconds(100) : absl::ZeroDuration();
    retrier_->At(absl::Now() + pause, [this, next] { Connect(next); });
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& a : attempts_) a->Cancel();
  }
  void AwaitDone(absl::Time deadline) {
    std::vector<Attempt*> all;
    {
      absl::MutexLock lock(&mu_);
      for (auto& a : attempts_) all.push_back(a.get());
    }
    for (Attempt* a : all) a->AwaitDone(deadline);
  }
  // The endpoint the agent's first round came from: a pass of the endpoints starts there.
  void set_first_endpoint(int e) {
    absl::MutexLock lock(&mu_);
    first_endpoint_ = e;
  }

 private:
  std::vector<v1::Rendezvous::Stub*> stubs_;
  FailoverShared* shared_;
  Retrier* retrier_;
  v1::AgentMessage join_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Attempt>> attempts_;
  int first_endpoint_ = 0;
  bool has_assignment_ = false;
  bool back_ = false;
  bool stopping_ = false;
  v1::Assignment assignment_;
};

void Attempt::OnReadDone(bool ok) {
  if (!ok) return;
  if (incoming_.has_assignment()) agent_->OnAssignment(endpoint_, incoming_.assignment());
  StartRead(&incoming_);
}

void Attempt::OnDone(const grpc::Status& status) {
  agent_->OnAttemptDone(endpoint_, status);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

// Failover mode: every agent joins (through the endpoints in turn), the replica that assigned
// round 0 is SIGKILLed, and the agents rejoin on another. Returns the exit code.
int RunFailover(const std::vector<std::string>& endpoints, const std::vector<int>& pids, int agents,
                int channels, double timeout_s) {
  std::vector<std::vector<std::unique_ptr<v1::Rendezvous::Stub>>> stubs(endpoints.size());
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (size_t e = 0; e < endpoints.size(); ++e) {
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("dgt.bench.channel", c);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // Reconnect soon after a refused connection (gRPC's default backoff grows to 120 s).
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      chans.push_back(
          grpc::CreateCustomChannel(endpoints[e], grpc::InsecureChannelCredentials(), args));
      stubs[e].push_back(v1::Rendezvous::NewStub(chans.back()));
    }
  }
  FailoverShared shared;
  shared.back_ms.reserve(agents);
  std::vector<std::unique_ptr<FailoverAgent>> sims;
  int exit_code = 0;
  {
    Retrier retrier;
    sims.reserve(agents);
    for (int i = 0; i < agents; ++i) {
      std::vector<v1::Rendezvous::Stub*> mine;
      mine.reserve(stubs.size());
      for (auto& per_endpoint : stubs) mine.push_back(per_endpoint[i % channels].get());
      sims.push_back(std::make_unique<FailoverAgent>(i, agents, mine, &shared, &retrier));
    }
    for (auto& s : sims) s->Connect(0);
    const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
    auto wait_for = [&](const std::function<bool()>& predicate) {
      absl::MutexLock lock(&shared.mu);
      return shared.mu.AwaitWithDeadline(absl::Condition(&predicate), deadline);
    };
    if (!wait_for([&] { return shared.assigned == agents; })) {
      absl::MutexLock lock(&shared.mu);
      std::printf("FAILED: %d of %d agents assigned within %.0f s\n", shared.assigned, agents,
                  timeout_s);
      exit_code = 1;
    } else {
      int leader = 0;
      {
        absl::MutexLock lock(&shared.mu);
        for (const auto& [e, n] : shared.served_by) {
          std::printf("round 0: %d agents assigned by %s\n", n, endpoints[e].c_str());
          if (n > shared.served_by[leader]) leader = e;
        }
      }
      for (auto& s : sims) s->set_first_endpoint(leader);
      absl::SleepFor(absl::Milliseconds(500));  // The round settles (its commits, the store).
      {
        absl::MutexLock lock(&shared.mu);
        shared.killed = true;
        shared.killed_at = Clock::now();
      }
      ::kill(pids[leader], SIGKILL);
      std::printf("SIGKILLed the replica at %s (pid %d) at %s UTC\n", endpoints[leader].c_str(),
                  pids[leader],
                  absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()).c_str());
      const bool ok = wait_for([&] { return shared.back == agents; });
      absl::MutexLock lock(&shared.mu);
      if (!ok) {
        std::printf("FAILED: %d of %d agents back in their round within %.0f s\n", shared.back,
                    agents, timeout_s);
        exit_code = 1;
      }
      if (!shared.back_ms.empty()) {
        Percentiles("replica killed -> agent back in its round", shared.back_ms);
        std::printf("replica killed -> every agent back in its round: %.1f ms\n",
                    *std::max_element(shared.back_ms.begin(), shared.back_ms.end()));
      }
      std::printf("agents back with another round or rank: %d\n", shared.changed);
      if (shared.changed > 0) exit_code = 1;
      std::printf("streams started after the kill: %d\n", shared.attempts_after_kill);
      for (const auto& [what, n] : shared.ends_after_kill) {
        std::printf("  streams ended after the kill: %d with status %s\n", n, what.c_str());
      }
    }
    for (auto& s : sims) s->Stop();
    for (auto& s : sims) s->AwaitDone(absl::Now() + absl::Seconds(10));
  }  // The retrier stops before the agents go.
  return exit_code;
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
  bool failover = false;
  std::string kill_pids;
  app.add_flag("--failover", failover,
               "Failover mode: --endpoint lists the replicas (a,b); the one that assigned round 0 "
               "is SIGKILLed (--kill-pids, in the same order) and the agents rejoin on another");
  app.add_option("--kill-pids", kill_pids, "Replicas' pids, in --endpoint's order (--failover)");
  CLI11_PARSE(app, argc, argv);
  if (failover) {
    std::vector<std::string> endpoints = absl::StrSplit(endpoint, ',');
    std::vector<int> pids;
    for (absl::string_view p : absl::StrSplit(kill_pids, ',')) {
      int pid = 0;
      if (!absl::SimpleAtoi(p, &pid) || pid <= 0) {
        std::fprintf(stderr, "rendezvous_bench: --kill-pids: '%s' is not a pid\n",
                     std::string(p).c_str());
        return 2;
      }
      pids.push_back(pid);
    }
    if (endpoints.size() < 2 || pids.size() != endpoints.size()) {
      std::fprintf(stderr,
                   "rendezvous_bench: --failover needs 2+ --endpoint replicas and as many "
                   "--kill-pids (got %zu and %zu)\n",
                   endpoints.size(), pids.size());
      return 2;
    }
    return RunFailover(endpoints, pids, agents, channels, timeout_s);
  }

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
