// NcclCommunicator against a fake NCCL: ranks are threads, "device" memory is host memory, and a
// shared FakeNcclWorld completes init and collectives once every rank of a group arrived.
#include "dgt/worker/nccl_communicator.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/mutex.h"
#include "dgt/store/memory_store.h"
#include "dgt/worker/elastic_group.h"
#include "dgt/worker/recovery_keys.h"
#include "gtest/gtest.h"
#include "tests/worker_runtime/fake_store_ref.h"

namespace dgt::worker {
namespace {

struct FakeComm {
  std::string group;
  int rank = 0;
  int size = 0;
  uint64_t seq = 0;
  bool aborted = false;
};

struct FakeOp {
  std::string group;
  uint64_t seq;
  int rank;
  void* buf;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

class FakeNcclApi final : public NcclApi {
 public:
  explicit FakeNcclApi(int version = 22809) : version_(version) {}

  // Knobs.
  std::atomic<bool> init_never_completes{false};
  std::atomic<ncclResult_t> init_async_error{ncclSuccess};
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  // Observations.
  std::atomic<int> aborts{0};
  std::atomic<int> scalable_inits{0};
  std::atomic<int> last_nids{0};
  std::atomic<int> nonblocking_inits{0};
  std::atomic<int> shrink_flags{-1};

  int Version() override { return version_; }
  ncclResult_t GetUniqueId(ncclUniqueId* id) override {
    dgt::MutexLock l(&mu_);
    std::memset(id->internal, 0, sizeof(id->internal));
    std::snprintf(id->internal, sizeof(id->internal), "fake-%d", next_id_++);
    return ncclSuccess;
  }
  ncclResult_t CommInitRankConfig(ncclComm_t* comm, int n, ncclUniqueId id, int rank,
                                  ncclConfig_t* cfg) override {
    return Init(comm, n, id.internal, rank, cfg);
  }
  ncclResult_t CommInitRankScalable(ncclComm_t* comm, int n, int rank, int nids, ncclUniqueId* ids,
                                    ncclConfig_t* cfg) override {
    ++scalable_inits;
    last_nids = nids;
    std::string key;
    for (int i = 0; i < nids; ++i) key += ids[i].internal;
    return Init(comm, n, key, rank, cfg);
  }
  ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* e) override {
    dgt::MutexLock l(&mu_);
    FakeComm* c = Comm(comm);
    if (c->aborted) return ncclInvalidUsage;  // Use after abort: the test fails on this.
    if (async_error != ncclSuccess) {
      *e = async_error;
    } else if (init_never_completes || joined_[c->group] < c->size) {
      *e = ncclInProgress;
    } else {
      *e = init_async_error;
    }
    return ncclSuccess;
  }
  ncclResult_t CommAbort(ncclComm_t comm) override {
    dgt::MutexLock l(&mu_);
    Comm(comm)->aborted = true;
    ++aborts;
    return ncclSuccess;
  }
  ncclResult_t CommDestroy(ncclComm_t comm) override { return CommAbort(comm); }
  ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out,
                         ncclConfig_t* cfg) override {
    FakeComm parent;
    {
      dgt::MutexLock l(&mu_);
      parent = *Comm(comm);
    }
    // Supports every rank passing the same color.
    return Init(out, parent.size, parent.group + "/split" + std::to_string(color), key, cfg);
  }
  ncclResult_t CommShrink(ncclComm_t comm, int* exclude, int count, ncclComm_t* out,
                          ncclConfig_t* cfg, int flags) override {
    shrink_flags = flags;
    FakeComm parent;
    {
      dgt::MutexLock l(&mu_);
      parent = *Comm(comm);
    }
    int rank = parent.rank;
    for (int i = 0; i < count; ++i) rank -= exclude[i] < parent.rank ? 1 : 0;
    return Init(out, parent.size - count, parent.group + "/shrink", rank, cfg);
  }
  ncclResult_t AllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t st) override {
    return Enqueue(r, n, t, op, -1, comm, st);
  }
  ncclResult_t Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                         ncclComm_t comm, cudaStream_t st) override {
    return Enqueue(r, n, t, ncclSum, root, comm, st);
  }
  std::string ErrorString(ncclResult_t r) override {
    return "fake nccl error " + std::to_string(r);
  }
  ncclResult_t CommCount(ncclComm_t comm, int* n) override {
    dgt::MutexLock l(&mu_);
    *n = Comm(comm)->size;
    return ncclSuccess;
  }
  ncclResult_t CommUserRank(ncclComm_t comm, int* r) override {
    dgt::MutexLock l(&mu_);
    *r = Comm(comm)->rank;
    return ncclSuccess;
  }
  absl::StatusOr<int> DeviceCount() override { return 8; }
  absl::Status SetDevice(int) override { return absl::OkStatus(); }
  absl::StatusOr<void*> Malloc(size_t bytes) override { return std::malloc(bytes); }
  void Free(void* p) override { std::free(p); }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override {
    std::memcpy(d, s, n);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override {
    std::memcpy(d, s, n);
    return absl::OkStatus();
  }
  absl::StatusOr<cudaStream_t> StreamCreate() override {
    dgt::MutexLock l(&mu_);
    return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(++next_stream_));
  }
  void StreamDestroy(cudaStream_t) override {}
  absl::StatusOr<bool> StreamDone(cudaStream_t st) override {
    dgt::MutexLock l(&mu_);
    auto it = pending_.find(st);
    if (it == pending_.end()) return true;
    const FakeOp& op = it->second;
    auto& arrived = ops_[op.group + "#" + std::to_string(op.seq)];
    if (static_cast<int>(arrived.size()) < sizes_[op.group]) return false;
    // Every rank arrived: compute this rank's result.
    const size_t width = op.type == ncclInt64 ? 8 : 4;
    std::vector<char> out(op.count * width);
    if (op.root >= 0) {
      std::memcpy(out.data(), arrived[op.root].data(), out.size());
    } else {
      for (size_t i = 0; i < op.count; ++i) {
        if (op.type == ncclInt64) {
          int64_t acc = 0;
          for (auto& [r, data] : arrived) acc += reinterpret_cast<const int64_t*>(data.data())[i];
          std::memcpy(out.data() + i * 8, &acc, 8);
        } else {
          float acc = 0;
          for (auto& [r, data] : arrived) acc += reinterpret_cast<const float*>(data.data())[i];
          std::memcpy(out.data() + i * 4, &acc, 4);
        }
      }
    }
    std::memcpy(op.buf, out.data(), out.size());
    pending_.erase(it);
    return true;
  }

 private:
  FakeComm* Comm(ncclComm_t c) { return reinterpret_cast<FakeComm*>(c); }

  ncclResult_t Init(ncclComm_t* comm, int n, const std::string& group, int rank,
                    ncclConfig_t* cfg) {
    dgt::MutexLock l(&mu_);
    if (cfg->blocking == 0) ++nonblocking_inits;
    auto c = std::make_unique<FakeComm>();
    c->group = group;
    c->rank = rank;
    c->size = n;
    *comm = reinterpret_cast<ncclComm_t>(c.get());
    comms_.push_back(std::move(c));
    joined_[group]++;
    sizes_[group] = n;
    return cfg->blocking == 0 ? ncclInProgress : ncclSuccess;
  }

  ncclResult_t Enqueue(void* buf, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                       ncclComm_t comm, cudaStream_t st) {
    dgt::MutexLock l(&mu_);
    FakeComm* c = Comm(comm);
    if (c->aborted) return ncclInvalidUsage;
    const uint64_t seq = c->seq++;
    const size_t width = t == ncclInt64 ? 8 : 4;
    ops_[c->group + "#" + std::to_string(seq)][c->rank] =
        std::vector<char>(static_cast<char*>(buf), static_cast<char*>(buf) + n * width);
    pending_[st] = FakeOp{c->group, seq, c->rank, buf, n, t, op, root};
    return ncclSuccess;
  }

  const int version_;
  dgt::Mutex mu_;
  int next_id_ = 0;
  int next_stream_ = 0;
  std::vector<std::unique_ptr<FakeComm>> comms_;
  std::map<std::string, int> joined_, sizes_;
  std::map<std::string, std::map<int, std::vector<char>>> ops_;
  std::map<cudaStream_t, FakeOp> pending_;
};

CommunicatorOptions Opts(int rank, int size, int generation = 0) {
  CommunicatorOptions o;
  o.rank = rank;
  o.size = size;
  o.generation = generation;
  o.key_prefix = CommKeyPrefix("world", generation);
  o.init_timeout = absl::Seconds(5);
  o.op_timeout = absl::Seconds(5);
  return o;
}

std::vector<std::unique_ptr<Communicator>> CreateAll(FakeNcclApi& api, store::Store& store, int n,
                                                     NcclOptions nopts = {}) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) {
    t.emplace_back([&, r] {
      NcclCommunicatorFactory f(api, nopts);
      auto c = f.Create(store, Opts(r, n));
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& th : t) th.join();
  return comms;
}

TEST(NcclRootRanksTest, SpreadsRootsAboveTheThreshold) {
  NcclOptions o;
  o.scalable_threshold = 1024;
  o.ranks_per_root = 128;
  o.max_roots = 32;
  EXPECT_EQ(NcclRootRanks(512, 22809, o), (std::vector<int>{0}));
  EXPECT_EQ(NcclRootRanks(1024, 22809, o),
            (std::vector<int>{0, 128, 256, 384, 512, 640, 768, 896}));
  EXPECT_EQ(NcclRootRanks(1024, 22200, o), (std::vector<int>{0}));  // Before 2.23.
  EXPECT_EQ(NcclRootRanks(100000, 22809, o).size(), 32u);
}

TEST(NcclCommunicatorTest, UniqueIdThroughTheStoreAndExactAllReduce) {
  FakeNcclApi api;
  store::MemoryStore store;
  auto comms = CreateAll(api, store, 3);
  EXPECT_EQ(api.nonblocking_inits.load(), 3);
  EXPECT_EQ(api.scalable_inits.load(), 0);
  auto id = store.Get("dgt/comm/world/g0/nccl_id/0");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->size(), 128u);
  EXPECT_EQ(id->substr(0, 6), std::string("fake-0"));
  std::vector<std::thread> t;
  for (int r = 0; r < 3; ++r) {
    t.emplace_back([&, r] {
      std::vector<int64_t> v = {r + 1, 100};
      ASSERT_TRUE(comms[r]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
      EXPECT_EQ(v, (std::vector<int64_t>{6, 300}));
      std::vector<int64_t> b = {r == 2 ? 9 : 0};
      ASSERT_TRUE(comms[r]->Broadcast(absl::MakeSpan(b), 2).ok());
      EXPECT_EQ(b[0], 9);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(comms[0]->backend(), "nccl");
}

TEST(NcclCommunicatorTest, ScalableInitWithSeveralRoots) {
  FakeNcclApi api;
  store::MemoryStore store;
  NcclOptions o;
  o.scalable_threshold = 4;
  o.ranks_per_root = 2;
  auto comms = CreateAll(api, store, 4, o);
  EXPECT_EQ(api.scalable_inits.load(), 4);
  EXPECT_EQ(api.last_nids.load(), 2);
  EXPECT_TRUE(store.Get("dgt/comm/world/g0/nccl_id/1").ok());
}

TEST(NcclCommunicatorTest, InitTimeoutAborts) {
  FakeNcclApi api;
  api.init_never_completes = true;
  store::MemoryStore store;
  NcclCommunicatorFactory f(api);
  CommunicatorOptions o = Opts(0, 1);
  o.init_timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  auto c = f.Create(store, o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_EQ(c.status().message(), "nccl init of generation 0 rank 0/1 did not finish in time");
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(api.aborts.load(), 1);
}

TEST(NcclCommunicatorTest, UniqueIdThatNeverComesTimesOut) {
  FakeNcclApi api;
  store::MemoryStore store;
  NcclCommunicatorFactory f(api);
  CommunicatorOptions o = Opts(1, 2);  // Rank 0 (the root) never runs.
  o.init_timeout = absl::Milliseconds(200);
  EXPECT_EQ(f.Create(store, o).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclCommunicatorTest, InitErrorAborts) {
  FakeNcclApi api;
  api.init_async_error = ncclSystemError;
  store::MemoryStore store;
  NcclCommunicatorFactory f(api);
  auto c = f.Create(store, Opts(0, 1));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c.status().message(), "nccl init of generation 0 rank 0/1 failed: fake nccl error 2");
  EXPECT_EQ(api.aborts.load(), 1);
}

TEST(NcclCommunicatorTest, AsyncErrorWatcherAbortsAndReports) {
  FakeNcclApi api;
  store::MemoryStore store;
  NcclOptions o;
  o.watch_interval = absl::Milliseconds(20);
  dgt::Mutex mu;
  std::vector<absl::Status> reports;
  o.on_async_error = [&](const absl::Status& s) {
    dgt::MutexLock l(&mu);
    reports.push_back(s);
  };
  auto comms = CreateAll(api, store, 2, o);
  // Rank 0 blocks in a collective rank 1 never joins; then the network "fails".
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(100));
    api.async_error = ncclRemoteError;
  });
  std::vector<int64_t> v = {1};
  absl::Status s = comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
  t.join();
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kAborted)
      << s;
  // Each watcher polls every 20 ms; under a loaded sanitizer run one may be late, so wait for
  // both aborts (and a report) up to a deadline rather than a fixed time.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  auto settled = [&] {
    dgt::MutexLock l(&mu);
    return comms[0]->aborted() && comms[1]->aborted() && !reports.empty();
  };
  while (!settled() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(comms[0]->aborted());
  EXPECT_TRUE(comms[1]->aborted());
  dgt::MutexLock l(&mu);
  // Rank 1's watcher always reports; rank 0's reports unless its own blocked collective saw the
  // error first and aborted (which of the two wins is a race, so both counts are right).
  ASSERT_GE(reports.size(), 1u);
  ASSERT_LE(reports.size(), 2u);
  for (const absl::Status& r : reports) EXPECT_EQ(r.code(), absl::StatusCode::kUnavailable) << r;
}

TEST(NcclCommunicatorTest, AbortFromAnotherThreadUnblocksACollective) {
  FakeNcclApi api;
  store::MemoryStore store;
  auto comms = CreateAll(api, store, 2);
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(100));
    comms[0]->Abort("generation 1 was opened");
  });
  std::vector<int64_t> v = {1};
  absl::Status s = comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum);
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "communicator generation 0 aborted: generation 1 was opened");
  EXPECT_EQ(comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).code(),
            absl::StatusCode::kAborted);
}

TEST(NcclCommunicatorTest, CollectiveTimeoutAborts) {
  FakeNcclApi api;
  store::MemoryStore store;
  NcclCommunicatorFactory f(api);
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      CommunicatorOptions o = Opts(r, 2);
      o.op_timeout = absl::Milliseconds(200);
      comms[r] = std::move(*f.Create(store, o));
    });
  }
  for (auto& th : t) th.join();
  std::vector<int64_t> v = {1};
  EXPECT_EQ(comms[0]->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(comms[0]->aborted());
}

TEST(NcclCommunicatorTest, ShrinkNeedsNccl227) {
  FakeNcclApi old_api(22600);
  store::MemoryStore store;
  auto comms = CreateAll(old_api, store, 1);
  EXPECT_EQ(ShrinkNcclCommunicator(*comms[0], {}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(NcclCommunicatorTest, ShrinkDropsTheFailedRankAndRenumbers) {
  FakeNcclApi api;
  store::MemoryStore store;
  auto comms = CreateAll(api, store, 3);
  std::vector<std::unique_ptr<Communicator>> small(3);
  std::vector<std::thread> t;
  for (int r : {0, 2}) {
    t.emplace_back([&, r] {
      auto c = ShrinkNcclCommunicator(*comms[r], {1}, absl::Seconds(2));
      ASSERT_TRUE(c.ok()) << c.status();
      small[r] = std::move(*c);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(api.shrink_flags.load(), NCCL_SHRINK_ABORT);
  EXPECT_EQ(small[0]->rank(), 0);
  EXPECT_EQ(small[2]->rank(), 1);
  EXPECT_EQ(small[2]->size(), 2);
  EXPECT_EQ(small[2]->generation(), 1);
}

TEST(NcclCommunicatorTest, SplitTakesItsShapeFromNccl) {
  FakeNcclApi api;
  store::MemoryStore store;
  auto comms = CreateAll(api, store, 2);
  std::vector<std::unique_ptr<Communicator>> kids(2);
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      auto c = SplitNcclCommunicator(*comms[r], 0, 1 - r, absl::Seconds(2));
      ASSERT_TRUE(c.ok()) << c.status();
      kids[r] = std::move(*c);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(kids[0]->rank(), 1);
  EXPECT_EQ(kids[1]->rank(), 0);
  EXPECT_EQ(kids[0]->size(), 2);
}

// The recovery protocol on the NCCL path: a failure report aborts both ranks' communicators
// through their watchers, and Recover() bootstraps generation 1 with a fresh unique id.
TEST(NcclCommunicatorTest, ElasticGroupRebuildsTheNcclGenerationThroughTheStore) {
  FakeNcclApi api;
  store::MemoryStore store;
  NcclCommunicatorFactory factory(api);
  ElasticGroupOptions o;
  o.init_timeout = absl::Seconds(5);
  o.watch_period = absl::Milliseconds(50);
  std::vector<std::unique_ptr<ElasticGroup>> groups(2);
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      Context c;
      c.rank = r;
      c.world_size = 2;
      c.local_world_size = 2;
      c.local_rank = r;
      auto g = ElasticGroup::Join(c, testing::ConnectorTo(store), factory, o);
      ASSERT_TRUE(g.ok()) << g.status();
      groups[r] = std::move(*g);
    });
  }
  for (auto& th : t) th.join();
  t.clear();
  ASSERT_TRUE(recovery::PublishRankFailure(store, "world", 1, "NCCL async error").ok());
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      // The watcher marks recovery pending just before it aborts the communicator.
      while (!(groups[r]->recovery_pending() && groups[r]->comm().aborted()) &&
             absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      EXPECT_TRUE(groups[r]->comm().aborted());
      auto c = groups[r]->Recover();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->generation(), 1);
      EXPECT_EQ((*c)->backend(), "nccl");
      std::vector<int64_t> v = {10 * (r + 1)};
      ASSERT_TRUE((*c)->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
      EXPECT_EQ(v[0], 30);
    });
  }
  for (auto& th : t) th.join();
  auto id0 = store.Get("dgt/comm/world/g0/nccl_id/0");
  auto id1 = store.Get("dgt/comm/world/g1/nccl_id/0");
  ASSERT_TRUE(id0.ok() && id1.ok());
  EXPECT_NE(*id0, *id1);
  EXPECT_EQ(api.aborts.load(), 2);
}

// Shrink mode on NCCL: ncclCommShrink of the kept communicator when NCCL >= 2.27, a new
// bootstrap through the store before that.
void ShrinkThroughElasticGroup(int version, bool expect_in_place) {
  FakeNcclApi api(version);
  store::MemoryStore store;
  NcclOptions nopts;
  nopts.keep_for_shrink = true;
  NcclCommunicatorFactory factory(api, nopts);
  EXPECT_EQ(factory.CanShrink(), expect_in_place);
  ElasticGroupOptions o;
  o.mode = RecoveryMode::kShrink;
  o.init_timeout = absl::Seconds(5);
  o.watch_period = absl::Milliseconds(50);
  std::vector<std::unique_ptr<ElasticGroup>> groups(3);
  std::vector<std::thread> t;
  for (int r = 0; r < 3; ++r) {
    t.emplace_back([&, r] {
      Context c;
      c.rank = r;
      c.world_size = 3;
      c.local_world_size = 3;
      c.local_rank = r;
      auto g = ElasticGroup::Join(c, testing::ConnectorTo(store), factory, o);
      ASSERT_TRUE(g.ok()) << g.status();
      groups[r] = std::move(*g);
    });
  }
  for (auto& th : t) th.join();
  t.clear();
  ASSERT_TRUE(recovery::PublishRankFailure(store, "world", 1, "GPU fell off the bus").ok());
  for (int r : {0, 2}) {
    t.emplace_back([&, r] {
      auto c = groups[r]->Recover();
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->generation(), 1);
      EXPECT_EQ((*c)->size(), 2);
      EXPECT_EQ((*c)->rank(), r / 2);
      EXPECT_EQ(groups[r]->members(), (std::vector<int>{0, 2}));
      std::vector<int64_t> v = {r + 1};
      ASSERT_TRUE((*c)->AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
      EXPECT_EQ(v[0], 4);
    });
  }
  for (auto& th : t) th.join();
  EXPECT_EQ(api.shrink_flags.load(), expect_in_place ? NCCL_SHRINK_ABORT : -1);
  EXPECT_EQ(store.Check({"dgt/comm/world/g1/nccl_id/0"}).value(), !expect_in_place);
}

TEST(NcclCommunicatorTest, ElasticShrinkUsesNcclCommShrinkFrom227) {
  ShrinkThroughElasticGroup(22809, true);
}

TEST(NcclCommunicatorTest, ElasticShrinkBootstrapsANewCommunicatorBefore227) {
  ShrinkThroughElasticGroup(22600, false);
}

}  // namespace
}  // namespace dgt::worker
