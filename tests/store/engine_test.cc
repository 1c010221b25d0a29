#include "store/engine.h"

#include "gtest/gtest.h"

namespace dgt::store {
namespace {

TEST(EngineTest, SetGetDelete) {
  Engine e;
  EXPECT_EQ(e.Get("k"), nullptr);
  e.Set("k", "v1");
  ASSERT_NE(e.Get("k"), nullptr);
  EXPECT_EQ(*e.Get("k"), "v1");
  e.Set("k", std::string("a\0b", 3));
  EXPECT_EQ(*e.Get("k"), std::string("a\0b", 3));
  EXPECT_EQ(e.NumKeys(), 1);
  EXPECT_TRUE(e.Delete("k"));
  EXPECT_FALSE(e.Delete("k"));
  EXPECT_EQ(e.NumKeys(), 0);
}

TEST(EngineTest, AddStoresAsciiDecimal) {
  Engine e;
  EXPECT_EQ(*e.Add("c", 7), 7);
  EXPECT_EQ(*e.Get("c"), "7");
  EXPECT_EQ(*e.Add("c", -10), -3);
  EXPECT_EQ(*e.Get("c"), "-3");
  e.Set("s", "abc");
  auto bad = e.Add("s", 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*e.Get("s"), "abc");
}

TEST(EngineTest, CompareSetMatchesTorch) {
  Engine e;
  // Missing key, non-empty expected: nothing stored, expected returned.
  EXPECT_EQ(e.CompareSet("k", "x", "new"), "x");
  EXPECT_EQ(e.Get("k"), nullptr);
  // Missing key, empty expected: desired stored and returned.
  EXPECT_EQ(e.CompareSet("k", "", "new"), "new");
  EXPECT_EQ(*e.Get("k"), "new");
  // Present, mismatch: unchanged, current returned.
  EXPECT_EQ(e.CompareSet("k", "old", "v2"), "new");
  EXPECT_EQ(*e.Get("k"), "new");
  // Present, match: replaced.
  EXPECT_EQ(e.CompareSet("k", "new", "v2"), "v2");
  EXPECT_EQ(*e.Get("k"), "v2");
}

TEST(EngineTest, AppendAndCheck) {
  Engine e;
  EXPECT_FALSE(e.Check({"a"}));
  e.Append("a", "x");
  e.Append("a", "yz");
  EXPECT_EQ(*e.Get("a"), "xyz");
  EXPECT_TRUE(e.Check({"a"}));
  EXPECT_FALSE(e.Check({"a", "b"}));
  EXPECT_TRUE(e.Check({}));
}

TEST(EngineTest, QueueFifoAndPresence) {
  Engine e;
  EXPECT_EQ(e.QueueLen("q"), 0);
  EXPECT_EQ(e.QueuePop("q"), std::nullopt);
  e.QueuePush("q", "1");
  e.QueuePush("q", "2");
  EXPECT_EQ(e.QueueLen("q"), 2);
  EXPECT_TRUE(e.Check({"q"}));
  EXPECT_EQ(e.NumKeys(), 0);
  EXPECT_EQ(*e.QueuePop("q"), "1");
  EXPECT_EQ(*e.QueuePop("q"), "2");
  EXPECT_FALSE(e.Check({"q"}));
}

TEST(EngineTest, WaitFiresWhenLastKeyAppears) {
  Engine e;
  e.Set("a", "1");
  int fired = 0;
  auto id = e.Wait({"a", "b", "c"}, [&] { ++fired; });
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(e.PendingWaits(), 1u);
  e.Set("b", "1");
  EXPECT_EQ(fired, 0);
  e.Add("c", 1).IgnoreError();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(e.PendingWaits(), 0u);
  e.Set("c", "2");
  EXPECT_EQ(fired, 1);
}

TEST(EngineTest, WaitOnPresentKeysDoesNotRegister) {
  Engine e;
  e.Set("a", "1");
  bool fired = false;
  EXPECT_EQ(e.Wait({"a"}, [&] { fired = true; }), std::nullopt);
  EXPECT_FALSE(fired);
  EXPECT_EQ(e.PendingWaits(), 0u);
}

TEST(EngineTest, CancelledWaitLeavesNothingBehind) {
  Engine e;
  int fired = 0;
  auto id = e.Wait({"x", "y"}, [&] { ++fired; });
  ASSERT_TRUE(id.has_value());
  e.Set("x", "1");
  EXPECT_TRUE(e.CancelWait(*id));
  EXPECT_FALSE(e.CancelWait(*id));
  EXPECT_EQ(e.PendingWaits(), 0u);
  e.Set("y", "1");
  EXPECT_EQ(fired, 0);
}

TEST(EngineTest, ManyWaitersOnOneKeyAllWake) {
  Engine e;
  int fired = 0;
  for (int i = 0; i < 512; ++i) ASSERT_TRUE(e.Wait({"go"}, [&] { ++fired; }).has_value());
  e.Set("go", "1");
  EXPECT_EQ(fired, 512);
  EXPECT_EQ(e.PendingWaits(), 0u);
}

TEST(EngineTest, CallbackMayReenterEngine) {
  Engine e;
  auto id = e.Wait({"a"}, [&] { e.Set("b", "from-callback"); });
  ASSERT_TRUE(id.has_value());
  int second = 0;
  ASSERT_TRUE(e.Wait({"b"}, [&] { ++second; }).has_value());
  e.Set("a", "1");
  EXPECT_EQ(*e.Get("b"), "from-callback");
  EXPECT_EQ(second, 1);
}

TEST(EngineTest, QueuePushWakesOneWaitPerItem) {
  Engine e;
  int first = 0;
  int second = 0;
  ASSERT_TRUE(e.Wait({"q"}, [&] { ++first; }).has_value());
  ASSERT_TRUE(e.Wait({"q"}, [&] { ++second; }).has_value());
  e.QueuePush("q", "1");
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0);
  EXPECT_EQ(e.PendingWaits(), 1u);
  // The item is still there, but the push already woke its one waiter: a blocked consumer is
  // woken by the next push, as in torch 2.13.
  e.QueuePush("q", "2");
  EXPECT_EQ(second, 1);
  EXPECT_EQ(e.PendingWaits(), 0u);
}

TEST(EngineTest, BarrierCountsAndReleasesAtWorldSize) {
  Engine e;
  int woken = 0;
  auto first = e.Barrier("b", 3, [&] { ++woken; });
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->has_value());
  auto second = e.Barrier("b", 3, [&] { ++woken; });
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ(woken, 0);
  EXPECT_EQ(*e.Get("b"), "2");
  auto third = e.Barrier("b", 3, [&] { ++woken; });
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->has_value());  // Released at once, nothing registered.
  EXPECT_EQ(woken, 2);
  EXPECT_EQ(*e.Get("b"), "3");
  EXPECT_EQ(e.PendingWaits(), 0u);
  // Past the world size every arrival passes.
  auto fourth = e.Barrier("b", 3, [&] { ++woken; });
  ASSERT_TRUE(fourth.ok());
  EXPECT_FALSE(fourth->has_value());
}

TEST(EngineTest, BarrierWaitIsWokenByAMutationAndCanBeCancelled) {
  Engine e;
  int woken = 0;
  auto w = e.Barrier("b", 5, [&] { ++woken; });
  ASSERT_TRUE(w.ok() && w->has_value());
  e.Set("b", "7");
  EXPECT_EQ(woken, 1);
  auto c = e.Barrier("c", 2, [&] { ++woken; });
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_TRUE(e.CancelWait(**c));
  EXPECT_EQ(*e.Get("c"), "1");  // A cancelled barrier keeps its arrival, as torch's does.
  e.Set("c", "1");
  EXPECT_EQ(woken, 1);
}

TEST(EngineTest, BarrierOnNonIntegerFailsAndChangesNothing) {
  Engine e;
  e.Set("t", "abc");
  auto r = e.Barrier("t", 2, [] {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "BARRIER on key 't' whose value is not a decimal integer");
  EXPECT_EQ(*e.Get("t"), "abc");
  EXPECT_EQ(e.PendingWaits(), 0u);
}

}  // namespace
}  // namespace dgt::store
