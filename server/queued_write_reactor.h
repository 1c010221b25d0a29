// QueuedWriteReactor: a gRPC server bidi-stream reactor whose writes are queued and sent one at a
// time (gRPC's callback API allows one StartWrite in flight per stream), and which calls Finish
// once, after the queue has drained. The long streams of dgt-rendezvous derive from it: the
// dgt.rendezvous.v1 Session streams (RendezvousService::SessionReactor) and the dgt.jobs.v1
// Register streams (JobsService::NodeReactor). A derived reactor implements the read side
// (OnReadDone), OnCancel and OnDone itself; OnWriteDone is this class's.
//
// Thread-safe: Send, End and Abort may be called from any thread, also from within this stream's
// own callbacks. None of them blocks on the network.
//
// RejectReactor: a stream refused at once with a status (no token, a standby), for either service.
#ifndef DGT_SERVER_QUEUED_WRITE_REACTOR_H_
#define DGT_SERVER_QUEUED_WRITE_REACTOR_H_

#include <list>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"

namespace dgt::server {

// `Base` is the gRPC reactor; tests put a fake with the same StartWrite / Finish / OnWriteDone in
// its place, to see each call the stream makes.
template <typename Request, typename Response,
          typename Base = grpc::ServerBidiReactor<Request, Response>>
class QueuedWriteReactor : public Base {
 public:
  // Queues `message` after those queued before it; with `close`, as End(OK) right after it.
  // Ignored once Finish has been called (the stream is ending: nobody would read it).
  void Send(Response message, bool close = false) {
    dgt::MutexLock lock(&mu_);
    if (finish_requested_) return;
    queue_.push_back(std::move(message));
    if (close) EndLocked(grpc::Status::OK);
    MaybeWriteLocked();
  }

  // Finishes the stream with `status` once the queued writes are done. The first End (or Send
  // with `close`) sets the status; later ones change nothing. Abort still may.
  void End(grpc::Status status = grpc::Status::OK) {
    dgt::MutexLock lock(&mu_);
    EndLocked(std::move(status));
    MaybeWriteLocked();
  }

  // Drops what is queued (but the write in flight, which gRPC cannot take back) and finishes the
  // stream with `status` as soon as that write is done. Overrides an earlier End's status; ignored
  // once Finish has been called.
  void Abort(grpc::Status status) {
    dgt::MutexLock lock(&mu_);
    if (finish_requested_) return;
    while (queue_.size() > (writing_ ? 1U : 0U)) queue_.pop_back();
    ending_ = true;
    end_status_ = std::move(status);
    MaybeWriteLocked();
  }

  // A failed write means the stream is broken: the rest of the queue is dropped and the stream
  // finishes (with the status already set, OK when none was).
  void OnWriteDone(bool ok) final {
    dgt::MutexLock lock(&mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {
      queue_.clear();
      ending_ = true;
    }
    MaybeWriteLocked();
  }

 private:
  void EndLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = std::move(status);
  }

  // Starts the next write, or finishes the stream when nothing is left and it is ending.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finish_requested_) return;
    if (!queue_.empty()) {
      writing_ = true;
      this->StartWrite(&queue_.front());
      return;
    }
    if (ending_) {
      finish_requested_ = true;
      this->Finish(end_status_);
    }
  }

  dgt::Mutex mu_;
  // A list, not a deque: an empty std::deque still holds a 512-byte block, 5 MB per 10,000
  // sessions that mostly have nothing queued. Its front is the write in flight while writing_.
  std::list<Response> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
};

// Ends a bidi stream at once with `status` and deletes itself when gRPC is done with it.
template <typename Request, typename Response>
class RejectReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit RejectReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace dgt::server

#endif  // DGT_SERVER_QUEUED_WRITE_REACTOR_H_
