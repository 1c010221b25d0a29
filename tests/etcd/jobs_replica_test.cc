// The jobs service on several dgt-rendezvous replicas (docs/JOBS.md, "Replicas"): in-process
// server layers (server::Server, as dgt-rendezvous --backend=etcd runs it) on one etcd prefix,
// each with an EtcdRunStateBackend, a fenced EtcdJobStateBackend and an etcd::LeaderElection,
// against a real three-member etcd cluster on loopback. Node daemons are raw Register streams.
// Checks:
// - a standby refuses Register, Submit, Cancel and ReadLog with a standby's answer (NotLeader)
//   and serves GetJob / ListJobs / ListNodes from etcd.
// - the leader's lease revoked -> the other replica leads, and the node's stream ends with
//   "replica <id> lost its leadership". The node re-registers there listing its job, which stays
//   running on it, and finishes there.
// - a fenced job write is refused (backend) and makes the service step down without sending the
//   StartJob it decided (service).
// Skipped without an etcd binary, except under CI=true.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "etcd/client.h"
#include "etcd/leader_election.h"
#include "grpcpp/grpcpp.h"
#include "jobs/etcd_job_state_backend.h"
#include "rendezvous/etcd_run_state_backend.h"
#include "rendezvous/service.h"
#include "replica/leadership_status.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/etcd/replica_harness.h"

namespace dgt::rendezvous {
namespace {

namespace jv1 = ::dgt::jobs::v1;
using etcd::testing::EtcdCluster;

using testing::ClientFor;
using testing::Replica;
using testing::WaitForOneLeader;

// Run records under <prefix>runs/, job records under <prefix>jobs/.
std::unique_ptr<Replica> StartReplica(const EtcdCluster& cluster, const std::string& prefix,
                                      const std::string& id) {
  server::ServerOptions options;
  options.jobs.allow_unauthenticated_submit = true;
  options.jobs.poll_interval = absl::Milliseconds(100);
  return testing::StartReplica(cluster, std::move(options), absl::StrCat(prefix, "runs/"), id,
                               absl::StrCat(prefix, "jobs/"));
}

std::unique_ptr<jv1::Jobs::Stub> StubFor(const std::string& address) {
  return jv1::Jobs::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void Deadline(grpc::ClientContext* ctx, int seconds = 10) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// A node daemon's Register stream to one replica.
class Node {
 public:
  Node(const std::string& address, const std::string& name,
       const std::vector<std::string>& running = {})
      : stub_(StubFor(address)) {
    Deadline(&ctx_, 30);
    stream_ = stub_->Register(&ctx_);
    jv1::NodeMessage hello;
    hello.mutable_hello()->set_node_name(name);
    hello.mutable_hello()->set_hostname(name + ".test");
    for (const std::string& id : running) hello.mutable_hello()->add_running_job_ids(id);
    stream_->Write(hello);
  }
  ~Node() {
    if (!finished_) {
      ctx_.TryCancel();
      (void)stream_->Finish();
    }
  }
  bool Read(jv1::ControlMessage* out) {
    if (finished_) return false;
    if (stream_->Read(out)) return true;
    status_ = stream_->Finish();
    finished_ = true;
    return false;
  }
  bool Update(const std::string& job_id, jv1::JobEvent event, int exit_code = 0) {
    jv1::NodeMessage m;
    m.mutable_update()->set_job_id(job_id);
    m.mutable_update()->set_event(event);
    m.mutable_update()->set_exit_code(exit_code);
    return stream_->Write(m);
  }
  // Reads to the end of the stream; returns its status and the kinds of what came before.
  grpc::Status End(std::vector<jv1::ControlMessage::KindCase>* kinds = nullptr) {
    jv1::ControlMessage m;
    while (Read(&m)) {
      if (kinds != nullptr) kinds->push_back(m.kind_case());
    }
    return status_;
  }

 private:
  std::unique_ptr<jv1::Jobs::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<jv1::NodeMessage, jv1::ControlMessage>> stream_;
  bool finished_ = false;
  grpc::Status status_;
};

jv1::JobSpec Spec() {
  jv1::JobSpec spec;
  spec.set_command("true");
  spec.set_instance_count(1);
  spec.mutable_distribution()->set_process_count_per_instance(1);
  return spec;
}

grpc::Status Submit(const std::string& address, std::string* job_id) {
  auto stub = StubFor(address);
  grpc::ClientContext ctx;
  Deadline(&ctx);
  jv1::SubmitRequest request;
  *request.mutable_spec() = Spec();
  jv1::SubmitResponse response;
  grpc::Status st = stub->Submit(&ctx, request, &response);
  if (job_id != nullptr) *job_id = response.job_id();
  return st;
}

grpc::Status GetJob(const std::string& address, const std::string& id, jv1::JobInfo* out) {
  auto stub = StubFor(address);
  grpc::ClientContext ctx;
  Deadline(&ctx);
  jv1::GetJobRequest request;
  request.set_job_id(id);
  return stub->GetJob(&ctx, request, out);
}

// Polls GetJob at `address` until the job is in `state` (up to 10 s); returns the last answer.
jv1::JobInfo WaitForState(const std::string& address, const std::string& id, jv1::JobState state) {
  jv1::JobInfo job;
  for (int i = 0; i < 200; ++i) {
    job.Clear();
    if (GetJob(address, id, &job).ok() && job.state() == state) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return job;
}

class JobsReplicaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (EtcdCluster::FindEtcd().empty()) return;
    cluster_ = new EtcdCluster();
    absl::Status s = cluster_->Start(3, absl::Seconds(60));
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    testing::SkipWithoutEtcd();
    if (IsSkipped() || HasFailure()) return;
    ASSERT_NE(cluster_, nullptr);
    auto client = etcd::Client::Create(ClientFor(*cluster_));
    ASSERT_TRUE(client.ok());
    etcd_ = *std::move(client);
  }
  static EtcdCluster* cluster_;
  std::unique_ptr<etcd::Client> etcd_;
};

EtcdCluster* JobsReplicaTest::cluster_ = nullptr;

TEST_F(JobsReplicaTest, TheStandbyRefusesRegisterAndSubmitAndReadsFromEtcd) {
  auto r1 = StartReplica(*cluster_, "/jr1/", "r1");
  auto r2 = StartReplica(*cluster_, "/jr1/", "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  Replica* standby = leader == r1.get() ? r2.get() : r1.get();
  absl::SleepFor(absl::Milliseconds(300));  // The standby learns the leader's address.
  const std::string refusal = absl::StrCat("dgt-rendezvous replica ", standby->id,
                                           " is a standby; the leader is ", leader->address);
  // The typed answer names this replica and the leader.
  auto expect_standby_answer = [&](const grpc::Status& st) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(st.error_message(), refusal);
    const std::optional<dgt::replica::v1::NotLeader> answer = dgt::replica::StandbyAnswer(st);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->replica_id(), standby->id);
    EXPECT_EQ(answer->leader_address(), leader->address);
  };

  Node refused(standby->address, "a");
  grpc::Status st = refused.End();
  expect_standby_answer(st);
  st = Submit(standby->address, nullptr);
  expect_standby_answer(st);

  // The leader queues the job (no node); the standby's GetJob reads the leader's record.
  std::string id;
  ASSERT_TRUE(Submit(leader->address, &id).ok());
  EXPECT_EQ(id, "job-1");
  jv1::JobInfo job;
  ASSERT_TRUE(GetJob(standby->address, id, &job).ok());
  EXPECT_EQ(job.job_id(), "job-1");
  EXPECT_EQ(job.state(), jv1::JOB_STATE_QUEUED);
  EXPECT_EQ(GetJob(standby->address, "job-7", &job).error_code(), grpc::StatusCode::NOT_FOUND);

  auto stub = StubFor(standby->address);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    jv1::CancelRequest request;
    request.set_job_id(id);
    jv1::JobInfo out;
    st = stub->Cancel(&ctx, request, &out);
    expect_standby_answer(st);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    jv1::ListJobsRequest request;
    jv1::ListJobsResponse out;
    ASSERT_TRUE(stub->ListJobs(&ctx, request, &out).ok());
    ASSERT_EQ(out.jobs_size(), 1);
    EXPECT_EQ(out.jobs(0).job_id(), "job-1");
  }
  // A standby starting up deleted none of the leader's node records.
  Node a(leader->address, "a");
  jv1::ControlMessage m;
  ASSERT_TRUE(a.Read(&m));
  EXPECT_TRUE(m.has_registered());
  ASSERT_TRUE(a.Read(&m));  // The queued job is placed on it.
  ASSERT_TRUE(m.has_start());
  EXPECT_EQ(m.start().job_id(), "job-1");
  auto r3 = StartReplica(*cluster_, "/jr1/", "r3");
  ASSERT_TRUE(r3);
  absl::SleepFor(absl::Milliseconds(300));
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    jv1::ListNodesRequest request;
    jv1::ListNodesResponse out;
    ASSERT_TRUE(StubFor(r3->address)->ListNodes(&ctx, request, &out).ok());
    ASSERT_EQ(out.nodes_size(), 1);
    EXPECT_EQ(out.nodes(0).node_name(), "a");
    EXPECT_EQ(out.nodes(0).job_id(), "job-1");
  }
}

TEST_F(JobsReplicaTest, AJobStaysRunningOnItsNodeAcrossATakeover) {
  auto r1 = StartReplica(*cluster_, "/jr2/", "r1");
  auto r2 = StartReplica(*cluster_, "/jr2/", "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  Replica* standby = leader == r1.get() ? r2.get() : r1.get();

  auto a = std::make_unique<Node>(leader->address, "a");
  jv1::ControlMessage m;
  ASSERT_TRUE(a->Read(&m));
  ASSERT_TRUE(m.has_registered());
  std::string id;
  ASSERT_TRUE(Submit(leader->address, &id).ok());
  ASSERT_TRUE(a->Read(&m));
  ASSERT_TRUE(m.has_start());
  EXPECT_EQ(m.start().job_id(), id);
  ASSERT_TRUE(a->Update(id, jv1::JOB_EVENT_STARTED));
  jv1::JobInfo before = WaitForState(leader->address, id, jv1::JOB_STATE_RUNNING);
  ASSERT_EQ(before.state(), jv1::JOB_STATE_RUNNING);
  ASSERT_EQ(before.nodes_size(), 1);
  EXPECT_EQ(before.nodes(0).node_name(), "a");

  // The leader's lease ends (as when it dies or is cut off from etcd: etcd deletes its key).
  auto key = etcd_->Get(etcd::LeaderKeyFor("/jr2/runs/"));
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(etcd_->LeaseRevoke(key->lease).ok());
  grpc::Status ended = a->End();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StartsWith(ended.error_message(),
                               absl::StrCat("replica ", leader->id, " lost its leadership")))
      << ended.error_message();
  Replica* next = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(next, nullptr);
  // Whoever leads now (the revoked replica campaigns again too) has the job, still running.
  jv1::JobInfo after;
  ASSERT_TRUE(GetJob(next->address, id, &after).ok());
  EXPECT_EQ(after.state(), jv1::JOB_STATE_RUNNING);
  EXPECT_EQ(after.started_unix_s(), before.started_unix_s());
  ASSERT_EQ(after.nodes_size(), 1);
  EXPECT_EQ(after.nodes(0).node_name(), "a");
  (void)standby;

  // The daemon registers at the new leader listing the job: no CancelJob, it stays on it.
  a = std::make_unique<Node>(next->address, "a", std::vector<std::string>{id});
  ASSERT_TRUE(a->Read(&m));
  ASSERT_TRUE(m.has_registered()) << m.DebugString();
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    jv1::ListNodesRequest request;
    jv1::ListNodesResponse out;
    ASSERT_TRUE(StubFor(next->address)->ListNodes(&ctx, request, &out).ok());
    ASSERT_EQ(out.nodes_size(), 1);
    EXPECT_EQ(out.nodes(0).job_id(), id);
  }
  ASSERT_TRUE(a->Update(id, jv1::JOB_EVENT_EXITED, 0));
  jv1::JobInfo done = WaitForState(next->address, id, jv1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.state(), jv1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(done.nodes_size(), 1);
  EXPECT_EQ(done.nodes(0).exit_code(), 0);
  // And etcd holds the outcome (what the next leader would read).
  auto stored = next->jobs_backend->LoadJobs();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].state(), jv1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobsReplicaTest, AFencedJobWriteIsRefused) {
  const std::string leader_key = "/jr3/runs.leader";
  jobs::EtcdJobStateBackend::Options o;
  o.client = ClientFor(*cluster_);
  o.prefix = "/jr3/fence/";
  o.leader_key = leader_key;
  auto backend = jobs::EtcdJobStateBackend::Open(o);
  ASSERT_TRUE(backend.ok());
  jv1::JobInfo job;
  job.set_job_id("job-1");
  job.set_state(jv1::JOB_STATE_QUEUED);
  absl::Status s = (*backend)->PutJob(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            absl::StrCat("fenced: this replica holds no leader key (", leader_key,
                         "): only the leader writes jobs (put of /jr3/fence/job/job-1)"));
  auto mine = etcd_->Put(leader_key, "someone");
  ASSERT_TRUE(mine.ok());
  (*backend)->SetLeaderFence(*mine);
  ASSERT_TRUE((*backend)->PutJob(job).ok());
  // Another replica's term: the key was created again.
  ASSERT_TRUE(etcd_->Delete(leader_key).ok());
  auto theirs = etcd_->Put(leader_key, "someone else");
  ASSERT_TRUE(theirs.ok());
  job.set_state(jv1::JOB_STATE_CANCELLED);
  s = (*backend)->PutJob(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            absl::StrCat("fenced: the leader key ", leader_key, " was created at revision ",
                         *theirs, ", this replica's term began at revision ", *mine,
                         ": it is no longer the leader (put of /jr3/fence/job/job-1)"));
  EXPECT_EQ((*backend)->DeleteJob("job-1").code(), absl::StatusCode::kFailedPrecondition);
  auto jobs = (*backend)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state(), jv1::JOB_STATE_QUEUED);
  ASSERT_TRUE(etcd_->Delete(leader_key).ok());

  // A leader whose job write is fenced steps down and sends nothing it decided.
  auto r1 = StartReplica(*cluster_, "/jr4/", "r1");
  ASSERT_TRUE(r1);
  ASSERT_EQ(WaitForOneLeader({r1.get()}, absl::Seconds(10)), r1.get());
  Node a(r1->address, "a");
  jv1::ControlMessage m;
  ASSERT_TRUE(a.Read(&m));
  ASSERT_TRUE(m.has_registered());
  auto key = etcd_->Get(etcd::LeaderKeyFor("/jr4/runs/"));
  ASSERT_TRUE(key.ok());
  r1->jobs_backend->SetLeaderFence(key->create_revision - 1);
  grpc::Status st = Submit(r1->address, nullptr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(),
            absl::StrCat("replica r1 lost its leadership: fenced: the leader key ",
                         etcd::LeaderKeyFor("/jr4/runs/"), " was created at revision ",
                         key->create_revision, ", this replica's term began at revision ",
                         key->create_revision - 1,
                         ": it is no longer the leader (put of /jr4/jobs/job/job-1)"));
  std::vector<jv1::ControlMessage::KindCase> kinds;
  st = a.End(&kinds);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StartsWith(st.error_message(), "replica r1 lost its leadership: fenced: "))
      << st.error_message();
  EXPECT_TRUE(kinds.empty()) << "a fenced leader sent " << kinds.size() << " message(s)";
  auto stored = r1->jobs_backend->LoadJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->empty());
}

}  // namespace
}  // namespace dgt::rendezvous
