// One Store test suite, run against every Store implementation (STYLE.md: TEST_P over
// implementations): the in-process engine (MemoryStore), the wire server through the C++ client
// in both protocol families, and PrefixStore over each of them. The same calls must give the
// same exact results everywhere; that is what makes the engine the reference for the server.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dgt/store/client.h"
#include "dgt/store/memory_store.h"
#include "dgt/store/prefix_store.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::store {
namespace {

constexpr absl::Duration kTimeout = absl::Milliseconds(800);

enum class Kind { kMemory, kClientV2, kClientV1, kPrefixMemory, kPrefixClientV2 };

std::string KindName(Kind k) {
  switch (k) {
    case Kind::kMemory:
      return "Memory";
    case Kind::kClientV2:
      return "ClientV2";
    case Kind::kClientV1:
      return "ClientV1";
    case Kind::kPrefixMemory:
      return "PrefixMemory";
    case Kind::kPrefixClientV2:
      return "PrefixClientV2";
  }
  return "?";
}

// Owns one implementation and whatever it needs (a server, a base store).
struct Fixture {
  std::unique_ptr<Server> server;
  std::unique_ptr<Store> base;
  std::unique_ptr<Store> store;
  Store* Get() { return store ? store.get() : base.get(); }

  std::unique_ptr<Client> NewClient(Protocol protocol) {
    ClientOptions o;
    o.port = server->port();
    o.protocol = protocol;
    o.timeout = kTimeout;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
};

std::unique_ptr<Fixture> Make(Kind kind) {
  auto f = std::make_unique<Fixture>();
  bool wire = kind == Kind::kClientV2 || kind == Kind::kClientV1 || kind == Kind::kPrefixClientV2;
  if (wire) {
    f->server = std::make_unique<Server>(ServerOptions{});
    EXPECT_TRUE(f->server->Start().ok());
    f->base = f->NewClient(kind == Kind::kClientV1 ? Protocol::kV1 : Protocol::kV2);
  } else {
    f->base = std::make_unique<MemoryStore>(MemoryStoreOptions{kTimeout});
  }
  if (kind == Kind::kPrefixMemory || kind == Kind::kPrefixClientV2) {
    f->store = std::make_unique<PrefixStore>("job", *f->base);
  }
  return f;
}

class StoreSuite : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    f_ = Make(GetParam());
    store_ = f_->Get();
    ASSERT_NE(store_, nullptr);
  }
  bool v1() const { return GetParam() == Kind::kClientV1; }
  bool wire() const { return f_->server != nullptr; }

  std::unique_ptr<Fixture> f_;
  Store* store_ = nullptr;
};

TEST_P(StoreSuite, SetThenGet) {
  ASSERT_TRUE(store_->Set("a", "1").ok());
  ASSERT_TRUE(store_->Set("a", "two").ok());
  EXPECT_EQ(*store_->Get("a"), "two");
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(*store_->Get("empty"), "");
  std::string binary("\0\xff\n", 3);
  ASSERT_TRUE(store_->Set("bin", binary).ok());
  EXPECT_EQ(*store_->Get("bin"), binary);
}

TEST_P(StoreSuite, GetOfMissingKeyTimesOut) {
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> v = store_->Get("never");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, kTimeout - absl::Milliseconds(5));
  // The store is still usable afterwards (the 1.x client reconnects).
  ASSERT_TRUE(store_->Set("after", "x").ok());
  EXPECT_EQ(*store_->Get("after"), "x");
  if (wire()) {
    EXPECT_EQ(f_->server->Stats().pending_waits, 0u);
  }
}

TEST_P(StoreSuite, GetWaitsForALaterSet) {
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    Store* other = store_;
    std::unique_ptr<Client> own;
    std::unique_ptr<PrefixStore> own_prefix;
    if (wire()) {  // A second connection, as another worker would have.
      own = f_->NewClient(v1() ? Protocol::kV1 : Protocol::kV2);
      other = own.get();
      if (f_->store) {
        own_prefix = std::make_unique<PrefixStore>("job", *own);
        other = own_prefix.get();
      }
    }
    EXPECT_TRUE(other->Set("late", "v").ok());
  });
  EXPECT_EQ(*store_->Get("late"), "v");
  setter.join();
}

TEST_P(StoreSuite, AddCountsFromZero) {
  EXPECT_EQ(*store_->Add("ctr", 7), 7);
  EXPECT_EQ(*store_->Add("ctr", -10), -3);
  EXPECT_EQ(*store_->Add("ctr", 0), -3);
  EXPECT_EQ(*store_->Get("ctr"), "-3");  // Stored as ASCII decimal, as torch.
  ASSERT_TRUE(store_->Set("preset", "40").ok());
  EXPECT_EQ(*store_->Add("preset", 2), 42);
}

TEST_P(StoreSuite, CompareSetFollowsTorch) {
  // Missing key, empty expected: stores desired.
  EXPECT_EQ(*store_->CompareSet("k", "", "new"), "new");
  EXPECT_EQ(*store_->Get("k"), "new");
  // Missing key, non-empty expected: returns expected, stores nothing.
  EXPECT_EQ(*store_->CompareSet("m", "old", "x"), "old");
  EXPECT_FALSE(*store_->Check({"m"}));
  // Present, matching: replaced.
  EXPECT_EQ(*store_->CompareSet("k", "new", "v2"), "v2");
  // Present, not matching: current value returned, unchanged.
  EXPECT_EQ(*store_->CompareSet("k", "nope", "v3"), "v2");
  EXPECT_EQ(*store_->Get("k"), "v2");
}

TEST_P(StoreSuite, CheckNeedsEveryKey) {
  EXPECT_TRUE(*store_->Check({}));
  EXPECT_FALSE(*store_->Check({"x"}));
  ASSERT_TRUE(store_->Set("x", "1").ok());
  EXPECT_TRUE(*store_->Check({"x"}));
  EXPECT_FALSE(*store_->Check({"x", "y"}));
}

TEST_P(StoreSuite, WaitReturnsAtOnceWhenPresent) {
  ASSERT_TRUE(store_->Set("w", "1").ok());
  EXPECT_TRUE(store_->Wait({"w"}, absl::Seconds(5)).ok());
  EXPECT_TRUE(store_->Wait({}, absl::Seconds(5)).ok());
}

TEST_P(StoreSuite, WaitTimesOutAndLeavesNothingBehind) {
  absl::Time start = absl::Now();
  absl::Status s = store_->Wait({"w1", "w2"}, absl::Milliseconds(150));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(145));
  EXPECT_LT(took, absl::Seconds(3));
  ASSERT_TRUE(store_->Set("w1", "1").ok());
  EXPECT_EQ(*store_->Get("w1"), "1");  // No stale STOP_WAITING confuses the next reply.
  if (wire()) {
    EXPECT_EQ(f_->server->Stats().pending_waits, 0u);
  }
}

TEST_P(StoreSuite, WaitWokenByAnotherThread) {
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    Store* other = store_;
    std::unique_ptr<Client> own;
    std::unique_ptr<PrefixStore> own_prefix;
    if (wire()) {
      own = f_->NewClient(v1() ? Protocol::kV1 : Protocol::kV2);
      other = own.get();
      if (f_->store) {
        own_prefix = std::make_unique<PrefixStore>("job", *own);
        other = own_prefix.get();
      }
    }
    EXPECT_TRUE(other->Set("a", "1").ok());
    EXPECT_EQ(*other->Add("b", 1), 1);
  });
  EXPECT_TRUE(store_->Wait({"a", "b"}, absl::Seconds(5)).ok());
  setter.join();
}

TEST_P(StoreSuite, DeleteAndNumKeys) {
  EXPECT_EQ(*store_->NumKeys(), 0);
  ASSERT_TRUE(store_->Set("a", "1").ok());
  ASSERT_TRUE(store_->Set("b", "1").ok());
  EXPECT_EQ(*store_->NumKeys(), 2);
  EXPECT_TRUE(*store_->DeleteKey("a"));
  EXPECT_FALSE(*store_->DeleteKey("a"));
  EXPECT_EQ(*store_->NumKeys(), 1);
  EXPECT_FALSE(*store_->Check({"a"}));
}

TEST_P(StoreSuite, AppendMultiGetMultiSet) {
  if (v1()) {
    EXPECT_EQ(store_->Append("a", "x").code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(store_->MultiGet({"a"}).status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(store_->MultiSet({{"a", "1"}}).code(), absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(store_->Append("log", "ab").ok());
  ASSERT_TRUE(store_->Append("log", "cd").ok());
  EXPECT_EQ(*store_->Get("log"), "abcd");
  ASSERT_TRUE(store_->MultiSet({{"m1", "1"}, {"m2", ""}, {"m3", "333"}}).ok());
  EXPECT_EQ(*store_->MultiGet({"m3", "m1", "m2"}), (std::vector<std::string>{"333", "1", ""}));
  EXPECT_EQ(store_->MultiGet({"m1", "absent"}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreSuite,
                         ::testing::Values(Kind::kMemory, Kind::kClientV2, Kind::kClientV1,
                                           Kind::kPrefixMemory, Kind::kPrefixClientV2),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return KindName(info.param);
                         });

TEST(PrefixStoreTest, JoinsPrefixSlashKey) {
  MemoryStore base(MemoryStoreOptions{kTimeout});
  PrefixStore job("job", base);
  PrefixStore nested("pg", job);
  ASSERT_TRUE(nested.Set("k", "v").ok());
  EXPECT_EQ(nested.Join("k"), "pg/k");
  EXPECT_EQ(*base.Get("job/pg/k"), "v");
  EXPECT_TRUE(*job.Check({"pg/k"}));
  EXPECT_EQ(*job.NumKeys(), 1);
}

}  // namespace
}  // namespace dgt::store
