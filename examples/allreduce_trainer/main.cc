// allreduce_trainer: a C++ trainer that keeps training through the loss of a rank.
//
// Each step all-reduces one value per rank, value(rank, step) = (rank + 1) * 1000 + step, checks
// the sum exactly against the current members, and adds it to a running total (the "model
// state" kept in memory; nothing is checkpointed). When a rank dies, the survivors keep their
// process and state: ElasticGroup::Recover() rebuilds the communicator at the next generation
// (with the replacement rank, or without the lost rank in --mode=shrink), the members agree on
// the step to resume from (the least completed step) and the first survivor broadcasts the total
// at that step to the replacement.
//
// Started by dgt-run (or any launcher setting the env contract: RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...). Prints "EVENT ..." lines for tests and
// benchmarks; exit status 0 when every step summed exactly, 3 on a wrong sum, 1 on errors.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dgt/worker/context.h"
#include "dgt/worker/elastic_group.h"
#include "dgt/worker/gloo_communicator.h"
#include "dgt/worker/progress.h"

namespace {

using dgt::worker::ElasticGroup;
using dgt::worker::ReduceOp;

constexpr int64_t kNoState = std::numeric_limits<int64_t>::max();

int64_t Value(int rank, int64_t step) { return (rank + 1) * 1000 + step; }

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

long long Ns(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : static_cast<long long>(absl::ToUnixNanos(t));
}

// When the last Join()/Recover() went through its steps (0: a step that did not happen).
void PrintTimeline(const ElasticGroup& g, int rank, long pid, int64_t main_ns) {
  const dgt::worker::BuildTimeline t = g.last_build();
  std::printf(
      "EVENT timeline rank=%d pid=%ld generation=%d main_ns=%lld noticed_ns=%lld started_ns=%lld "
      "connected_ns=%lld opened_ns=%lld bootstrap_ns=%lld built_ns=%lld\n",
      rank, pid, g.generation(), static_cast<long long>(main_ns), Ns(t.noticed), Ns(t.started),
      Ns(t.connected), Ns(t.opened), Ns(t.bootstrap), Ns(t.built));
}

struct State {
  bool has_state = false;            // False in a fresh replacement until it synced.
  int64_t completed = 0;             // Steps done.
  std::map<int64_t, int64_t> total;  // Running total after `completed` steps (recent ones).
};

// After a (re)build: agree on the step to resume from and hand the total to fresh members.
absl::Status Sync(ElasticGroup& g, State& st) {
  auto& c = g.comm();
  // One all-reduce: [0] the step to resume from, [1] the first member with state (the root).
  int64_t agreed[2] = {st.has_state ? st.completed : kNoState, st.has_state ? c.rank() : kNoState};
  if (auto s = c.AllReduce(absl::MakeSpan(agreed), ReduceOp::kMin); !s.ok()) return s;
  const int64_t resume = agreed[0];
  if (resume == kNoState) {  // Nobody has state (a group restart): start over.
    st = State{true, 0, {{0, 0}}};
    return absl::OkStatus();
  }
  int64_t total[1] = {0};
  if (st.has_state) {
    auto it = st.total.find(resume);
    if (it == st.total.end()) {
      return absl::InternalError(absl::StrCat("no total kept for step ", resume));
    }
    total[0] = it->second;
  }
  if (auto s = c.Broadcast(absl::MakeSpan(total), static_cast<int>(agreed[1])); !s.ok()) return s;
  st.has_state = true;
  st.completed = resume;
  st.total = {{resume, total[0]}};
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t main_ns = NowNs();
  CLI::App app{"allreduce_trainer: an all-reduce loop that survives the loss of a rank"};
  int64_t steps = 200;
  int step_ms = 10;
  // dgt-run --restart-policy rank exports its --recovery-mode; --mode overrides it.
  const char* agent_mode = std::getenv("DGT_RECOVERY_MODE");
  std::string mode = agent_mode != nullptr && *agent_mode != '\0' ? agent_mode : "replace";
  std::string hostname = "127.0.0.1";
  double init_timeout_s = 60;
  int max_recoveries = 10;
  app.add_option("--steps", steps, "Steps to run")->check(CLI::PositiveNumber);
  app.add_option("--step-ms", step_ms, "Pause after each step (ms), the 'compute'");
  app.add_option("--mode", mode,
                 "replace (a replacement rank joins) or shrink (default: $DGT_RECOVERY_MODE, which "
                 "dgt-run --restart-policy rank sets from --recovery-mode, else replace)")
      ->check(CLI::IsMember({"replace", "shrink"}));
  app.add_option("--hostname", hostname, "Address Gloo listens on and advertises");
  app.add_option("--init-timeout", init_timeout_s, "Seconds to wait for a generation's members");
  app.add_option("--max-recoveries", max_recoveries, "Give up after this many recoveries");
  CLI11_PARSE(app, argc, argv);

  auto ctx = dgt::worker::Context::FromEnv();
  if (!ctx.ok()) {
    std::fprintf(stderr, "allreduce_trainer: %s\n", std::string(ctx.status().message()).c_str());
    return 1;
  }
  dgt::worker::GlooCommunicatorFactory factory({hostname});
  dgt::worker::ElasticGroupOptions options;
  options.mode =
      mode == "shrink" ? dgt::worker::RecoveryMode::kShrink : dgt::worker::RecoveryMode::kReplace;
  options.init_timeout = absl::Seconds(init_timeout_s);
  options.op_timeout = absl::Seconds(60);
  options.watch_period = absl::Milliseconds(200);
  const int rank = ctx->rank;
  const long pid = static_cast<long>(::getpid());
  // Waits on the peers (Join, Sync, the all-reduce, Recover) are not silence for dgt-run's
  // --hang-timeout; each completed step is a progress report (docs/RECOVERY.md "Hang detection").
  std::optional<dgt::worker::ProgressWaiting> joining(std::in_place);
  auto joined = ElasticGroup::Join(*ctx, dgt::worker::ConnectToJobStore(*ctx), factory, options);
  joining.reset();
  if (!joined.ok()) {
    std::fprintf(stderr, "rank %d: join failed: %s\n", rank, joined.status().ToString().c_str());
    return 1;
  }
  ElasticGroup& g = **joined;
  State st;
  st.has_state = !g.is_replacement();
  st.total = {{0, 0}};
  bool need_sync = g.is_replacement();
  // A restarted process (replacement, or any rank after a group restart) reports its first
  // collective, so tests and benchmarks can time the recovery.
  bool report_back = g.is_replacement() || ctx->generation > 0;
  int recoveries = 0;
  std::printf("EVENT joined rank=%d pid=%ld generation=%d replacement=%d t_ns=%lld\n", rank, pid,
              g.generation(), g.is_replacement() ? 1 : 0, static_cast<long long>(NowNs()));
  PrintTimeline(g, rank, pid, main_ns);
  std::fflush(stdout);

  while (st.completed < steps || need_sync) {
    absl::Status s = absl::OkStatus();
    if (g.recovery_pending()) s = absl::AbortedError("a new generation was opened");
    if (s.ok() && need_sync) {
      dgt::worker::ProgressWaiting wait;
      s = Sync(g, st);
      if (s.ok()) {
        need_sync = false;
        std::printf("EVENT synced rank=%d pid=%ld generation=%d members=%s resume=%lld t_ns=%lld\n",
                    rank, pid, g.generation(), absl::StrJoin(g.members(), ",").c_str(),
                    static_cast<long long>(st.completed), static_cast<long long>(NowNs()));
        std::fflush(stdout);
        continue;
      }
    }
    int64_t sum[1] = {0};
    if (s.ok()) {
      sum[0] = Value(rank, st.completed);
      dgt::worker::ProgressWaiting wait;
      s = g.comm().AllReduce(absl::MakeSpan(sum), ReduceOp::kSum);
    }
    if (!s.ok()) {
      if (++recoveries > max_recoveries) {
        std::fprintf(stderr, "rank %d: giving up after %d recoveries: %s\n", rank, max_recoveries,
                     s.ToString().c_str());
        return 1;
      }
      std::printf("EVENT failure rank=%d pid=%ld generation=%d step=%lld t_ns=%lld error=\"%s\"\n",
                  rank, pid, g.generation(), static_cast<long long>(st.completed),
                  static_cast<long long>(NowNs()), std::string(s.message()).c_str());
      std::fflush(stdout);
      dgt::worker::ProgressWaiting wait;
      auto c = g.Recover();
      while (!c.ok()) {
        // The next attempt opens the generation after (e.g. a member died while joining).
        std::fprintf(stderr, "rank %d: recover failed: %s\n", rank, c.status().ToString().c_str());
        if (++recoveries > max_recoveries) return 1;
        c = g.Recover();
      }
      PrintTimeline(g, rank, pid, main_ns);
      std::fflush(stdout);
      need_sync = true;
      report_back = true;
      continue;
    }
    int64_t expected = 0;
    for (int m : g.members()) expected += Value(m, st.completed);
    if (sum[0] != expected) {
      std::printf("EVENT mismatch rank=%d step=%lld got=%lld expected=%lld\n", rank,
                  static_cast<long long>(st.completed), static_cast<long long>(sum[0]),
                  static_cast<long long>(expected));
      std::fflush(stdout);
      return 3;
    }
    if (report_back) {
      // First collective completed after a (re)join: the recovery is over for this rank.
      report_back = false;
      std::printf("EVENT back rank=%d pid=%ld generation=%d step=%lld t_ns=%lld\n", rank, pid,
                  g.generation(), static_cast<long long>(st.completed),
                  static_cast<long long>(NowNs()));
      std::fflush(stdout);
    }
    const int64_t prev = st.total.rbegin()->second;
    ++st.completed;
    dgt::worker::Progress();
    st.total[st.completed] = prev + sum[0];
    // Every completed step, timed: what a failure costs in progress is measured from these.
    std::printf("EVENT step rank=%d pid=%ld generation=%d step=%lld t_ns=%lld\n", rank, pid,
                g.generation(), static_cast<long long>(st.completed),
                static_cast<long long>(NowNs()));
    std::fflush(stdout);
    while (st.total.size() > 16) st.total.erase(st.total.begin());
    if (step_ms > 0) absl::SleepFor(absl::Milliseconds(step_ms));
  }
  std::printf(
      "EVENT done rank=%d pid=%ld generation=%d steps=%lld total=%lld members=%s "
      "recoveries=%d\n",
      rank, pid, g.generation(), static_cast<long long>(st.completed),
      static_cast<long long>(st.total.rbegin()->second), absl::StrJoin(g.members(), ",").c_str(),
      recoveries);
  std::fflush(stdout);
  return 0;
}
