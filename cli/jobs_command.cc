#include "cli/jobs_command.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/display_width.h"
#include "common/flag_parse.h"
#include "common/host_port.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "rendezvous/client.h"
#include "replica/endpoint_list.h"
#include "replica/exit_code.h"
#include "replica/leadership_status.h"

namespace dgt::cli {
namespace {

namespace v1 = ::dgt::jobs::v1;

struct CommonFlags {
  std::string endpoint;
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key;
  std::string timeout = "10";
};

void AddCommonFlags(CLI::App* cmd, CommonFlags* f) {
  const char* env = std::getenv("DGT_RDZV_ENDPOINT");
  f->endpoint = env != nullptr && *env != '\0' ? env : "127.0.0.1:29400";
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", f->endpoint,
                  "dgt-rendezvous HOST:PORT[,HOST:PORT...] (default $DGT_RDZV_ENDPOINT, else "
                  "127.0.0.1:29400)")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file, "File holding the submit token");
  cmd->add_option("--tls-ca", f->tls_ca, "PEM CA of the service's certificate (turns TLS on)");
  cmd->add_option("--tls-cert", f->tls_cert, "PEM client certificate (mutual TLS)");
  cmd->add_option("--tls-key", f->tls_key, "PEM client key (mutual TLS)");
  cmd->add_option("--timeout", f->timeout, "Seconds to wait for the service per call")
      ->type_name("SECONDS")
      ->capture_default_str();
}

// A connection to the jobs service: one stub per endpoint, tried in order.
class Connection {
 public:
  Connection(std::string command, const CommonFlags& f) : command_(std::move(command)), f_(f) {}

  // Parses the flags; prints the error and returns false on a bad one.
  bool Open() {
    auto timeout =
        ParseDuration("--timeout", f_.timeout, kMinPositiveFlagDuration, kMaxFlagDuration);
    if (!timeout.ok()) return Usage(timeout.status());
    timeout_ = *timeout;
    client_.tls = {f_.tls_cert, f_.tls_key, f_.tls_ca};
    if (!f_.token_file.empty()) {
      auto token = dgt::rendezvous::ReadTokenFile(f_.token_file);
      if (!token.ok()) {
        return Usage(
            absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message())));
      }
      client_.token = *std::move(token);
    }
    auto list = replica::ParseEndpointList(f_.endpoint, 29400, "--rdzv-endpoint");
    if (!list.ok()) return Usage(list.status());
    for (const HostPort& hp : *list) {
      std::string endpoint = FormatHostPort(hp.host, hp.port);
      auto channel = dgt::rendezvous::CreateClientChannel(endpoint, client_);
      if (!channel.ok()) return Usage(channel.status());
      endpoints_.push_back(endpoint);
      stubs_.push_back(v1::Jobs::NewStub(*channel));
    }
    return true;
  }

  // Calls `call(stub, context)` on each endpoint until one answers other than UNAVAILABLE; a
  // standby that names a listed leader not tried yet sends the next call there.
  // Returns the exit code: 0, or the error's, after printing it.
  template <typename Call>
  int Run(Call call) {
    return ExitFor(Try(call));
  }
  // As Run, but returns the status and prints nothing.
  template <typename Call>
  grpc::Status Try(Call call) {
    grpc::Status st;
    const size_t n = stubs_.size();
    std::vector<bool> tried(n, false);
    for (size_t i = 0; i < n;) {
      tried[i] = true;
      grpc::ClientContext ctx;
      dgt::rendezvous::AuthorizeCall(client_, &ctx);
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
      st = call(*stubs_[i], &ctx);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      size_t next = n;  // The leader a standby names, else the first endpoint not tried yet.
      if (auto standby = replica::StandbyAnswer(st)) {
        next =
            replica::LeaderIndex(endpoints_, endpoints_[i], standby->leader_address()).value_or(n);
      }
      if (next == n || tried[next])
        next = std::find(tried.begin(), tried.end(), false) - tried.begin();
      i = next;
    }
    return st;
  }

  int ExitFor(const grpc::Status& st) const {
    // absl and gRPC status codes agree.
    const int exit_code = replica::ExitCodeFor(static_cast<absl::StatusCode>(st.error_code()));
    if (st.ok()) return exit_code;
    const std::string where = absl::StrJoin(endpoints_, ",");
    switch (st.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        if (replica::StandbyAnswer(st).has_value()) {
          // A replica answered at once, as a standby: neither "within" nor TLS is the matter.
          Error(absl::StrCat("no leading jobs service at ", where,
                             ": the last one asked is a standby (", st.error_message(),
                             "); is the leader's address in --rdzv-endpoint?"));
          break;
        }
        Error(absl::StrCat("no jobs service answered at ", where, " within ",
                           absl::FormatDuration(timeout_), ": ", st.error_message(),
                           " (is dgt-rendezvous running there? with TLS, pass --tls-ca)"));
        break;
      case grpc::StatusCode::CANCELLED:
        // The service ended the call: it stopped or restarted while answering.
        Error(absl::StrCat("the jobs service at ", where, " ended the call (", st.error_message(),
                           "): did dgt-rendezvous stop or restart?"));
        break;
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        Error(absl::StrCat("the jobs service at ", where, " refused: ", st.error_message()));
        break;
      default:
        // gRPC's own failures (a message it could not parse) can come with no message at all.
        Error(st.error_message().empty()
                  ? absl::StrCat(
                        "the jobs service at ", where, " answered ",
                        absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())),
                        " with no message")
                  : st.error_message());
        break;
    }
    return exit_code;
  }

  bool Usage(const absl::Status& s) {
    Error(std::string(s.message()));
    exit_ = replica::kExitUsage;
    return false;
  }
  void Error(const std::string& message) const {
    std::fprintf(stderr, "dgt %s: error: %s\n", command_.c_str(), message.c_str());
  }
  int exit_code() const { return exit_; }
  // --timeout: per call, and how long `dgt logs --follow` waits for a lost service to come back.
  absl::Duration timeout() const { return timeout_; }

 private:
  std::string command_;
  const CommonFlags& f_;
  dgt::rendezvous::ClientOptions client_;
  absl::Duration timeout_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<v1::Jobs::Stub>> stubs_;
  int exit_ = replica::kExitUsage;
};

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string Ago(double t, double now) {
  if (t <= 0) return "-";
  return absl::StrFormat("%.0f s ago", now - t);
}

int Submit(const CommonFlags& f, const std::string& file) {
  Connection c("submit", f);
  auto text = dgt::jobs::ReadJobSpecFile(file);
  if (!text.ok()) {
    c.Error(std::string(text.status().message()));
    return replica::kExitUsage;
  }
  auto spec = dgt::jobs::ParseJobSpecYaml(*text);
  absl::Status valid = spec.ok() ? dgt::jobs::Validate(*spec) : spec.status();
  if (!valid.ok()) {
    c.Error(absl::StrCat(file, ": ", valid.message()));
    return replica::kExitUsage;
  }
  if (!c.Open()) return c.exit_code();
  v1::SubmitRequest request;
  *request.mutable_spec() = *spec;
  v1::SubmitResponse response;
  int rc = c.Run([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
    return stub.Submit(ctx, request, &response);
  });
  if (rc == 0) std::printf("%s\n", response.job_id().c_str());
  return rc;
}

int ListJobs(const CommonFlags& f) {
  Connection c("jobs", f);
  if (!c.Open()) return c.exit_code();
  v1::ListJobsResponse response;
  int rc = c.Run([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
    return stub.ListJobs(ctx, v1::ListJobsRequest(), &response);
  });
  if (rc == 0) std::fputs(FormatJobs(response).c_str(), stdout);
  return rc;
}

int ShowJob(const CommonFlags& f, const std::string& id, bool json) {
  Connection c("job show", f);
  if (!c.Open()) return c.exit_code();
  v1::GetJobRequest request;
  request.set_job_id(id);
  v1::JobInfo job;
  int rc = c.Run([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
    return stub.GetJob(ctx, request, &job);
  });
  if (rc != 0) return rc;
  if (json) {
    std::printf("%s\n", FormatJobJson(job).c_str());
  } else {
    std::fputs(FormatJob(job, NowUnix()).c_str(), stdout);
  }
  return 0;
}

int CancelJob(const CommonFlags& f, const std::string& id, const std::string& grace_text) {
  Connection c("cancel", f);
  auto grace = ParseDuration("--grace", grace_text, absl::ZeroDuration(), kMaxFlagDuration);
  if (!grace.ok()) {
    c.Error(std::string(grace.status().message()));
    return replica::kExitUsage;
  }
  if (!c.Open()) return c.exit_code();
  v1::CancelRequest request;
  request.set_job_id(id);
  request.set_grace_s(absl::ToDoubleSeconds(*grace));
  v1::JobInfo job;
  // A replica that answers UNAVAILABLE other than as a standby (it stopped leading, or its etcd
  // write went unanswered) may have applied the cancel; when the next replica then finds the job
  // cancelled, nobody can tell whether this request or another one did it. Neither "done" nor
  // "already finished" is known to be true: the outcome is unknown (exit 69), as for a call that
  // got no answer at all.
  bool maybe_applied = false;
  std::string unanswered;
  const grpc::Status st = c.Try([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
    grpc::Status s = stub.Cancel(ctx, request, &job);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !replica::StandbyAnswer(s)) {
      maybe_applied = true;
      unanswered = s.error_message();
    }
    return s;
  });
  if (maybe_applied && st.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
      absl::EndsWith(st.error_message(), "already finished: cancelled")) {
    c.Error(absl::StrCat("job ", id,
                         " is cancelled, but perhaps not by this request: an earlier attempt's "
                         "replica may have applied it without answering (",
                         unanswered, ")"));
    return replica::kExitRendezvousUnavailable;
  }
  const int rc = c.ExitFor(st);
  if (rc == 0) {
    std::printf("%s: %s\n", job.job_id().c_str(),
                std::string(dgt::jobs::JobStateName(job.state())).c_str());
  }
  return rc;
}

int Logs(const CommonFlags& f, const std::string& id, const std::string& rank_text,
         const std::string& stream, bool follow) {
  Connection c("logs", f);
  if (stream != "stdout" && stream != "stderr") {
    c.Error(absl::StrCat("--stream: must be stdout or stderr, got '", stream, "'"));
    return replica::kExitUsage;
  }
  // A global rank is an int32 on the wire (ReadLogRequest.rank).
  auto parsed_rank = ParseInt64("--rank", rank_text, 0, INT32_MAX);
  if (!parsed_rank.ok()) {
    c.Error(std::string(parsed_rank.status().message()));
    return replica::kExitUsage;
  }
  const int rank = static_cast<int>(*parsed_rank);
  if (!c.Open()) return c.exit_code();
  int64_t offset = 0;
  // With --follow: since when the service has been lost (CANCELLED when it stopped mid-call,
  // UNAVAILABLE or DEADLINE_EXCEEDED on every endpoint); reads resume at `offset` once one
  // answers, and after --timeout without one the last error ends the command (69).
  absl::Time lost_since = absl::InfiniteFuture();
  // With --follow: the job had ended when its rank was last not found (one more read then gives
  // the service's final word, e.g. "it never started").
  bool ended = false;
  // The node whose log `offset` is in: the rank moves to another node when its node is replaced,
  // and that node's file is read from its start.
  std::string node;
  // Without --follow: what the log holds now (a bounded number of reads); with it, until the job
  // ended and the log's end was reached.
  for (int reads = 0; follow || reads < 4096; ++reads) {
    v1::ReadLogRequest request;
    request.set_job_id(id);
    request.set_rank(rank);
    request.set_stream(stream);
    request.set_offset(offset);
    v1::ReadLogResponse response;
    grpc::Status st = c.Try([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
      return stub.ReadLog(ctx, request, &response);
    });
    if (follow && !st.ok()) {
      const auto code = st.error_code();
      if (code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNAVAILABLE ||
          code == grpc::StatusCode::DEADLINE_EXCEEDED) {
        if (lost_since == absl::InfiniteFuture()) lost_since = absl::Now();
        if (absl::Now() - lost_since < c.timeout()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          continue;
        }
      } else if (code == grpc::StatusCode::NOT_FOUND && !ended) {
        // The rank is not known yet (the job is queued or its run has not formed): wait while
        // the job has not ended and the rank is one it will have.
        v1::GetJobRequest get;
        get.set_job_id(id);
        v1::JobInfo job;
        grpc::Status got = c.Try([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
          return stub.GetJob(ctx, get, &job);
        });
        const int64_t ranks = static_cast<int64_t>(job.spec().instance_count()) *
                              std::max(1, job.spec().distribution().process_count_per_instance());
        if (got.ok() && rank < ranks) {
          lost_since = absl::InfiniteFuture();
          ended = job.finished_unix_s() > 0 || dgt::jobs::IsTerminal(job.state());
          if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(300));
          continue;
        }
      }
    }
    if (!st.ok()) return c.ExitFor(st);
    lost_since = absl::InfiniteFuture();
    if (!response.node_name().empty() && response.node_name() != node) {
      const bool moved = !node.empty();
      node = response.node_name();
      if (moved) {
        std::fprintf(stderr, "dgt logs: rank %d is now on node %s; its log there from the start\n",
                     rank, node.c_str());
        if (request.offset() != 0) {
          offset = 0;  // `data` is from the old node's offset: read the new file again.
          continue;
        }
      }
    }
    std::fwrite(response.data().data(), 1, response.data().size(), stdout);
    std::fflush(stdout);
    offset = response.next_offset();
    if (response.eof()) return 0;
    if (response.data().empty()) {
      if (!follow) return 0;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  return 0;
}

int ListNodes(const CommonFlags& f) {
  Connection c("nodes", f);
  if (!c.Open()) return c.exit_code();
  v1::ListNodesResponse response;
  int rc = c.Run([&](v1::Jobs::Stub& stub, grpc::ClientContext* ctx) {
    return stub.ListNodes(ctx, v1::ListNodesRequest(), &response);
  });
  if (rc == 0) std::fputs(FormatNodes(response, NowUnix()).c_str(), stdout);
  return rc;
}

// The most columns `dgt nodes` gives an unhealthy node's reason (ListNodes has all of it).
constexpr size_t kNodeReasonColumns = 100;

// `text` (valid UTF-8, as TerminalText writes it) in at most `max` columns: cut before a
// character, "..." after a cut.
std::string CutToWidth(const std::string& text, size_t max) {
  if (DisplayWidth(text) <= max) return text;
  std::string out;
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    len = std::min(len, text.size() - i);
    const absl::string_view ch(text.data() + i, len);
    const size_t w = DisplayWidth(ch);
    if (width + w + 3 > max) break;
    out.append(ch.data(), ch.size());
    width += w;
    i += len;
  }
  return out + "...";
}

// A node's health for `dgt nodes`: "ok", or "unhealthy " and its reason on one line (line breaks
// and tabs read as blanks, other control characters escaped), cut to kNodeReasonColumns.
std::string HealthText(const v1::NodeInfo& n) {
  if (!n.unhealthy()) return "ok";
  std::string reason = n.health_reason();
  std::replace_if(
      reason.begin(), reason.end(), [](char c) { return c == '\n' || c == '\t'; }, ' ');
  return absl::StrCat("unhealthy ", CutToWidth(TerminalText(reason), kNodeReasonColumns));
}

std::string Labels(const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  return sorted.empty() ? "-" : absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

}  // namespace

std::string FormatJobs(const v1::ListJobsResponse& jobs) {
  if (jobs.jobs_size() == 0) return "no jobs\n";
  // "2+1 x 4": instance_count, +spare_instances when any, x process_count_per_instance. The
  // column is as wide as its widest cell.
  std::vector<std::string> shapes;
  size_t shape_width = std::string_view("NODES x PROCS").size();
  for (const v1::JobInfo& j : jobs.jobs()) {
    shapes.push_back(absl::StrCat(
        j.spec().instance_count(),
        j.spec().spare_instances() > 0 ? absl::StrCat("+", j.spec().spare_instances()) : "", " x ",
        j.spec().distribution().process_count_per_instance()));
    shape_width = std::max(shape_width, shapes.back().size());
  }
  const int width = static_cast<int>(shape_width);
  std::string out = absl::StrFormat("%-12s %-10s %-*s %-8s %-20s %s\n", "JOB ID", "STATE", width,
                                    "NODES x PROCS", "RESTARTS", "NAME", "REASON");
  for (int i = 0; i < jobs.jobs_size(); ++i) {
    const v1::JobInfo& j = jobs.jobs(i);
    // The name is the user's text: padded by its width on the terminal, not its bytes.
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%-12s %-10s %-*s %-8d %s %s\n", j.job_id(), dgt::jobs::JobStateName(j.state()),
                  width, shapes[i], j.restarts() + j.node_replacements(),
                  PadRight(j.spec().name().empty() ? "-" : TerminalText(j.spec().name()), 20),
                  TerminalText(j.reason())));
  }
  return out;
}

std::string FormatJob(const v1::JobInfo& j, double now) {
  const v1::JobSpec& s = j.spec();
  // The user's text is printed through TerminalText: no control character reaches the terminal
  // (a command keeps its line breaks and tabs).
  std::string out =
      absl::StrCat("job ", j.job_id(), s.name().empty() ? "" : " (", TerminalText(s.name()),
                   s.name().empty() ? "" : ")", ": ", dgt::jobs::JobStateName(j.state()), "\n");
  if (!j.reason().empty()) absl::StrAppend(&out, "  reason: ", TerminalText(j.reason()), "\n");
  absl::StrAppend(&out, "  command: ", TerminalText(s.command(), "\n\t"), "\n");
  absl::StrAppend(
      &out, "  nodes: ", s.instance_count(), " x ", s.distribution().process_count_per_instance(),
      " process(es), distribution ",
      s.distribution().type().empty() ? "pytorch" : s.distribution().type(), ", restarts ",
      j.restarts() + j.node_replacements(), " of ", s.max_restarts(),
      j.node_replacements() > 0 ? absl::StrCat(" (", j.node_replacements(), " node replacement",
                                               j.node_replacements() > 1 ? "s" : "", ")")
                                : "",
      s.spare_instances() > 0
          ? absl::StrCat(", spares ", j.spares_used(), " of ", s.spare_instances(), " used")
          : "",
      "\n");
  absl::StrAppend(&out, "  submitted ", Ago(j.submitted_unix_s(), now), ", started ",
                  Ago(j.started_unix_s(), now), ", finished ", Ago(j.finished_unix_s(), now), "\n");
  if (j.nodes_size() > 0) {
    const int per = s.distribution().process_count_per_instance();
    // Once the run gave node ranks out, a running node without one waits in it as a spare.
    const bool ranked = std::any_of(j.nodes().begin(), j.nodes().end(),
                                    [](const v1::JobNode& n) { return n.node_rank() >= 0; });
    absl::StrAppend(&out, absl::StrFormat("  %-24s %-9s %-11s %s\n", "NODE", "NODE RANK", "RANKS",
                                          "EXIT CODE"));
    for (const v1::JobNode& n : j.nodes()) {
      std::string ranks =
          n.first_rank() >= 0 ? absl::StrCat(n.first_rank(), "-", n.first_rank() + per - 1) : "-";
      const bool waiting_spare = s.spare_instances() > 0 && ranked && n.node_rank() < 0 &&
                                 n.exit_code() < 0 && !n.taken_by_spare() &&
                                 !dgt::jobs::IsTerminal(j.state());
      std::string node_rank = n.node_rank() >= 0 ? absl::StrCat(n.node_rank()) : "-";
      if (waiting_spare) node_rank = "spare";
      std::string exit = n.exit_code() >= 0 ? absl::StrCat(n.exit_code()) : "-";
      if (n.taken_by_spare()) {
        exit = n.lost_without_ranks() ? "lost (it held no ranks: one spare fewer)"
                                      : "lost (a spare took its part)";
      }
      absl::StrAppend(
          &out, absl::StrFormat("  %s %-9s %-11s %s\n", PadRight(TerminalText(n.node_name()), 24),
                                node_rank, ranks, exit));
    }
  }
  return out;
}

std::string FormatJobJson(v1::JobInfo job) {
  // The values an empty field stands for, as the text form and dgt-run read them.
  v1::JobSpec& spec = *job.mutable_spec();
  if (spec.restart_policy().empty()) spec.set_restart_policy("group");
  if (spec.distribution().type().empty()) spec.mutable_distribution()->set_type("pytorch");
  // exit_code 0 and node_rank 0 are values: print every field.
  return dgt::jobs::JobInfoToJson(job, /*all_fields=*/true);
}

std::string FormatNodes(const v1::ListNodesResponse& nodes, double now) {
  if (nodes.nodes_size() == 0) return "no nodes registered\n";
  std::string out = absl::StrFormat("%-24s %-9s %-12s %-4s %-20s %-12s %s\n", "NODE", "STATE",
                                    "JOB", "GPUS", "LABELS", "REGISTERED", "HEALTH");
  for (const v1::NodeInfo& n : nodes.nodes()) {
    absl::StrAppend(&out, absl::StrFormat("%s %-9s %-12s %-4d %s %-12s %s\n",
                                          PadRight(TerminalText(n.node_name()), 24), n.state(),
                                          n.job_id().empty() ? "-" : n.job_id(), n.gpu_count(),
                                          PadRight(TerminalText(Labels(n.labels())), 20),
                                          Ago(n.registered_unix_s(), now), HealthText(n)));
  }
  return out;
}

void AddJobsCommands(CLI::App& app, std::function<int()>* run) {
  {
    auto f = std::make_shared<CommonFlags>();
    auto file = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("submit",
                                       "Submit a job (JOB.yaml; docs/JOBS.md); prints "
                                       "its id");
    cmd->add_option("job_file", *file, "The job spec (YAML)")->required()->type_name("JOB.yaml");
    AddCommonFlags(cmd, f.get());
    cmd->callback([f, file, run] { *run = [f, file] { return Submit(*f, *file); }; });
  }
  {
    auto f = std::make_shared<CommonFlags>();
    CLI::App* cmd = app.add_subcommand("jobs", "List the jobs, in submission order");
    AddCommonFlags(cmd, f.get());
    cmd->callback([f, run] { *run = [f] { return ListJobs(*f); }; });
  }
  {
    auto f = std::make_shared<CommonFlags>();
    auto id = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    CLI::App* job = app.add_subcommand("job", "One job");
    job->require_subcommand(1);
    CLI::App* show =
        job->add_subcommand("show", "A job's state, nodes, ranks, restarts, exit codes, reason");
    show->add_option("job_id", *id, "The job id")->required()->type_name("ID");
    show->add_flag("--json", *json, "Print the job as JSON (dgt.jobs.v1.JobInfo)");
    AddCommonFlags(show, f.get());
    show->callback(
        [f, id, json, run] { *run = [f, id, json] { return ShowJob(*f, *id, *json); }; });
  }
  {
    auto f = std::make_shared<CommonFlags>();
    auto id = std::make_shared<std::string>();
    // Text until ParseInt64 checks it: CLI11's own message for "99999999999" is "Could not
    // convert".
    auto rank = std::make_shared<std::string>("0");
    auto stream = std::make_shared<std::string>("stdout");
    auto follow = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand("logs", "A rank's log, read from the node that ran it");
    cmd->add_option("job_id", *id, "The job id")->required()->type_name("ID");
    cmd->add_option("--rank", *rank, "Global rank")->type_name("RANK")->capture_default_str();
    cmd->add_option("--stream", *stream, "stdout or stderr")->capture_default_str();
    cmd->add_flag("--follow,-f", *follow, "Keep reading until the job ends");
    AddCommonFlags(cmd, f.get());
    cmd->callback([=] { *run = [=] { return Logs(*f, *id, *rank, *stream, *follow); }; });
  }
  {
    auto f = std::make_shared<CommonFlags>();
    auto id = std::make_shared<std::string>();
    auto grace = std::make_shared<std::string>("0");
    CLI::App* cmd = app.add_subcommand("cancel", "Cancel a queued or running job");
    cmd->add_option("job_id", *id, "The job id")->required()->type_name("ID");
    cmd->add_option("--grace", *grace, "Seconds from SIGTERM to SIGKILL (0: the service's 30)")
        ->type_name("SECONDS")
        ->capture_default_str();
    AddCommonFlags(cmd, f.get());
    cmd->callback([=] { *run = [=] { return CancelJob(*f, *id, *grace); }; });
  }
  {
    auto f = std::make_shared<CommonFlags>();
    CLI::App* cmd = app.add_subcommand("nodes", "The registered node daemons");
    AddCommonFlags(cmd, f.get());
    cmd->callback([f, run] { *run = [f] { return ListNodes(*f); }; });
  }
}

}  // namespace dgt::cli
