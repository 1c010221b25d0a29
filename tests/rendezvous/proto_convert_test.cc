// Domain types <-> v1 protos (rendezvous/proto_convert.h): every field of every message, both
// ways, and wire messages that survive a round trip through the domain types unchanged (what
// older agents send is what the service reads, and what it writes is what they read).
#include "rendezvous/proto_convert.h"

#include <cmath>
#include <limits>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dgt::rendezvous {
namespace {

using google::protobuf::util::MessageDifferencer;

const absl::Time kFailedAt = absl::UnixEpoch() + absl::Seconds(1'764'590'400.125);

Assignment SampleAssignment() {
  Assignment a;
  a.run_id = "job";
  a.round = 7;
  a.node_rank = 2;
  a.node_count = 3;
  a.world_size = 12;
  a.first_global_rank = 8;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.restart_count = 1;
  a.reason = "scale-up";
  a.host_node_id = "node-a";
  a.in_place = true;
  return a;
}

WorkerFailure SampleFailure() { return WorkerFailure{5, 1, 3, 9, "node-b", kFailedAt}; }

JoinRequest SampleJoin() {
  JoinRequest j;
  j.run_id = "job";
  j.node_id = "node-b";
  j.min_nodes = 2;
  j.max_nodes = 4;
  j.nproc_per_node = 8;
  j.address = "10.0.0.2";
  j.store_port = 29501;
  j.last_call_timeout = absl::Milliseconds(1500);
  j.max_restarts = 3;
  j.join_timeout = absl::Seconds(600);
  j.spare_nodes = 2;
  j.in_place_spares = true;
  j.rejoin = SampleAssignment();
  return j;
}

TEST(ProtoConvertTest, AssignmentEveryField) {
  v1::Assignment p = ToProto(SampleAssignment());
  EXPECT_EQ(p.run_id(), "job");
  EXPECT_EQ(p.round(), 7);
  EXPECT_EQ(p.node_rank(), 2);
  EXPECT_EQ(p.node_count(), 3);
  EXPECT_EQ(p.world_size(), 12);
  EXPECT_EQ(p.first_global_rank(), 8);
  EXPECT_EQ(p.master_addr(), "10.0.0.1");
  EXPECT_EQ(p.master_port(), 29500);
  EXPECT_EQ(p.restart_count(), 1);
  EXPECT_EQ(p.reason(), "scale-up");
  EXPECT_EQ(p.host_node_id(), "node-a");
  EXPECT_TRUE(p.in_place());
  EXPECT_EQ(FromProto(p), SampleAssignment());
}

TEST(ProtoConvertTest, JoinRequestEveryFieldWithAndWithoutRejoin) {
  v1::JoinRequest p = ToProto(SampleJoin());
  EXPECT_EQ(p.run_id(), "job");
  EXPECT_EQ(p.node_id(), "node-b");
  EXPECT_EQ(p.min_nodes(), 2);
  EXPECT_EQ(p.max_nodes(), 4);
  EXPECT_EQ(p.nproc_per_node(), 8);
  EXPECT_EQ(p.address(), "10.0.0.2");
  EXPECT_EQ(p.store_port(), 29501);
  EXPECT_EQ(p.last_call_timeout_s(), 1.5);
  EXPECT_EQ(p.max_restarts(), 3);
  EXPECT_EQ(p.join_timeout_s(), 600.0);
  EXPECT_EQ(p.spare_nodes(), 2);
  EXPECT_TRUE(p.in_place_spares());
  ASSERT_TRUE(p.has_rejoin());
  EXPECT_TRUE(MessageDifferencer::Equals(p.rejoin(), ToProto(SampleAssignment())));
  EXPECT_EQ(FromProto(p), SampleJoin());

  JoinRequest fresh = SampleJoin();
  fresh.rejoin.reset();
  v1::JoinRequest q = ToProto(fresh);
  EXPECT_FALSE(q.has_rejoin());
  EXPECT_EQ(FromProto(q).rejoin, std::nullopt);
  EXPECT_EQ(FromProto(q), fresh);
}

TEST(ProtoConvertTest, TimeoutsLeftAtZeroOrNaNReadAsZeroAndNegativesStayNegative) {
  v1::JoinRequest p;
  EXPECT_EQ(FromProto(p).last_call_timeout, absl::ZeroDuration());
  EXPECT_EQ(FromProto(p).join_timeout, absl::ZeroDuration());
  p.set_last_call_timeout_s(std::numeric_limits<double>::quiet_NaN());
  p.set_join_timeout_s(-1.0);
  EXPECT_EQ(FromProto(p).last_call_timeout, absl::ZeroDuration());
  EXPECT_EQ(FromProto(p).join_timeout, absl::Seconds(-1));
}

TEST(ProtoConvertTest, WorkerFailureEveryFieldAndItsTimeToTheBit) {
  v1::WorkerFailure p = ToProto(SampleFailure());
  EXPECT_EQ(p.rank(), 5);
  EXPECT_EQ(p.local_rank(), 1);
  EXPECT_EQ(p.exit_code(), 3);
  EXPECT_EQ(p.signal(), 9);
  EXPECT_EQ(p.node_id(), "node-b");
  EXPECT_EQ(p.time_unix_s(), 1'764'590'400.125);
  EXPECT_EQ(FromProto(p), SampleFailure());
  // A time as an agent writes it (time.time(): microseconds, not a round binary fraction)
  // comes back as the same double.
  v1::WorkerFailure agent;
  agent.set_time_unix_s(1'764'590'400.123456);
  EXPECT_EQ(ToProto(FromProto(agent)).time_unix_s(), 1'764'590'400.123456);
}

TEST(ProtoConvertTest, NodeReportEveryFieldWithAndWithoutFailure) {
  NodeReport r{4, false, SampleFailure(), "rank 5 (local rank 1) exited with code 3"};
  v1::NodeReport p = ToProto(r);
  EXPECT_EQ(p.round(), 4);
  EXPECT_FALSE(p.succeeded());
  ASSERT_TRUE(p.has_failure());
  EXPECT_EQ(p.failure().rank(), 5);
  EXPECT_EQ(p.message(), "rank 5 (local rank 1) exited with code 3");
  EXPECT_EQ(FromProto(p), r);
  NodeReport ok{4, true, std::nullopt, ""};
  EXPECT_FALSE(ToProto(ok).has_failure());
  EXPECT_TRUE(ToProto(ok).succeeded());
  EXPECT_EQ(FromProto(ToProto(ok)), ok);
}

TEST(ProtoConvertTest, SmallMessagesEveryField) {
  EXPECT_EQ(ToProto(StoreReady{30001}).store_port(), 30001);
  EXPECT_EQ(FromProto(ToProto(StoreReady{30001})), StoreReady{30001});

  v1::JoinProgress progress = ToProto(JoinProgress{3, 2, 5, true});
  EXPECT_TRUE(progress.spare());
  EXPECT_EQ(progress.joined_nodes(), 3);
  EXPECT_EQ(progress.min_nodes(), 2);
  EXPECT_EQ(progress.max_nodes(), 5);
  EXPECT_EQ(FromProto(progress), (JoinProgress{3, 2, 5, true}));

  v1::StopWorkers stop = ToProto(StopWorkers{6, "node n3 was lost"});
  EXPECT_EQ(stop.round(), 6);
  EXPECT_EQ(stop.reason(), "node n3 was lost");
  EXPECT_EQ(FromProto(stop), (StopWorkers{6, "node n3 was lost"}));
}

TEST(ProtoConvertTest, RunFinishedEveryFieldWithAndWithoutFailure) {
  RunFinished failed{false, "node n2 failed", SampleFailure()};
  v1::RunFinished p = ToProto(failed);
  EXPECT_FALSE(p.succeeded());
  EXPECT_EQ(p.message(), "node n2 failed");
  ASSERT_TRUE(p.has_failure());
  EXPECT_TRUE(MessageDifferencer::Equals(p.failure(), ToProto(SampleFailure())));
  EXPECT_EQ(FromProto(p), failed);
  RunFinished succeeded{true, "all 2 nodes succeeded", std::nullopt};
  EXPECT_FALSE(ToProto(succeeded).has_failure());
  EXPECT_FALSE(ToProto(succeeded).too_few_nodes());
  EXPECT_EQ(FromProto(ToProto(succeeded)), succeeded);
  RunFinished too_few{false, "run 'job' had only 1 of at least 2 nodes", std::nullopt, true};
  EXPECT_TRUE(ToProto(too_few).too_few_nodes());
  EXPECT_EQ(FromProto(ToProto(too_few)), too_few);
}

TEST(ProtoConvertTest, RefusalCarriesTheGoogleRpcCodeNumbers) {
  // The numbers agents of every version read (google.rpc.Code).
  const std::pair<absl::StatusCode, int> codes[] = {
      {absl::StatusCode::kInvalidArgument, 3},   {absl::StatusCode::kAlreadyExists, 6},
      {absl::StatusCode::kResourceExhausted, 8}, {absl::StatusCode::kFailedPrecondition, 9},
      {absl::StatusCode::kAborted, 10},          {absl::StatusCode::kUnavailable, 14},
      {absl::StatusCode::kUnauthenticated, 16},
  };
  for (const auto& [code, number] : codes) {
    Refusal refusal{absl::Status(code, "why")};
    v1::Error p = ToProto(refusal);
    EXPECT_EQ(p.code(), number);
    EXPECT_EQ(p.message(), "why");
    EXPECT_EQ(FromProto(p), refusal);
  }
  v1::Error unknown;
  unknown.set_code(99);
  unknown.set_message("from the future");
  EXPECT_EQ(FromProto(unknown).status.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(FromProto(unknown).status.message(), "from the future");
}

TEST(ProtoConvertTest, AgentMessageEveryKindAndEmpty) {
  for (const AgentMessage& m :
       {AgentMessage(SampleJoin()), AgentMessage(NodeReport{1, true, std::nullopt, ""}),
        AgentMessage(StoreReady{4242})}) {
    absl::StatusOr<AgentMessage> back = FromProto(ToProto(m));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(ToProto(AgentMessage(StoreReady{4242})).kind_case(), v1::AgentMessage::kStoreReady);
  absl::StatusOr<AgentMessage> empty = FromProto(v1::AgentMessage());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(), "empty AgentMessage");
}

TEST(ProtoConvertTest, ServiceMessageEveryKindAndEmpty) {
  const std::pair<ServiceMessage, v1::ServiceMessage::KindCase> messages[] = {
      {JoinProgress{1, 2, 3}, v1::ServiceMessage::kProgress},
      {SampleAssignment(), v1::ServiceMessage::kAssignment},
      {RunFinished{true, "done", std::nullopt}, v1::ServiceMessage::kFinished},
      {Refusal{absl::AbortedError("moved on")}, v1::ServiceMessage::kError},
      {StopWorkers{2, "lost"}, v1::ServiceMessage::kStop},
  };
  for (const auto& [m, kind] : messages) {
    v1::ServiceMessage p = ToProto(m);
    EXPECT_EQ(p.kind_case(), kind);
    absl::StatusOr<ServiceMessage> back = FromProto(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(FromProto(v1::ServiceMessage()).status().message(), "empty ServiceMessage");
}

TEST(ProtoConvertTest, WireMessagesSurviveTheDomainTypesUnchanged) {
  // What an agent (of this version or an older one) writes, read by the service and written
  // back, is byte for byte the same message.
  v1::AgentMessage join;
  *join.mutable_join() = ToProto(SampleJoin());
  join.mutable_join()->set_last_call_timeout_s(30);
  v1::AgentMessage report;
  report.mutable_report()->set_round(3);
  report.mutable_report()->set_message("rank 0 exited with code 1");
  report.mutable_report()->mutable_failure()->set_exit_code(1);
  report.mutable_report()->mutable_failure()->set_time_unix_s(1'764'590'400.987654);
  for (const v1::AgentMessage& m : {join, report}) {
    absl::StatusOr<AgentMessage> domain = FromProto(m);
    ASSERT_TRUE(domain.ok());
    EXPECT_TRUE(MessageDifferencer::Equals(ToProto(*domain), m)) << m.DebugString();
    EXPECT_EQ(ToProto(*domain).SerializeAsString(), m.SerializeAsString());
  }
  v1::ServiceMessage finished;
  finished.mutable_finished()->set_message("all 2 nodes succeeded");
  finished.mutable_finished()->set_succeeded(true);
  v1::ServiceMessage error;
  error.mutable_error()->set_code(9);
  error.mutable_error()->set_message("run 'job' is closed");
  for (const v1::ServiceMessage& m : {finished, error}) {
    absl::StatusOr<ServiceMessage> domain = FromProto(m);
    ASSERT_TRUE(domain.ok());
    EXPECT_EQ(ToProto(*domain).SerializeAsString(), m.SerializeAsString()) << m.DebugString();
  }
}

TEST(ProtoConvertTest, StatusEveryField) {
  RunStatus run;
  run.run_id = "job";
  run.state = RunState::kClosed;
  run.round = 2;
  run.restart_count = 1;
  run.min_nodes = 1;
  run.max_nodes = 3;
  run.world_size = 6;
  run.nodes.push_back(NodeStatus{"n1", "10.0.0.1", 0, 2, absl::FromUnixSeconds(1'000'031), true});
  run.nodes.push_back(NodeStatus{"n3", "10.0.0.3", -1, 2, absl::FromUnixSeconds(1'000'032), false});
  run.outcome = "succeeded: all 1 nodes succeeded";
  run.master_addr = "10.0.0.1";
  run.master_port = 29500;
  v1::GetStatusResponse response = ToProto(std::vector<RunStatus>{run});
  ASSERT_EQ(response.runs_size(), 1);
  const v1::RunStatus& p = response.runs(0);
  EXPECT_EQ(p.run_id(), "job");
  EXPECT_EQ(p.state(), "closed");
  EXPECT_EQ(p.round(), 2);
  EXPECT_EQ(p.restart_count(), 1);
  EXPECT_EQ(p.min_nodes(), 1);
  EXPECT_EQ(p.max_nodes(), 3);
  EXPECT_EQ(p.world_size(), 6);
  ASSERT_EQ(p.nodes_size(), 2);
  EXPECT_EQ(p.nodes(0).node_id(), "n1");
  EXPECT_EQ(p.nodes(0).address(), "10.0.0.1");
  EXPECT_EQ(p.nodes(0).node_rank(), 0);
  EXPECT_EQ(p.nodes(0).nproc_per_node(), 2);
  EXPECT_EQ(p.nodes(0).last_contact_unix_s(), 1'000'031.0);
  EXPECT_TRUE(p.nodes(0).succeeded());
  EXPECT_EQ(p.nodes(1).node_rank(), -1);
  EXPECT_EQ(p.outcome(), "succeeded: all 1 nodes succeeded");
  EXPECT_EQ(p.master_addr(), "10.0.0.1");
  EXPECT_EQ(p.master_port(), 29500);
  absl::StatusOr<RunStatus> back = FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, run);
  for (RunState state : {RunState::kGathering, RunState::kRunning, RunState::kClosed}) {
    run.state = state;
    EXPECT_EQ(FromProto(ToProto(run))->state, state);
  }
  v1::RunStatus odd = p;
  odd.set_state("paused");
  EXPECT_EQ(FromProto(odd).status().message(),
            "run 'job' has state 'paused'; expected gathering, running or closed");
}

}  // namespace
}  // namespace dgt::rendezvous
