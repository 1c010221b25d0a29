// Every dgt store key shape, as exact strings: they are wire-visible (trainers, older peers and
// operators read them), so this test changes only with a protocol change.
#include "common/store_keys.h"

#include "gtest/gtest.h"

namespace dgt::keys {
namespace {

TEST(StoreKeysTest, StaticBackend) {
  EXPECT_EQ(StaticFailedKey("job-7"), "dgt/static/job-7/failed");
  EXPECT_EQ(StaticJoinedKey("job-7", 0), "dgt/static/job-7/joined/0");
  EXPECT_EQ(StaticDoneKey("job-7", 12), "dgt/static/job-7/done/12");
  EXPECT_EQ(StaticAliveKey("job-7", 3), "dgt/static/job-7/alive/3");
  EXPECT_EQ(StaticFailedKey(""), "dgt/static//failed");
}

TEST(StoreKeysTest, DoneMarks) {
  EXPECT_EQ(DoneMarkKey(3, 1), "dgt/done/3/1");
  EXPECT_EQ(DoneSeenKey(3, 1), "dgt/done/3/seen/1");
  EXPECT_EQ(DoneMarkKey(int64_t{1} << 40, 0), "dgt/done/1099511627776/0");
}

TEST(StoreKeysTest, TensorFlowCluster) {
  EXPECT_EQ(TfAddressesKey(3, 1), "dgt/tf/3/1");
  EXPECT_EQ(TfRolesKey(3, 1), "dgt/tf/3/1/roles");
  EXPECT_EQ(TfAddressesKey(0, 12), "dgt/tf/0/12");
}

TEST(StoreKeysTest, RankRestarts) {
  EXPECT_EQ(RestartKey(5), "dgt/restart/5");
  EXPECT_EQ(RestartWireKey(5), "/dgt/restart/5");
}

TEST(StoreKeysTest, InPlaceRecovery) {
  EXPECT_EQ(RecoveryGenerationKey("world"), "dgt/recovery/world/generation");
  EXPECT_EQ(RecoveryOpenKey("world", 4), "dgt/recovery/world/g4/open");
  EXPECT_EQ(RecoveryFailedKey("world", 4), "dgt/recovery/world/g4/failed");
  EXPECT_EQ(RecoveryAliveKey("tp", 4, 2), "dgt/recovery/tp/g4/alive/2");
  EXPECT_EQ(RecoveryMemberKey("world", 2), "dgt/recovery/world/member/2");
}

TEST(StoreKeysTest, CommunicatorPrefix) {
  EXPECT_EQ(CommPrefix("world", 0), "dgt/comm/world/g0");
  EXPECT_EQ(CommPrefix("dp", 17), "dgt/comm/dp/g17");
}

}  // namespace
}  // namespace dgt::keys
