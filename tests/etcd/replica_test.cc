// Several rendezvous replicas on one etcd prefix (docs/ETCD.md, "Replicas"). Each is an
// in-process server layer (server::Server, as dgt-rendezvous runs it) on an EtcdRunStateBackend
// with an etcd::LeaderElection, against a real three-member etcd cluster on loopback
// (EtcdCluster). Agents are raw Session streams. Checks:
// - one leader, and a standby that refuses (NotLeader).
// - the leader's lease revoked -> the standby takes over within the lease TTL + 1 s, and the
//   agents' rejoins keep their assignments.
// - a deposed leader's write is fenced, and no rank is handed out twice.
// - etcd's leader paused (SIGSTOP) -> the leading replica keeps leading, the agents see nothing.
// - every etcd member stopped -> the leader steps down with UNAVAILABLE naming etcd, and leads
//   again with the run intact once etcd is back.
// Skipped without an etcd binary, except under
// CI=true, where that fails.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "etcd/client.h"
#include "etcd/leader_election.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/etcd_run_state_backend.h"
#include "rendezvous/service.h"
#include "replica/leadership_status.h"
#include "server/server.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/etcd/replica_harness.h"

namespace dgt::rendezvous {
namespace {

using etcd::testing::EtcdCluster;

constexpr absl::Duration kFormTimeout = absl::Seconds(20);
using testing::ClientFor;
using testing::kLeaseTtlS;
using testing::Replica;
using testing::SkipWithoutEtcd;

std::unique_ptr<Replica> StartReplica(const EtcdCluster& cluster, const std::string& prefix,
                                      const std::string& id) {
  server::ServerOptions options;
  options.rendezvous.rounds.rejoin_timeout = absl::Seconds(30);
  return testing::StartReplica(cluster, std::move(options), prefix, id);
}

// Two replicas leading at once fails the test.
Replica* WaitForOneLeader(const std::vector<Replica*>& replicas, absl::Duration timeout) {
  return testing::WaitForOneLeader(replicas, timeout, /*two_leaders_fail=*/true);
}

// An agent's Session stream to one replica.
class Agent {
 public:
  Agent(const std::string& address, std::string node_id)
      : node_id_(std::move(node_id)),
        stub_(v1::Rendezvous::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stream_ = stub_->Session(&ctx_);
  }
  ~Agent() {
    if (!finished_) {
      ctx_.TryCancel();
      (void)stream_->Finish();
    }
  }

  bool Join(const std::string& run_id, int nodes, const v1::Assignment* rejoin = nullptr) {
    v1::AgentMessage m;
    v1::JoinRequest* j = m.mutable_join();
    j->set_run_id(run_id);
    j->set_node_id(node_id_);
    j->set_min_nodes(nodes);
    j->set_max_nodes(nodes);
    j->set_nproc_per_node(2);
    j->set_address("127.0.0.1");
    j->set_store_port(node_id_ == "n1" ? 31001 : 31002);
    j->set_last_call_timeout_s(30);
    if (rejoin != nullptr) *j->mutable_rejoin() = *rejoin;
    return stream_->Write(m);
  }
  bool ReportSuccess(int64_t round) {
    v1::AgentMessage m;
    m.mutable_report()->set_round(round);
    m.mutable_report()->set_succeeded(true);
    return stream_->Write(m);
  }
  // The next message; false when the stream ended (then status() says how).
  bool Read(v1::ServiceMessage* out) {
    if (finished_) return false;
    if (stream_->Read(out)) return true;
    status_ = stream_->Finish();
    finished_ = true;
    return false;
  }
  // Reads until a message of `kind` (ServiceMessage::kAssignment, ...); false at the end.
  bool ReadUntil(v1::ServiceMessage::KindCase kind, v1::ServiceMessage* out) {
    while (Read(out)) {
      if (out->kind_case() == kind) return true;
    }
    return false;
  }
  // Reads to the end of the stream and returns its status.
  grpc::Status End() {
    v1::ServiceMessage ignored;
    while (Read(&ignored)) {
    }
    return status_;
  }

 private:
  std::string node_id_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServiceMessage>> stream_;
  bool finished_ = false;
  grpc::Status status_;
};

// Both agents join `run_id` (2 nodes) at `r` and get their assignments, by node id.
std::map<std::string, v1::Assignment> RunTwoNodes(Replica* r, const std::string& run_id,
                                                  std::unique_ptr<Agent>* a1,
                                                  std::unique_ptr<Agent>* a2) {
  std::map<std::string, v1::Assignment> held;
  *a1 = std::make_unique<Agent>(r->address, "n1");
  *a2 = std::make_unique<Agent>(r->address, "n2");
  EXPECT_TRUE((*a1)->Join(run_id, 2));
  EXPECT_TRUE((*a2)->Join(run_id, 2));
  v1::ServiceMessage m;
  if ((*a1)->ReadUntil(v1::ServiceMessage::kAssignment, &m)) held["n1"] = m.assignment();
  if ((*a2)->ReadUntil(v1::ServiceMessage::kAssignment, &m)) held["n2"] = m.assignment();
  return held;
}

// Rejoins both agents at `r` with their assignments; they must be acknowledged unchanged; then
// both report success and the run ends with success.
void RejoinAndFinish(Replica* r, const std::string& run_id,
                     std::map<std::string, v1::Assignment>& held) {
  Agent b1(r->address, "n1");
  Agent b2(r->address, "n2");
  ASSERT_TRUE(b1.Join(run_id, 2, &held["n1"]));
  ASSERT_TRUE(b2.Join(run_id, 2, &held["n2"]));
  v1::ServiceMessage m;
  ASSERT_TRUE(b1.ReadUntil(v1::ServiceMessage::kAssignment, &m)) << b1.End().error_message();
  EXPECT_EQ(m.assignment().reason(), "rejoined");
  EXPECT_EQ(m.assignment().node_rank(), held["n1"].node_rank());
  EXPECT_EQ(m.assignment().round(), held["n1"].round());
  EXPECT_EQ(m.assignment().master_port(), held["n1"].master_port());
  EXPECT_EQ(m.assignment().world_size(), 4);
  ASSERT_TRUE(b2.ReadUntil(v1::ServiceMessage::kAssignment, &m)) << b2.End().error_message();
  EXPECT_EQ(m.assignment().node_rank(), held["n2"].node_rank());
  EXPECT_EQ(m.assignment().round(), held["n2"].round());
  ASSERT_TRUE(b1.ReportSuccess(held["n1"].round()));
  ASSERT_TRUE(b2.ReportSuccess(held["n2"].round()));
  ASSERT_TRUE(b1.ReadUntil(v1::ServiceMessage::kFinished, &m));
  EXPECT_TRUE(m.finished().succeeded());
  EXPECT_EQ(m.finished().message(), "all 2 nodes succeeded");
}

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SkipWithoutEtcd();
    if (IsSkipped() || HasFailure()) return;
    ASSERT_TRUE(cluster_.Start(3, kFormTimeout).ok());
    auto client = etcd::Client::Create(ClientFor(cluster_));
    ASSERT_TRUE(client.ok());
    etcd_ = *std::move(client);
  }
  EtcdCluster cluster_;
  std::unique_ptr<etcd::Client> etcd_;
};

TEST_F(ReplicaTest, OneLeaderAndTheStandbyRefusesWithItsAddress) {
  const std::string prefix = "/ha1/runs/";
  auto r1 = StartReplica(cluster_, prefix, "r1");
  auto r2 = StartReplica(cluster_, prefix, "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  Replica* standby = leader == r1.get() ? r2.get() : r1.get();
  // The standby learns who leads from the key (its first campaign lost to it).
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(standby->leader());

  auto value = etcd_->Get("/ha1/runs.leader");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(etcd::DecodeLeaderInfo(value->value).replica, leader->id);
  EXPECT_EQ(etcd::DecodeLeaderInfo(value->value).address, leader->address);

  Agent refused(standby->address, "n1");
  refused.Join("job", 2);
  grpc::Status st = refused.End();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(), absl::StrCat("dgt-rendezvous replica ", standby->id,
                                             " is a standby; the leader is ", leader->address));
  {
    const std::optional<dgt::replica::v1::NotLeader> answer = dgt::replica::StandbyAnswer(st);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->replica_id(), standby->id);
    EXPECT_EQ(answer->leader_address(), leader->address);
  }
  EXPECT_TRUE(absl::StrContains(leader->server->rendezvous()->RenderMetrics(),
                                "\ndgt_rendezvous_leader 1\n"));
  EXPECT_TRUE(absl::StrContains(standby->server->rendezvous()->RenderMetrics(),
                                "\ndgt_rendezvous_leader 0\n"));

  // The leader serves; the standby's GetStatus shows the run from its view (the watch).
  Agent joined(leader->address, "n1");
  ASSERT_TRUE(joined.Join("job", 2));
  v1::ServiceMessage m;
  ASSERT_TRUE(joined.ReadUntil(v1::ServiceMessage::kProgress, &m));
  EXPECT_EQ(m.progress().joined_nodes(), 1);
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel(standby->address, grpc::InsecureChannelCredentials()));
  int nodes_seen = 0;
  for (int i = 0; i < 100 && nodes_seen == 0; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetStatusRequest request;
    v1::GetStatusResponse response;
    ASSERT_TRUE(stub->GetStatus(&ctx, request, &response).ok());
    if (response.runs_size() == 1) nodes_seen = response.runs(0).nodes_size();
    if (nodes_seen == 0) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(nodes_seen, 1);
}

TEST_F(ReplicaTest, StandbyTakesOverWithinTheLeaseTtlAndRejoinsKeepTheirAssignments) {
  const std::string prefix = "/ha2/runs/";
  auto r1 = StartReplica(cluster_, prefix, "r1");
  auto r2 = StartReplica(cluster_, prefix, "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  Replica* standby = leader == r1.get() ? r2.get() : r1.get();
  std::unique_ptr<Agent> a1, a2;
  auto held = RunTwoNodes(leader, "job", &a1, &a2);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held["n1"].node_rank(), 0);
  EXPECT_EQ(held["n2"].node_rank(), 1);

  // The leader's lease ends (as when it dies or is cut off from etcd: etcd deletes the key).
  auto key = etcd_->Get("/ha2/runs.leader");
  ASSERT_TRUE(key.ok());
  const absl::Time revoked = absl::Now();
  ASSERT_TRUE(etcd_->LeaseRevoke(key->lease).ok());
  const absl::Time deadline = revoked + absl::Seconds(kLeaseTtlS + 1);
  // The next term's leader: the standby, or the old leader itself when it claims the key again
  // first (it campaigns too once it has stepped down; docs/ETCD.md, "Step-down"). Either takes
  // the runs over as a new leader, which is what this test is about.
  Replica* next = nullptr;
  while (next == nullptr && absl::Now() < deadline) {
    auto now_key = etcd_->Get("/ha2/runs.leader");
    if (now_key.ok() && now_key->create_revision != key->create_revision) {
      const std::string id = etcd::DecodeLeaderInfo(now_key->value).replica;
      for (Replica* r : {r1.get(), r2.get()}) {
        if (r->id == id && r->leader()) next = r;
      }
    }
    if (next == nullptr) absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Duration takeover = absl::Now() - revoked;
  ASSERT_NE(next, nullptr) << "no takeover within " << kLeaseTtlS + 1 << " s";
  std::cerr << "takeover by " << next->id
            << " after the lease's revocation: " << absl::FormatDuration(takeover) << "\n";
  // The old leader ends its agents' streams (its keepalive learns of the loss within ttl/3).
  for (Agent* a : {a1.get(), a2.get()}) {
    grpc::Status st = a->End();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StartsWith(st.error_message(),
                                 absl::StrCat("replica ", leader->id, " lost its leadership: ")))
        << st.error_message();
  }
  if (next == standby) {
    EXPECT_FALSE(leader->leader());
  }
  RejoinAndFinish(next, "job", held);
}

TEST_F(ReplicaTest, ADeposedLeadersWriteIsFencedAndNoRankIsHandedOutTwice) {
  const std::string prefix = "/ha3/runs/";
  const std::string leader_key = "/ha3/runs.leader";
  // The backend alone: its fence refuses a write once the key is another's.
  {
    EtcdRunStateBackend::Options b;
    b.client = ClientFor(cluster_);
    b.prefix = "/ha3/fence/";
    b.leader_key = "/ha3/fence.leader";
    auto backend = EtcdRunStateBackend::Open(b);
    ASSERT_TRUE(backend.ok());
    auto unfenced = (*backend)->Create("job");
    ASSERT_TRUE(unfenced.ok());
    EXPECT_EQ((*backend)->Commit("job").status(),
              absl::FailedPreconditionError(
                  "etcd backend: commit of run 'job' (key /ha3/fence/job): fenced: this replica "
                  "holds no leader key (/ha3/fence.leader): only the leader writes runs"));
    auto mine = etcd_->Put("/ha3/fence.leader", "r1");
    ASSERT_TRUE(mine.ok());
    (*backend)->SetLeaderFence(*mine);
    ASSERT_TRUE((*backend)->Create("job").ok());
    auto written = (*backend)->Commit("job");
    ASSERT_TRUE(written.ok()) << written.status();
    // Another replica's term: the key deleted and created again.
    ASSERT_TRUE(etcd_->Delete("/ha3/fence.leader").ok());
    auto theirs = etcd_->Put("/ha3/fence.leader", "r2");
    ASSERT_TRUE(theirs.ok());
    RunRecord* run = (*backend)->Mutable("job");
    ASSERT_NE(run, nullptr);
    run->round = 7;
    EXPECT_EQ((*backend)->Commit("job").status(),
              absl::FailedPreconditionError(absl::StrCat(
                  "etcd backend: commit of run 'job' (key /ha3/fence/job): fenced: the leader "
                  "key /ha3/fence.leader was created at revision ",
                  *theirs, ", this replica's term began at revision ", *mine,
                  ": it is no longer the leader")));
    auto stored = etcd_->Get("/ha3/fence/job");
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->mod_revision, *written);  // Untouched.
    EXPECT_FALSE((*backend)->Delete("job").ok());
    EXPECT_TRUE(etcd_->Get("/ha3/fence/job").ok());
  }

  // Two replicas. The leader's fence is set to an earlier term, as when it was deposed and has
  // not noticed yet (its keepalive and watch lag): the join that closes the round there fails
  // its commit, nothing is sent, and the replica steps down.
  auto r1 = StartReplica(cluster_, prefix, "r1");
  auto r2 = StartReplica(cluster_, prefix, "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  std::vector<std::pair<std::string, v1::Assignment>> handed_out;
  Agent first(leader->address, "n1");
  ASSERT_TRUE(first.Join("fenced", 2));
  v1::ServiceMessage m;
  ASSERT_TRUE(first.ReadUntil(v1::ServiceMessage::kProgress, &m));
  auto key = etcd_->Get(leader_key);
  ASSERT_TRUE(key.ok());
  leader->backend->SetLeaderFence(key->create_revision - 1);
  Agent second(leader->address, "n2");
  ASSERT_TRUE(second.Join("fenced", 2));
  const std::string lost = absl::StrCat(
      "replica ", leader->id,
      " lost its leadership: etcd backend: commit of run 'fenced' (key /ha3/runs/fenced): fenced: "
      "the leader key /ha3/runs.leader was created at revision ",
      key->create_revision, ", this replica's term began at revision ", key->create_revision - 1,
      ": it is no longer the leader");
  for (Agent* a : {&first, &second}) {
    while (a->Read(&m)) {
      if (m.has_assignment()) handed_out.emplace_back("deposed", m.assignment());
    }
    EXPECT_EQ(a->End().error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(a->End().error_message(), lost);
  }
  // The deposed leader sent no assignment, and the stored run has no round.
  EXPECT_TRUE(handed_out.empty());
  auto record = EtcdRunStateBackend::ReadRun(*etcd_, "/ha3/runs/", "fenced");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->round, -1);
  EXPECT_EQ(record->state, RunState::kGathering);
  EXPECT_EQ(record->nodes.size(), 1u);

  // It resigned: one replica leads (either: the resigned one campaigns again) and hands the
  // ranks out, once.
  Replica* next = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(kLeaseTtlS + 3));
  ASSERT_NE(next, nullptr);
  auto now_key = etcd_->Get(leader_key);
  ASSERT_TRUE(now_key.ok());
  EXPECT_GT(now_key->create_revision, key->create_revision);
  Agent c1(next->address, "n1");
  Agent c2(next->address, "n2");
  ASSERT_TRUE(c1.Join("fenced", 2));
  ASSERT_TRUE(c2.Join("fenced", 2));
  ASSERT_TRUE(c1.ReadUntil(v1::ServiceMessage::kAssignment, &m)) << c1.End().error_message();
  handed_out.emplace_back("n1", m.assignment());
  ASSERT_TRUE(c2.ReadUntil(v1::ServiceMessage::kAssignment, &m)) << c2.End().error_message();
  handed_out.emplace_back("n2", m.assignment());
  ASSERT_EQ(handed_out.size(), 2u);
  EXPECT_EQ(handed_out[0].second.node_rank(), 0);
  EXPECT_EQ(handed_out[1].second.node_rank(), 1);
  EXPECT_EQ(handed_out[0].second.round(), 0);
  EXPECT_EQ(handed_out[1].second.round(), 0);
  EXPECT_EQ(handed_out[0].second.master_port(), 31001);
  // What etcd holds agrees: round 0, each rank once.
  record = EtcdRunStateBackend::ReadRun(*etcd_, "/ha3/runs/", "fenced");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->round, 0);
  EXPECT_EQ(record->nodes.at("n1").node_rank, 0);
  EXPECT_EQ(record->nodes.at("n2").node_rank, 1);
}

// etcd's leader paused (SIGSTOP: it holds every request and answers none) under a running round:
// etcd elects another leader and the leading replica keeps its lease through it. The agents see
// nothing: their sessions stay open, the leader stays the same, and the run finishes.
TEST_F(ReplicaTest, APausedEtcdLeaderDoesNotMakeTheLeadingReplicaStepDown) {
  const std::string prefix = "/ha5/runs/";
  auto r1 = StartReplica(cluster_, prefix, "r1");
  auto r2 = StartReplica(cluster_, prefix, "r2");
  ASSERT_TRUE(r1 && r2);
  Replica* leader = WaitForOneLeader({r1.get(), r2.get()}, absl::Seconds(10));
  ASSERT_NE(leader, nullptr);
  Replica* standby = leader == r1.get() ? r2.get() : r1.get();
  std::unique_ptr<Agent> a1, a2;
  auto held = RunTwoNodes(leader, "job", &a1, &a2);
  ASSERT_EQ(held.size(), 2u);

  auto etcd_leader = cluster_.Leader(absl::Seconds(10));
  ASSERT_TRUE(etcd_leader.ok()) << etcd_leader.status();
  cluster_.Pause(*etcd_leader);
  // Three lease TTLs: etcd elects another leader within 1 s (election timeout 500 ms).
  const absl::Time paused = absl::Now();
  const absl::Time until = paused + absl::Seconds(3 * kLeaseTtlS);
  int samples = 0;
  while (absl::Now() < until) {
    ASSERT_TRUE(leader->leader()) << "replica " << leader->id << " stepped down after "
                                  << absl::FormatDuration(absl::Now() - paused);
    ASSERT_FALSE(standby->leader()) << "replica " << standby->id << " leads too";
    ++samples;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GT(samples, 20);
  // The same sessions, still open: the round ends as if nothing happened.
  ASSERT_TRUE(a1->ReportSuccess(held["n1"].round()));
  ASSERT_TRUE(a2->ReportSuccess(held["n2"].round()));
  v1::ServiceMessage m;
  ASSERT_TRUE(a1->ReadUntil(v1::ServiceMessage::kFinished, &m)) << a1->End().error_message();
  EXPECT_TRUE(m.finished().succeeded());
  EXPECT_EQ(m.finished().message(), "all 2 nodes succeeded");
  ASSERT_TRUE(a2->ReadUntil(v1::ServiceMessage::kFinished, &m)) << a2->End().error_message();
  EXPECT_TRUE(m.finished().succeeded());
  EXPECT_TRUE(leader->leader());
  cluster_.Resume(*etcd_leader);
}

TEST_F(ReplicaTest, EveryEtcdMemberStoppedStepsDownAndLeadsAgainWithTheRunIntact) {
  const std::string prefix = "/ha4/runs/";
  auto r1 = StartReplica(cluster_, prefix, "r1");
  ASSERT_TRUE(r1);
  ASSERT_NE(WaitForOneLeader({r1.get()}, absl::Seconds(10)), nullptr);
  std::unique_ptr<Agent> a1, a2;
  auto held = RunTwoNodes(r1.get(), "job", &a1, &a2);
  ASSERT_EQ(held.size(), 2u);

  const absl::Time stopped = absl::Now();
  for (int i = 0; i < 3; ++i) cluster_.Kill(i);
  // The keeper misses its renewals for one TTL: the replica steps down.
  for (Agent* a : {a1.get(), a2.get()}) {
    grpc::Status st = a->End();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(absl::StartsWith(st.error_message(),
                                 "replica r1 lost its leadership: its etcd lease of "
                                 "/ha4/runs.leader ended: "))
        << st.error_message();
  }
  const absl::Duration noticed = absl::Now() - stopped;
  std::cerr << "stepped down " << absl::FormatDuration(noticed) << " after etcd stopped\n";
  EXPECT_LT(noticed, absl::Seconds(kLeaseTtlS + 3));
  EXPECT_FALSE(r1->leader());
  Agent refused(r1->address, "n1");
  refused.Join("job", 2);
  grpc::Status st = refused.End();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StartsWith(st.error_message(), "dgt-rendezvous replica r1 is a standby; "))
      << st.error_message();
  {
    const std::optional<dgt::replica::v1::NotLeader> answer = dgt::replica::StandbyAnswer(st);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->replica_id(), "r1");
  }

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster_.Restart(i).ok());
  ASSERT_TRUE(cluster_.WaitHealthy(kFormTimeout).ok());
  const absl::Time back = absl::Now();
  ASSERT_NE(WaitForOneLeader({r1.get()}, absl::Seconds(20)), nullptr);
  std::cerr << "leads again " << absl::FormatDuration(absl::Now() - back)
            << " after etcd was healthy\n";
  RejoinAndFinish(r1.get(), "job", held);
}

}  // namespace
}  // namespace dgt::rendezvous
