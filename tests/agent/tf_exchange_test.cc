// DecideTfStep (agent/coord/tf_exchange.h): what one step of the TensorFlow address exchange
// means, with the exact exit statuses and messages.
#include "agent/coord/tf_exchange.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

using Kind = TfStepDecision::Kind;

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

TfExchangeRound Round(int node_rank = 1) {
  TfExchangeRound r;
  r.node_rank = node_rank;
  r.master_addr = "10.0.0.1";
  r.master_port = 29500;
  r.deadline = kStart + absl::Seconds(600);
  r.join_timeout_s = 600;
  r.join_timeout_flag = "--join-timeout";
  return r;
}

TfExchangeStep Missing(std::vector<int> missing) {
  TfExchangeStep step;
  step.missing = std::move(missing);
  return step;
}

TEST(DecideTfStepTest, EveryAddressThereStarts) {
  TfExchangeStep step;
  step.addresses = {"10.0.0.1:41001", "10.0.0.2:41001"};
  const TfStepDecision d = DecideTfStep(step, kStart, Round());
  EXPECT_EQ(d.kind, Kind::kStart);
}

TEST(DecideTfStepTest, MissingNodesRetryUntilTheDeadline) {
  EXPECT_EQ(DecideTfStep(Missing({2}), kStart + absl::Seconds(599), Round()).kind, Kind::kRetry);
  EXPECT_EQ(DecideTfStep(absl::UnavailableError("down"), kStart, Round()).kind, Kind::kRetry);
}

TEST(DecideTfStepTest, MissingNodesAtTheDeadlineEndWith75) {
  const TfStepDecision d = DecideTfStep(Missing({2, 3}), kStart + absl::Seconds(600), Round());
  EXPECT_EQ(d.kind, Kind::kFinish);
  EXPECT_EQ(d.exit_status, 75);
  EXPECT_EQ(d.message,
            "TF_CONFIG: node rank(s) 2, 3 did not publish their TensorFlow addresses in the "
            "round's store at 10.0.0.1:29500 within 600 s (--join-timeout): is every node started "
            "with --distribution tensorflow?");
}

TEST(DecideTfStepTest, AStoreErrorAtTheDeadlineEndsWith75) {
  const TfStepDecision d = DecideTfStep(absl::UnavailableError("connection refused"),
                                        kStart + absl::Seconds(601), Round());
  EXPECT_EQ(d.kind, Kind::kFinish);
  EXPECT_EQ(d.exit_status, 75);
  EXPECT_EQ(d.message,
            "TF_CONFIG: cannot exchange the TensorFlow addresses within 600 s (--join-timeout): "
            "connection refused");
}

TEST(DecideTfStepTest, RolesThatDifferEndWith77LaterOnNodeRankZero) {
  const absl::Status differ = absl::FailedPreconditionError("TF_CONFIG: roles differ");
  const TfStepDecision other = DecideTfStep(differ, kStart, Round(/*node_rank=*/1));
  EXPECT_EQ(other.kind, Kind::kFinish);
  EXPECT_EQ(other.exit_status, 77);
  EXPECT_EQ(other.message, "TF_CONFIG: roles differ");
  const TfStepDecision rank0 = DecideTfStep(differ, kStart, Round(/*node_rank=*/0));
  EXPECT_EQ(rank0.kind, Kind::kFinishLater);
  EXPECT_EQ(rank0.exit_status, 77);
  EXPECT_EQ(rank0.message, "TF_CONFIG: roles differ");
}

TEST(DecideTfStepTest, ABadValueEndsWith1) {
  const TfStepDecision d =
      DecideTfStep(absl::InvalidArgumentError("node rank 1 published 'x'"), kStart, Round());
  EXPECT_EQ(d.kind, Kind::kFinish);
  EXPECT_EQ(d.exit_status, 1);
  EXPECT_EQ(d.message, "cannot build TF_CONFIG: node rank 1 published 'x'");
}

}  // namespace
}  // namespace dgt::agent
