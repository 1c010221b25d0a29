// An in-test dgt.jobs.v1.Jobs service: only Register. It records every NodeMessage a daemon sends
// (and "<end>" when a stream ends), answers each NodeHello with Registered, and sends the
// ControlMessages a test queues. Waits have deadlines; nothing blocks a test forever.
#ifndef DGT_TESTS_DAEMON_FAKE_JOBS_SERVICE_H_
#define DGT_TESTS_DAEMON_FAKE_JOBS_SERVICE_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "dgt/jobs/v1/jobs.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "jobs/job_state.h"

namespace dgt::daemon::testing {

class FakeJobsService final : public dgt::jobs::v1::Jobs::Service {
 public:
  using NodeMessage = dgt::jobs::v1::NodeMessage;
  using ControlMessage = dgt::jobs::v1::ControlMessage;

  // Starts a server on 127.0.0.1 on a free port.
  FakeJobsService() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeJobsService() override { Shutdown(); }

  void Shutdown() {
    {
      dgt::MutexLock lock(&mu_);
      shutdown_ = true;
      cv_.SignalAll();
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_.reset();
    }
  }

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

  // Every Register from now on is refused with `status` (as a standby replica or a service
  // that knows the node already would).
  void RefuseWith(grpc::Status status) {
    dgt::MutexLock lock(&mu_);
    refuse_ = std::move(status);
    refuse_set_ = true;
  }
  // Registers again from now on.
  void Accept() {
    dgt::MutexLock lock(&mu_);
    refuse_set_ = false;
  }
  int refused() {
    dgt::MutexLock lock(&mu_);
    return refused_;
  }

  grpc::Status Register(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<ControlMessage, NodeMessage>* stream) override {
    {
      dgt::MutexLock lock(&mu_);
      if (refuse_set_) {
        ++refused_;
        return refuse_;
      }
    }
    bool reading = true;
    std::thread reader([&] {
      NodeMessage m;
      while (stream->Read(&m)) {
        dgt::MutexLock lock(&mu_);
        received_.push_back(m);
        if (m.has_hello()) {
          ControlMessage reply;
          reply.mutable_registered()->set_node_name(m.hello().node_name());
          outbox_.push_back(reply);
        }
        cv_.SignalAll();
      }
      dgt::MutexLock lock(&mu_);
      received_.push_back(NodeMessage());  // No kind: the stream's end ("<end>").
      reading = false;
      cv_.SignalAll();
    });
    for (;;) {
      ControlMessage out;
      {
        dgt::MutexLock lock(&mu_);
        if (outbox_.empty() && reading && !shutdown_) {
          cv_.WaitWithDeadline(&mu_, absl::Now() + absl::Milliseconds(100));
        }
        if (!reading || shutdown_) break;
        if (context->IsCancelled()) break;
        if (outbox_.empty()) continue;
        out = outbox_.front();
        outbox_.pop_front();
      }
      stream->Write(out);
    }
    reader.join();
    return grpc::Status::OK;
  }

  void Send(const ControlMessage& m) {
    dgt::MutexLock lock(&mu_);
    outbox_.push_back(m);
    cv_.SignalAll();
  }

  // Waits until `pred` holds for the messages received so far; false at the timeout.
  bool WaitFor(const std::function<bool(const std::vector<NodeMessage>&)>& pred,
               absl::Duration timeout) {
    dgt::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + timeout;
    while (!pred(received_)) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return pred(received_);
    }
    return true;
  }

  std::vector<NodeMessage> received() {
    dgt::MutexLock lock(&mu_);
    return received_;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  dgt::Mutex mu_;
  dgt::CondVar cv_;  // Signalled on every change of the fields below.
  std::vector<NodeMessage> received_ ABSL_GUARDED_BY(mu_);
  std::deque<ControlMessage> outbox_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool refuse_set_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status refuse_ ABSL_GUARDED_BY(mu_);
  int refused_ ABSL_GUARDED_BY(mu_) = 0;
};

// One line per message, for exact comparisons: "hello node-a", "update job-1 started 0",
// "log 7 0 <data>", "draining", "health ok", "health unhealthy: <reason>", "<end>".
inline std::string Describe(const dgt::jobs::v1::NodeMessage& m) {
  if (m.has_hello()) return "hello " + m.hello().node_name();
  if (m.has_draining()) return "draining";
  if (m.has_health()) {
    return m.health().unhealthy() ? "health unhealthy: " + m.health().health_reason() : "health ok";
  }
  if (m.has_log()) {
    return "log " + std::to_string(m.log().request_id()) + " " + std::to_string(m.log().code());
  }
  if (!m.has_update()) return "<end>";
  return "update " + m.update().job_id() + " " +
         std::string(dgt::jobs::JobEventName(m.update().event())) + " " +
         std::to_string(m.update().exit_code());
}

inline std::vector<std::string> DescribeAll(const std::vector<dgt::jobs::v1::NodeMessage>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) out.push_back(Describe(m));
  return out;
}

}  // namespace dgt::daemon::testing

#endif  // DGT_TESTS_DAEMON_FAKE_JOBS_SERVICE_H_
