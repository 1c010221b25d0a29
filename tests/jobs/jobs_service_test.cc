// JobsService over real gRPC on loopback: what the e2e test cannot reach through `dgt` (a spec
// the CLI would refuse, sent by another client; a node that never answers a log read; tokens on
// the Register stream).
#include "jobs/jobs_service.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dgt::jobs {
namespace {

using ::testing::ElementsAre;

// An etcd that stops answering job writes when `fail_puts` is set (UNAVAILABLE, not fenced: the
// write may or may not have been applied).
class FlakyJobBackend final : public JobStateBackend {
 public:
  std::atomic<bool> fail_puts{false};
  absl::Status PutJob(const v1::JobInfo& job) override {
    if (fail_puts) return absl::UnavailableError("etcd txn: no answer within 2s");
    return inner_.PutJob(job);
  }
  absl::Status DeleteJob(absl::string_view job_id) override { return inner_.DeleteJob(job_id); }
  absl::Status PutNode(const v1::NodeInfo& node) override { return inner_.PutNode(node); }
  absl::Status DeleteNode(absl::string_view name) override { return inner_.DeleteNode(name); }
  absl::StatusOr<std::vector<v1::JobInfo>> LoadJobs() override { return inner_.LoadJobs(); }
  absl::StatusOr<std::vector<v1::NodeInfo>> LoadNodes() override { return inner_.LoadNodes(); }

 private:
  InMemoryJobStateBackend inner_;
};

class JobsServiceTest : public ::testing::Test {
 protected:
  void Start(JobsServiceOptions options) {
    options.log_timeout = absl::Milliseconds(300);
    auto service = JobsService::Create(std::move(options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    service_->set_rdzv_endpoint("127.0.0.1:29400");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Jobs::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (service_) service_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  static void Deadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  static JobsServiceOptions Open() {
    JobsServiceOptions options;
    options.allow_unauthenticated_submit = true;
    return options;
  }
  static JobsServiceOptions Guarded() {
    JobsServiceOptions options;
    options.agent_token = "agents";
    options.submit_token = "submit";
    return options;
  }
  // JobsServiceOptions::run_status of a run whose one node, "a", holds node rank 0.
  static std::optional<rendezvous::RunStatus> NodeAHoldsRank0(const std::string& id) {
    rendezvous::RunStatus run;
    run.run_id = id;
    run.round = 0;
    run.nodes.emplace_back().node_id = "a";
    run.nodes.back().node_rank = 0;
    return run;
  }
  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_command("true");
    spec.set_instance_count(1);
    spec.mutable_distribution()->set_process_count_per_instance(1);
    return spec;
  }

  // A node daemon's Register stream, registered as `name` (its Registered read).
  struct FakeNode {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::NodeMessage, v1::ControlMessage>> stream;
  };
  std::unique_ptr<FakeNode> Node(const std::string& name) {
    v1::NodeHello hello;
    hello.set_node_name(name);
    return Node(hello);
  }
  std::unique_ptr<FakeNode> Node(const v1::NodeHello& node_hello) {
    const std::string& name = node_hello.node_name();
    auto node = std::make_unique<FakeNode>();
    Deadline(&node->ctx);
    node->stream = stub_->Register(&node->ctx);
    v1::NodeMessage hello;
    *hello.mutable_hello() = node_hello;
    EXPECT_TRUE(node->stream->Write(hello));
    v1::ControlMessage m;
    EXPECT_TRUE(node->stream->Read(&m));
    EXPECT_EQ(m.registered().node_name(), name);
    return node;
  }
  std::string SubmitJob(const v1::JobSpec& spec) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitResponse response;
    grpc::Status st = stub_->Submit(&ctx, request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response.job_id();
  }
  v1::JobInfo GetJob(const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::JobInfo job;
    grpc::Status st = stub_->GetJob(&ctx, get, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }
  static v1::NodeMessage JobUpdate(const std::string& id, v1::JobEvent event, int code) {
    v1::NodeMessage m;
    m.mutable_update()->set_job_id(id);
    m.mutable_update()->set_event(event);
    m.mutable_update()->set_exit_code(code);
    return m;
  }

  // State the service's threads may touch until TearDown stops it; declared first, so destroyed
  // after the service.
  InMemoryJobStateBackend memory_backend_;
  FlakyJobBackend flaky_backend_;
  std::vector<std::string> fenced_;
  std::unique_ptr<JobsService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Jobs::Stub> stub_;
  int port_ = 0;
};

TEST_F(JobsServiceTest, SubmitValidatesTheSpec) {
  Start(Open());
  v1::SubmitRequest request;
  *request.mutable_spec() = Spec();
  request.mutable_spec()->mutable_distribution()->set_type("mpi");
  v1::SubmitResponse response;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  grpc::Status st = stub_->Submit(&ctx, request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "distribution.type: 'mpi' is not supported by dgt-run (pytorch or tensorflow)");
}

// A raw gRPC Submit (not through dgt submit's own check): a NUL byte in the command or in an
// environment variable's value is refused naming the key, and no job is queued.
TEST_F(JobsServiceTest, SubmitRefusesANulByteNamingTheKey) {
  Start(Open());
  struct Case {
    std::function<void(v1::JobSpec&)> change;
    const char* error;
  };
  for (const Case& c : std::initializer_list<Case>{
           {[](v1::JobSpec& s) { s.set_command(std::string("echo \0 nul", 10)); },
            "command: must not contain a NUL byte (found at byte 5)"},
           {[](v1::JobSpec& s) {
              (*s.mutable_environment_variables())["SEED"] = std::string("7\0", 2);
            },
            "environment_variables.SEED: must not contain a NUL byte (found at byte 1)"},
       }) {
    v1::SubmitRequest request;
    *request.mutable_spec() = Spec();
    c.change(*request.mutable_spec());
    v1::SubmitResponse response;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status st = stub_->Submit(&ctx, request, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(st.error_message(), c.error);
    EXPECT_EQ(response.job_id(), "");
  }
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(JobsServiceTest, TokensGuardRegisterAndSubmit) {
  Start(Guarded());
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    auto stream = stub_->Register(&ctx);
    v1::NodeMessage hello;
    hello.mutable_hello()->set_node_name("a");
    stream->Write(hello);
    v1::ControlMessage m;
    EXPECT_FALSE(stream->Read(&m));
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(st.error_message(), "missing or wrong bearer token");
  }
  for (const char* token : {"", "agents"}) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    if (*token != '\0') ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::SubmitRequest request;
    *request.mutable_spec() = Spec();
    v1::SubmitResponse response;
    grpc::Status st = stub_->Submit(&ctx, request, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_EQ(st.error_message(), "missing or wrong submit token");
  }
  grpc::ClientContext ctx;
  Deadline(&ctx);
  ctx.AddMetadata("authorization", "Bearer submit");
  v1::SubmitRequest request;
  *request.mutable_spec() = Spec();
  v1::SubmitResponse response;
  ASSERT_TRUE(stub_->Submit(&ctx, request, &response).ok());
  EXPECT_EQ(response.job_id(), "job-1");
}

TEST_F(JobsServiceTest, ReadLogFromANodeThatNeverAnswersTimesOut) {
  JobsServiceOptions options;
  options.allow_unauthenticated_submit = true;
  options.poll_interval = absl::Milliseconds(50);
  // The job's run as the rendezvous would report it: node a holds node rank 0.
  options.run_status = [](const std::string& id) -> std::optional<rendezvous::RunStatus> {
    rendezvous::RunStatus run;
    run.run_id = id;
    run.round = 0;
    run.nodes.resize(1);
    run.nodes[0].node_id = "a";
    run.nodes[0].node_rank = 0;
    return run;
  };
  Start(std::move(options));
  grpc::ClientContext node_ctx;
  auto stream = stub_->Register(&node_ctx);
  v1::NodeMessage hello;
  hello.mutable_hello()->set_node_name("a");
  ASSERT_TRUE(stream->Write(hello));
  v1::ControlMessage m;
  ASSERT_TRUE(stream->Read(&m));
  EXPECT_EQ(m.registered().node_name(), "a");
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitRequest request;
    *request.mutable_spec() = Spec();
    v1::SubmitResponse response;
    ASSERT_TRUE(stub_->Submit(&ctx, request, &response).ok());
  }
  ASSERT_TRUE(stream->Read(&m));
  EXPECT_EQ(m.start().job_id(), "job-1");
  EXPECT_EQ(m.start().rdzv_endpoint(), "127.0.0.1:29400");
  // The poller takes the ranks from the run.
  v1::JobInfo job;
  for (int i = 0; i < 100 && (job.nodes_size() == 0 || job.nodes(0).first_rank() != 0); ++i) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetJobRequest get;
    get.set_job_id("job-1");
    ASSERT_TRUE(stub_->GetJob(&ctx, get, &job).ok());
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(job.nodes(0).first_rank(), 0);
  v1::ReadLogRequest read;
  read.set_job_id("job-1");
  v1::ReadLogResponse response;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    const absl::Time start = absl::Now();
    grpc::Status st = stub_->ReadLog(&ctx, read, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(st.error_message(), "node 'a' did not send the log within 300ms");
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  }
  // The node was asked for local rank 0's stdout, 1 MiB at most.
  ASSERT_TRUE(stream->Read(&m));
  EXPECT_EQ(m.read_log().job_id(), "job-1");
  EXPECT_EQ(m.read_log().local_rank(), 0);
  EXPECT_EQ(m.read_log().stream(), "stdout");
  EXPECT_EQ(m.read_log().max_bytes(), 1 << 20);
  // A bad stream name.
  read.set_stream("stdin");
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status st = stub_->ReadLog(&ctx, read, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(st.error_message(), "stream: must be stdout or stderr, got 'stdin'");
  }
  // The node gone while a read waits for it: FAILED_PRECONDITION too (UNAVAILABLE would read as a
  // service that did not answer).
  read.set_stream("stdout");
  {
    grpc::Status pending;
    std::thread reader([&] {
      grpc::ClientContext ctx;
      Deadline(&ctx);
      pending = stub_->ReadLog(&ctx, read, &response);
    });
    ASSERT_TRUE(stream->Read(&m));  // The service asked the node; it never answers.
    EXPECT_EQ(m.read_log().job_id(), "job-1");
    node_ctx.TryCancel();
    reader.join();
    EXPECT_EQ(pending.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(pending.error_message(),
              "node 'a' deregistered before it answered: its log cannot be read now");
  }
  // The node gone: the service answers FAILED_PRECONDITION (UNAVAILABLE would read as a service
  // that did not answer).
  grpc::Status st;
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    st = stub_->ReadLog(&ctx, read, &response);
    if (st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) break;
  }
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(),
            "node 'a' (rank 0 of job-1) is not registered now: its log cannot be read");
}

// ReadLogResponse.node_name says which node answered: a rank moves to another node when its node
// is replaced, and `dgt logs --follow` reads the new node's file from its start.
TEST_F(JobsServiceTest, ReadLogSaysWhichNodeAnswered) {
  JobsServiceOptions options = Open();
  options.poll_interval = absl::Milliseconds(50);
  options.run_status = NodeAHoldsRank0;
  Start(std::move(options));
  auto a = Node("a");
  ASSERT_EQ(SubmitJob(Spec()), "job-1");
  v1::ControlMessage m;
  ASSERT_TRUE(a->stream->Read(&m));
  ASSERT_EQ(m.start().job_id(), "job-1");
  v1::JobInfo job;
  for (int i = 0; i < 100 && (job.nodes_size() == 0 || job.nodes(0).first_rank() != 0); ++i) {
    job = GetJob("job-1");
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(job.nodes(0).first_rank(), 0);
  v1::ReadLogRequest read;
  read.set_job_id("job-1");
  v1::ReadLogResponse response;
  grpc::Status st;
  std::thread reader([&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    st = stub_->ReadLog(&ctx, read, &response);
  });
  // The node answers the ReadLog it is sent (its stream's deadline bounds this read).
  const bool asked = a->stream->Read(&m);
  if (asked) {
    v1::NodeMessage chunk;
    chunk.mutable_log()->set_request_id(m.read_log().request_id());
    chunk.mutable_log()->set_data("pid=9305 i=1\n");
    chunk.mutable_log()->set_next_offset(13);
    a->stream->Write(chunk);
  }
  reader.join();
  ASSERT_TRUE(asked);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.node_name(), "a");
  EXPECT_EQ(response.data(), "pid=9305 i=1\n");
  EXPECT_EQ(response.next_offset(), 13);
  a->ctx.TryCancel();
}

TEST_F(JobsServiceTest, AJobOverBeforeAnyPollStillGetsItsRanks) {
  JobsServiceOptions options = Open();
  options.poll_interval = absl::Hours(1);  // No poll after the job is submitted.
  options.run_status = NodeAHoldsRank0;
  Start(std::move(options));
  auto a = Node("a");
  const std::string id = SubmitJob(Spec());
  v1::ControlMessage m;
  ASSERT_TRUE(a->stream->Read(&m));
  ASSERT_EQ(m.start().job_id(), id);
  ASSERT_TRUE(a->stream->Write(JobUpdate(id, v1::JOB_EVENT_STARTED, 0)));
  ASSERT_TRUE(a->stream->Write(JobUpdate(id, v1::JOB_EVENT_EXITED, 0)));
  v1::JobInfo job;
  for (int i = 0; i < 100 && job.state() != v1::JOB_STATE_SUCCEEDED; ++i) {
    job = GetJob(id);
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(job.nodes_size(), 1);
  EXPECT_EQ(job.nodes(0).node_rank(), 0);
  EXPECT_EQ(job.nodes(0).first_rank(), 0);
  a->ctx.TryCancel();
}

// A daemon's health: from its NodeHello, then each NodeHealth on the stream; shown by ListNodes,
// persisted with the node, and honoured by the queue.
TEST_F(JobsServiceTest, TheStreamSetsTheNodesHealth) {
  InMemoryJobStateBackend& backend = memory_backend_;
  JobsServiceOptions options = Open();
  options.backend = &backend;
  Start(std::move(options));
  const std::string reason =
      "health check 'test -e /tmp/ok' failed: exited with code 1: (no output)";
  v1::NodeHello hello;
  hello.set_node_name("a");
  hello.set_unhealthy(true);
  hello.set_health_reason(reason);
  auto a = Node(hello);
  const std::string id = SubmitJob(Spec());
  v1::JobInfo job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.reason(),
            "needs 1 idle node; 0 match; 1 of 1 registered node is unhealthy (a: " + reason + ")");
  auto list = [&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::ListNodesResponse nodes;
    EXPECT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
    return nodes;
  };
  v1::ListNodesResponse nodes = list();
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_TRUE(nodes.nodes(0).unhealthy());
  EXPECT_EQ(nodes.nodes(0).health_reason(), reason);
  auto stored = backend.LoadNodes();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].health_reason(), reason);

  // Healthy again: the job starts there.
  v1::NodeMessage healthy;
  healthy.mutable_health()->set_unhealthy(false);
  ASSERT_TRUE(a->stream->Write(healthy));
  v1::ControlMessage m;
  ASSERT_TRUE(a->stream->Read(&m));
  EXPECT_EQ(m.start().job_id(), id);
  nodes = list();
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_FALSE(nodes.nodes(0).unhealthy());
  EXPECT_EQ(nodes.nodes(0).health_reason(), "");
  EXPECT_EQ(nodes.nodes(0).state(), "busy");

  // Unhealthy under its job: the job goes on.
  v1::NodeMessage sick;
  sick.mutable_health()->set_unhealthy(true);
  sick.mutable_health()->set_health_reason(reason);
  ASSERT_TRUE(a->stream->Write(sick));
  for (int i = 0; i < 100 && !list().nodes(0).unhealthy(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  nodes = list();
  EXPECT_TRUE(nodes.nodes(0).unhealthy());
  EXPECT_EQ(nodes.nodes(0).health_reason(), reason);
  EXPECT_EQ(nodes.nodes(0).state(), "busy");
  EXPECT_EQ(GetJob(id).state(), v1::JOB_STATE_STARTING);
  a->ctx.TryCancel();
}

TEST_F(JobsServiceTest, ANodeLostMidJobFailsItAfterTheGrace) {
  JobsServiceOptions options = Open();
  options.poll_interval = absl::Hours(1);
  options.scheduler.lost_node_grace = absl::Milliseconds(300);
  Start(std::move(options));
  auto a = Node("a");
  auto b = Node("b");
  v1::JobSpec spec = Spec();
  spec.set_instance_count(2);
  const std::string id = SubmitJob(spec);
  v1::ControlMessage m;
  for (auto* node : {a.get(), b.get()}) {
    ASSERT_TRUE(node->stream->Read(&m));
    ASSERT_EQ(m.start().job_id(), id);
    ASSERT_TRUE(node->stream->Write(JobUpdate(id, v1::JOB_EVENT_STARTED, 0)));
  }
  for (int i = 0; i < 100 && GetJob(id).state() != v1::JOB_STATE_RUNNING; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(GetJob(id).state(), v1::JOB_STATE_RUNNING);
  const absl::Time lost = absl::Now();
  b->ctx.TryCancel();  // b's daemon is gone (kill -9).
  ASSERT_TRUE(a->stream->Read(&m));
  EXPECT_GE(absl::Now() - lost, absl::Milliseconds(300));
  EXPECT_EQ(m.cancel().job_id(), id);
  EXPECT_EQ(m.cancel().grace_s(), 30);
  v1::JobInfo job = GetJob(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.reason(),
            "node b: its daemon was lost mid-job (no re-registration within 0.3 s); "
            "max_restarts 0");
  a->ctx.TryCancel();
}

TEST_F(JobsServiceTest, SubmitAndCancelWhoseRecordWasNotSavedAreNotAcknowledged) {
  FlakyJobBackend& backend = flaky_backend_;
  JobsServiceOptions options = Open();
  options.backend = &backend;
  Start(std::move(options));
  const std::string saved = SubmitJob(Spec());
  ASSERT_EQ(saved, "job-1");

  backend.fail_puts = true;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SubmitRequest request;
    *request.mutable_spec() = Spec();
    v1::SubmitResponse response;
    grpc::Status st = stub_->Submit(&ctx, request, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(st.error_message(),
              "job job-2 was accepted but its record was not saved (etcd txn: no answer within "
              "2s): it may run, or be lost if this replica stops leading; check `dgt jobs` before "
              "submitting it again");
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::CancelRequest request;
    request.set_job_id(saved);
    v1::JobInfo job;
    grpc::Status st = stub_->Cancel(&ctx, request, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(st.error_message(),
              "the cancel of job job-1 was applied but not saved (etcd txn: no answer within 2s); "
              "ask again");
  }
  // Once etcd answers again, a write of the same records is acknowledged.
  backend.fail_puts = false;
  EXPECT_EQ(SubmitJob(Spec()), "job-3");
}

// With replicas, a leader whose job record was not saved gives up its leadership: its memory
// (job-1 cancelled) may not be in etcd, and the next leader reads etcd (job-1 queued). Serving
// "already finished" from memory was seen as a cancel that a later leader never knew of.
TEST_F(JobsServiceTest, ALeaderWhoseJobRecordWasNotSavedGivesUpLeadership) {
  FlakyJobBackend& backend = flaky_backend_;
  JobsServiceOptions options = Open();
  options.backend = &backend;
  options.elected = true;
  options.replica_id = "r1";
  std::vector<std::string>& fenced = fenced_;
  options.on_fenced = [&fenced](const absl::Status& s) { fenced.emplace_back(s.message()); };
  Start(std::move(options));
  ASSERT_TRUE(service_->TakeOver().ok());
  ASSERT_EQ(SubmitJob(Spec()), "job-1");
  backend.fail_puts = true;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::CancelRequest request;
  request.set_job_id("job-1");
  v1::JobInfo job;
  grpc::Status st = stub_->Cancel(&ctx, request, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(),
            "the cancel of job job-1 was applied but not saved (etcd txn: no answer within 2s); "
            "ask again");
  EXPECT_FALSE(service_->is_leader());
  EXPECT_THAT(fenced, ElementsAre("job job-1's record was not saved (etcd txn: no answer within "
                                  "2s); the next leader reads every job from etcd"));
  // Leading again, it serves what etcd holds.
  backend.fail_puts = false;
  ASSERT_TRUE(service_->TakeOver().ok());
  grpc::ClientContext get_ctx;
  Deadline(&get_ctx);
  v1::GetJobRequest get;
  get.set_job_id("job-1");
  v1::JobInfo got;
  ASSERT_TRUE(stub_->GetJob(&get_ctx, get, &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_QUEUED);
}

}  // namespace
}  // namespace dgt::jobs
