// Done marks over an in-memory store, and the asynchronous versions over a store::AsyncClient
// (and the agent's RoundStoreClient) against the real store server.
#include "agent/coord/done_marks.h"

#include <memory>

#include "absl/strings/match.h"
#include "boost/asio.hpp"
#include "dgt/store/client.h"
#include "dgt/store/memory_store.h"
#include "dgt/store/server.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

TEST(DoneMarksTest, MarksAreWrittenUnderTheDoneKeys) {
  store::MemoryStore s;
  ASSERT_TRUE(WriteDoneMark(s, 3, 1, 7).ok());
  ASSERT_TRUE(WriteSeenMark(s, 3, 1).ok());
  EXPECT_EQ(*s.Get("dgt/done/3/1"), "7");
  EXPECT_EQ(*s.Get("dgt/done/3/seen/1"), "1");
}

TEST(DoneMarksTest, OutcomeIsKnownOnlyOnceEveryNodeIsDone) {
  store::MemoryStore s;
  auto none = ReadDoneMarks(s, 2, 3);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->AllDone());
  EXPECT_FALSE(none->AllSucceeded());
  ASSERT_TRUE(WriteDoneMark(s, 2, 0, 0).ok());
  ASSERT_TRUE(WriteDoneMark(s, 2, 2, 0).ok());
  ASSERT_TRUE(WriteDoneMark(s, 1, 1, 0).ok());  // Another round's mark does not count.
  auto partial = ReadDoneMarks(s, 2, 3);
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->AllDone());
  EXPECT_EQ(partial->status[0], 0);
  EXPECT_EQ(partial->status[1], std::nullopt);
  ASSERT_TRUE(WriteDoneMark(s, 2, 1, 0).ok());
  auto all = ReadDoneMarks(s, 2, 3);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->AllSucceeded());
  EXPECT_EQ(all->FirstFailed(), -1);
  EXPECT_FALSE(all->AllSeenExcept(0));
  ASSERT_TRUE(WriteSeenMark(s, 2, 1).ok());
  ASSERT_TRUE(WriteSeenMark(s, 2, 2).ok());
  auto seen = ReadDoneMarks(s, 2, 3);
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->AllSeenExcept(0));
  EXPECT_FALSE(seen->AllSeenExcept(1));
}

TEST(DoneMarksTest, AFailedNodeIsNamed) {
  store::MemoryStore s;
  ASSERT_TRUE(WriteDoneMark(s, 0, 0, 0).ok());
  ASSERT_TRUE(WriteDoneMark(s, 0, 1, 69).ok());
  auto marks = ReadDoneMarks(s, 0, 2);
  ASSERT_TRUE(marks.ok());
  EXPECT_TRUE(marks->AllDone());
  EXPECT_FALSE(marks->AllSucceeded());
  EXPECT_EQ(marks->FirstFailed(), 1);
  EXPECT_EQ(marks->status[1], 69);
  // 69 is node 1's agent giving up on the lost service, not its workers failing.
  EXPECT_EQ(marks->FirstWorkerFailure(), -1);
  ASSERT_TRUE(WriteDoneMark(s, 0, 0, 3).ok());
  auto worker = ReadDoneMarks(s, 0, 2);
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ(worker->FirstWorkerFailure(), 0);
  ASSERT_TRUE(s.Set("dgt/done/0/0", "x").ok());
  auto bad = ReadDoneMarks(s, 0, 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "done mark dgt/done/0/0 must be an exit status, got 'x'");
}

// Runs `io` until `done()` or 10 s.
template <typename Pred>
void RunUntil(boost::asio::io_context& io, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done() && absl::Now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
}

TEST(DoneMarksAsyncTest, WritesAndReadsTheMarksOverOneConnection) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  store::AsyncClientOptions o;
  o.port = server.port();
  store::AsyncClient c(io.get_executor(), o);
  c.Connect(absl::Seconds(5), nullptr);
  std::vector<absl::Status> writes;
  WriteDoneMarkAsync(c, 4, 0, 0, absl::Seconds(5),
                     [&](const absl::Status& s) { writes.push_back(s); });
  WriteDoneMarkAsync(c, 4, 2, 1, absl::Seconds(5),
                     [&](const absl::Status& s) { writes.push_back(s); });
  WriteSeenMarkAsync(c, 4, 2, absl::Seconds(5),
                     [&](const absl::Status& s) { writes.push_back(s); });
  std::optional<absl::StatusOr<DoneMarks>> read;
  ReadDoneMarksAsync(c, 4, 3, absl::Seconds(5),
                     [&](const absl::StatusOr<DoneMarks>& m) { read = m; });
  RunUntil(io, [&] { return read.has_value(); });
  ASSERT_EQ(writes, (std::vector<absl::Status>(3, absl::OkStatus())));
  ASSERT_TRUE(read.has_value());
  ASSERT_TRUE(read->ok()) << read->status();
  EXPECT_EQ((*read)->status, (std::vector<std::optional<int>>{0, std::nullopt, 1}));
  EXPECT_EQ((*read)->seen, (std::vector<bool>{false, false, true}));
  EXPECT_EQ((*read)->FirstFailed(), 2);
  // The same keys the blocking functions use.
  store::ClientOptions co;
  co.port = server.port();
  auto blocking = store::Client::Connect(co);
  ASSERT_TRUE(blocking.ok());
  auto marks = ReadDoneMarks(**blocking, 4, 3);
  ASSERT_TRUE(marks.ok());
  EXPECT_EQ(marks->status, (*read)->status);
}

TEST(DoneMarksAsyncTest, ABadMarkAndAnUnreachableStoreAreReportedOnce) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  store::AsyncClientOptions o;
  o.port = server.port();
  store::AsyncClient c(io.get_executor(), o);
  c.Connect(absl::Seconds(5), nullptr);
  c.Set("dgt/done/1/1", "oops", absl::Seconds(5));
  std::vector<absl::StatusOr<DoneMarks>> reads;
  ReadDoneMarksAsync(c, 1, 2, absl::Seconds(5),
                     [&](const absl::StatusOr<DoneMarks>& m) { reads.push_back(m); });
  RunUntil(io, [&] { return !reads.empty(); });
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].status(), absl::InvalidArgumentError(
                                   "done mark dgt/done/1/1 must be an exit status, got 'oops'"));
  server.Stop();
  store::AsyncClient gone(io.get_executor(), o);
  gone.Connect(absl::Milliseconds(200), nullptr);
  reads.clear();
  ReadDoneMarksAsync(gone, 1, 2, absl::Seconds(5),
                     [&](const absl::StatusOr<DoneMarks>& m) { reads.push_back(m); });
  RunUntil(io, [&] { return !reads.empty(); });
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(reads[0].status().message(),
                               absl::StrCat("cannot reach the store at 127.0.0.1:", o.port, ": ")))
      << reads[0].status();
}

TEST(RoundStoreClientTest, KeepsOneClientPerAddressAndReplacesABrokenOne) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  RoundStoreClient round(io.get_executor(), absl::Seconds(5));
  std::vector<absl::Status> flushed;
  round.Flush([&](const absl::Status& s) { flushed.push_back(s); });
  EXPECT_TRUE(flushed.empty());  // Posted, even without a client.
  store::AsyncClient* first = &round.For("127.0.0.1", server.port());
  EXPECT_EQ(&round.For("127.0.0.1", server.port()), first);
  WriteDoneMarkAsync(*first, 2, 1, 0, round.timeout(), nullptr);
  round.Flush([&](const absl::Status& s) { flushed.push_back(s); });
  RunUntil(io, [&] { return flushed.size() == 2; });
  EXPECT_EQ(flushed, (std::vector<absl::Status>(2, absl::OkStatus())));
  // The store restarted on the same port: the broken client is replaced.
  const uint16_t port = server.port();
  server.Stop();
  RunUntil(io, [&] { return !first->status().ok(); });
  EXPECT_EQ(first->status().code(), absl::StatusCode::kUnavailable);
  store::ServerOptions again;
  again.port = port;
  store::Server restarted(again);
  ASSERT_TRUE(restarted.Start().ok());
  store::AsyncClient& second = round.For("127.0.0.1", port);
  EXPECT_TRUE(second.status().ok());
  std::optional<absl::StatusOr<DoneMarks>> read;
  WriteDoneMarkAsync(second, 2, 0, 3, round.timeout(), nullptr);
  ReadDoneMarksAsync(second, 2, 1, round.timeout(),
                     [&](const absl::StatusOr<DoneMarks>& m) { read = m; });
  RunUntil(io, [&] { return read.has_value(); });
  ASSERT_TRUE(read.has_value() && read->ok());
  EXPECT_EQ((*read)->status, (std::vector<std::optional<int>>{3}));
  // Dropped: what is pending is cancelled.
  std::vector<absl::Status> dropped;
  round.For("127.0.0.1", port).Wait({"never"}, absl::Seconds(5), [&](const absl::Status& s) {
    dropped.push_back(s);
  });
  round.Drop();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].code(), absl::StatusCode::kCancelled);
}

// What the agent issued before Flush() is in the store, in order, once Flush() completes: a
// node's last mark is written before the agent exits.
TEST(RoundStoreClientTest, WritesIssuedBeforeFlushAreInTheStoreWhenItCompletes) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  std::vector<absl::Status> flushed;
  {
    RoundStoreClient round(io.get_executor(), absl::Seconds(5));
    for (int i = 0; i < 3; ++i) {
      WriteDoneMarkAsync(round.For("127.0.0.1", server.port()), 0, i, i, round.timeout(), nullptr);
    }
    WriteDoneMarkAsync(round.For("127.0.0.1", server.port()), 0, 1, 7, round.timeout(), nullptr);
    round.Flush([&](const absl::Status& s) { flushed.push_back(s); });
    RunUntil(io, [&] { return !flushed.empty(); });
  }
  ASSERT_EQ(flushed, std::vector<absl::Status>{absl::OkStatus()});
  store::ClientOptions co;
  co.port = server.port();
  auto blocking = store::Client::Connect(co);
  ASSERT_TRUE(blocking.ok());
  auto marks = ReadDoneMarks(**blocking, 0, 3);
  ASSERT_TRUE(marks.ok()) << marks.status();
  EXPECT_EQ(marks->status, (std::vector<std::optional<int>>{0, 7, 2}));  // The later write won.
}

// Dropped before they went out: they never reach the store, and their callbacks say so.
TEST(RoundStoreClientTest, DroppedWritesNeverReachTheStore) {
  store::Server server{store::ServerOptions{}};
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context io;
  RoundStoreClient round(io.get_executor(), absl::Seconds(5));
  std::vector<absl::Status> writes;
  for (int i = 0; i < 3; ++i) {
    WriteDoneMarkAsync(round.For("127.0.0.1", server.port()), 5, i, 0, round.timeout(),
                       [&](const absl::Status& s) { writes.push_back(s); });
  }
  round.Drop();  // Not yet connected: the loop has not run.
  ASSERT_EQ(writes.size(), 3u);
  for (const absl::Status& s : writes) EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  std::vector<absl::Status> flushed;
  round.Flush([&](const absl::Status& s) { flushed.push_back(s); });  // No client: Ok.
  RunUntil(io, [&] { return !flushed.empty(); });
  io.restart();
  io.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(flushed, std::vector<absl::Status>{absl::OkStatus()});
  store::ClientOptions co;
  co.port = server.port();
  auto blocking = store::Client::Connect(co);
  ASSERT_TRUE(blocking.ok());
  auto marks = ReadDoneMarks(**blocking, 5, 3);
  ASSERT_TRUE(marks.ok());
  EXPECT_EQ(marks->status, (std::vector<std::optional<int>>(3, std::nullopt)));
}

TEST(RoundStoreClientTest, AnUnreachableStoreIsNamed) {
  boost::asio::io_context io;
  RoundStoreClient round(io.get_executor(), absl::Milliseconds(300));
  std::vector<absl::Status> results;
  WriteDoneMarkAsync(round.For("127.0.0.1", 1), 0, 0, 0, round.timeout(),
                     [&](const absl::Status& s) { results.push_back(s); });
  round.Flush([&](const absl::Status& s) { results.push_back(s); });
  RunUntil(io, [&] { return results.size() == 2; });
  ASSERT_EQ(results.size(), 2u);
  for (const absl::Status& s : results) {
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StartsWith(s.message(), "cannot reach the store at 127.0.0.1:1: ")) << s;
  }
}

}  // namespace
}  // namespace dgt::agent
