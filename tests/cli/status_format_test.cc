// The table of `dgt status`: a node without a node rank is a spare while a round runs, and
// waiting before the first round.
#include <string>

#include "cli/status_command.h"
#include "gtest/gtest.h"

namespace dgt::cli {
namespace {

namespace v1 = ::dgt::rendezvous::v1;

v1::GetStatusResponse OneRun(const std::string& state) {
  v1::GetStatusResponse status;
  v1::RunStatus* run = status.add_runs();
  run->set_run_id("job");
  run->set_state(state);
  run->set_round(state == "running" ? 0 : -1);
  run->set_min_nodes(1);
  run->set_max_nodes(1);
  if (state == "running") {
    run->set_world_size(2);
    run->set_master_addr("10.0.0.1");
    run->set_master_port(29500);
    v1::NodeStatus* member = run->add_nodes();
    member->set_node_id("a");
    member->set_address("10.0.0.1");
    member->set_node_rank(0);
    member->set_nproc_per_node(2);
    member->set_last_contact_unix_s(99);
  }
  v1::NodeStatus* other = run->add_nodes();
  other->set_node_id("b");
  other->set_address("10.0.0.2");
  other->set_node_rank(-1);
  other->set_nproc_per_node(2);
  other->set_last_contact_unix_s(99.5);
  return status;
}

TEST(StatusFormatTest, NodeWithoutRankIsASpareWhileARoundRuns) {
  EXPECT_EQ(FormatStatus(OneRun("running"), 100),
            "run job: running, round 0, restarts 0, nodes 2 (min 1, max 1), world size 2, master "
            "10.0.0.1:29500\n"
            "  NODE RANK NODE ID                  ADDRESS                                  NPROC "
            "LAST CONTACT\n"
            "  0         a                        10.0.0.1                                     2 "
            "1.0 s ago\n"
            "  spare     b                        10.0.0.2                                     2 "
            "0.5 s ago\n");
}

TEST(StatusFormatTest, NodeWithoutRankIsWaitingBeforeTheFirstRound) {
  EXPECT_EQ(FormatStatus(OneRun("gathering"), 100),
            "run job: gathering, round -1, restarts 0, nodes 1 (min 1, max 1), world size 0\n"
            "  NODE RANK NODE ID                  ADDRESS                                  NPROC "
            "LAST CONTACT\n"
            "  waiting   b                        10.0.0.2                                     2 "
            "0.5 s ago\n");
}

}  // namespace
}  // namespace dgt::cli
