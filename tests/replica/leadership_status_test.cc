#include "replica/leadership_status.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace dgt::replica {
namespace {

TEST(LeadershipStatusTest, StandbyStatusNamesTheLeaderInTextAndDetail) {
  const grpc::Status st = StandbyStatus("r2", "10.0.0.1:29400");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(),
            "dgt-rendezvous replica r2 is a standby; the leader is 10.0.0.1:29400");
  const std::optional<v1::NotLeader> answer = StandbyAnswer(st);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->replica_id(), "r2");
  EXPECT_EQ(answer->leader_address(), "10.0.0.1:29400");
}

TEST(LeadershipStatusTest, StandbyStatusWithoutALeader) {
  const grpc::Status st = StandbyStatus("r1", "");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(), "dgt-rendezvous replica r1 is a standby; no leader now");
  const std::optional<v1::NotLeader> answer = StandbyAnswer(st);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->replica_id(), "r1");
  EXPECT_EQ(answer->leader_address(), "");
}

TEST(LeadershipStatusTest, DetailsAreAGoogleRpcStatusWithOneAny) {
  const grpc::Status st = StandbyStatus("r2", "h:1");
  v1::StatusDetails details;
  ASSERT_TRUE(details.ParseFromString(st.error_details()));
  EXPECT_EQ(details.code(), 14);  // UNAVAILABLE.
  EXPECT_EQ(details.message(), st.error_message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/dgt.replica.v1.NotLeader");
}

TEST(LeadershipStatusTest, OtherStatusesAreNoStandbyAnswer) {
  EXPECT_FALSE(StandbyAnswer(grpc::Status::OK).has_value());
  // The text alone is not the signal.
  EXPECT_FALSE(StandbyAnswer(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "dgt-rendezvous replica r2 is a standby; no leader now"))
                   .has_value());
  // Another code with the detail: not a standby's answer.
  const grpc::Status standby = StandbyStatus("r2", "h:1");
  EXPECT_FALSE(StandbyAnswer(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                          standby.error_message(), standby.error_details()))
                   .has_value());
  // Details that do not parse, or hold another message.
  EXPECT_FALSE(
      StandbyAnswer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x", "\xff\xff")).has_value());
  v1::StatusDetails other;
  other.set_code(14);
  other.add_details()->PackFrom(v1::StatusDetails());
  EXPECT_FALSE(
      StandbyAnswer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x", other.SerializeAsString()))
          .has_value());
}

}  // namespace
}  // namespace dgt::replica
