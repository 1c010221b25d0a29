// QueuedWriteReactor: each StartWrite and Finish it makes, on a recording fake of the gRPC reactor
// (exact order, one write in flight, when it finishes and with which status), and a burst of
// writes over a real loopback gRPC stream.
#include "server/queued_write_reactor.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "gtest/gtest.h"

namespace dgt::server {
namespace v1 = ::dgt::rendezvous::v1;
namespace {

// Stands in for grpc::ServerBidiReactor: records "write <message>" and "finish <code> <message>".
class RecordingStream {
 public:
  virtual ~RecordingStream() = default;
  virtual void OnWriteDone(bool /*ok*/) {}

  void StartWrite(const std::string* message) { events.push_back("write " + *message); }
  void Finish(const grpc::Status& status) {
    events.push_back(absl::StrCat("finish ", status.error_code(), " ", status.error_message()));
  }

  std::vector<std::string> events;
};

using Reactor = QueuedWriteReactor<std::string, std::string, RecordingStream>;
using Events = std::vector<std::string>;

TEST(QueuedWriteReactorTest, WritesOneAtATimeInOrder) {
  Reactor r;
  r.Send("a");
  r.Send("b");
  r.Send("c");
  EXPECT_EQ(r.events, Events({"write a"}));
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "write b"}));
  r.OnWriteDone(true);
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "write b", "write c"}));
  r.Send("d");
  EXPECT_EQ(r.events, Events({"write a", "write b", "write c", "write d"}));
}

TEST(QueuedWriteReactorTest, EndFinishesAfterTheQueueDrainsAndLaterCallsAreIgnored) {
  Reactor r;
  r.Send("a");
  r.Send("b");
  r.End(grpc::Status(grpc::StatusCode::NOT_FOUND, "gone"));
  r.Send("c");  // Still queued: Finish has not been called yet.
  EXPECT_EQ(r.events, Events({"write a"}));
  r.OnWriteDone(true);
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "write b", "write c"}));
  r.OnWriteDone(true);
  const Events finished = {"write a", "write b", "write c", "finish 5 gone"};
  EXPECT_EQ(r.events, finished);
  r.Send("d");
  r.End(grpc::Status(grpc::StatusCode::INTERNAL, "again"));
  r.Abort(grpc::Status(grpc::StatusCode::ABORTED, "late"));
  EXPECT_EQ(r.events, finished);
}

TEST(QueuedWriteReactorTest, EndWithNothingQueuedFinishesAtOnce) {
  Reactor r;
  r.End();
  EXPECT_EQ(r.events, Events({"finish 0 "}));
}

TEST(QueuedWriteReactorTest, TheFirstEndSetsTheStatus) {
  Reactor r;
  r.Send("a");
  r.End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first"));
  r.End(grpc::Status(grpc::StatusCode::INTERNAL, "second"));
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "finish 3 first"}));
}

TEST(QueuedWriteReactorTest, SendWithEndAfterFinishesOkOnceWritten) {
  Reactor r;
  r.Send("a", /*close=*/true);
  r.End(grpc::Status(grpc::StatusCode::INTERNAL, "ignored"));
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "finish 0 "}));
}

TEST(QueuedWriteReactorTest, AbortDropsTheQueueButTheWriteInFlight) {
  Reactor r;
  r.Send("a");
  r.Send("b");
  r.Send("c");
  r.End(grpc::Status(grpc::StatusCode::NOT_FOUND, "overridden"));
  r.Abort(grpc::Status(grpc::StatusCode::ABORTED, "round conflict"));
  EXPECT_EQ(r.events, Events({"write a"}));
  r.OnWriteDone(true);
  EXPECT_EQ(r.events, Events({"write a", "finish 10 round conflict"}));
}

TEST(QueuedWriteReactorTest, AbortWithNothingInFlightFinishesAtOnce) {
  Reactor r;
  r.Abort(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "run closed"));
  EXPECT_EQ(r.events, Events({"finish 9 run closed"}));
}

TEST(QueuedWriteReactorTest, AFailedWriteDropsTheQueueAndFinishes) {
  Reactor r;
  r.Send("a");
  r.Send("b");
  r.OnWriteDone(false);
  EXPECT_EQ(r.events, Events({"write a", "finish 0 "}));

  Reactor ended;
  ended.Send("a");
  ended.Send("b");
  ended.End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "standby"));
  ended.OnWriteDone(false);
  EXPECT_EQ(ended.events, Events({"write a", "finish 14 standby"}));
}

// Over real gRPC: on the agent's first message the service queues kBurst progress messages at once
// and ends the stream with FAILED_PRECONDITION; the agent gets all of them, in order, then that
// status. gRPC fails a second StartWrite while one is in flight, so the burst also checks that.
constexpr int kBurst = 500;

class BurstReactor final : public QueuedWriteReactor<v1::AgentMessage, v1::ServiceMessage> {
 public:
  BurstReactor() { StartRead(&incoming_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End();
      return;
    }
    for (int i = 0; i < kBurst; ++i) {
      v1::ServiceMessage m;
      m.mutable_progress()->set_joined_nodes(i);
      Send(std::move(m));
    }
    End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "run closed"));
  }

  void OnDone() override { delete this; }

 private:
  v1::AgentMessage incoming_;
};

class BurstService final : public v1::Rendezvous::CallbackService {
  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServiceMessage>* Session(
      grpc::CallbackServerContext* /*context*/) override {
    return new BurstReactor();
  }
};

class QueuedWriteReactorGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Rendezvous::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  BurstService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

TEST_F(QueuedWriteReactorGrpcTest, ABurstArrivesInOrderThenTheEndStatus) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Session(&ctx);
  ASSERT_TRUE(stream->Write(v1::AgentMessage()));
  std::vector<int> got;
  v1::ServiceMessage m;
  while (stream->Read(&m)) got.push_back(m.progress().joined_nodes());
  std::vector<int> want(kBurst);
  for (int i = 0; i < kBurst; ++i) want[i] = i;
  EXPECT_EQ(got, want);
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "run closed");
}

TEST_F(QueuedWriteReactorGrpcTest, TheAgentClosingItsSideEndsTheStreamOk) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Session(&ctx);
  ASSERT_TRUE(stream->WritesDone());
  v1::ServiceMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(status.error_message(), "");
}

}  // namespace
}  // namespace dgt::server
