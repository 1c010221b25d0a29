#include "agent/coord/round_marks.h"

#include <chrono>
#include <utility>

#include "common/logging.h"

namespace dgt::agent {

RoundMarks::RoundMarks(boost::asio::io_context& io, absl::Duration timeout)
    : client_(io.get_executor(), timeout), poll_timer_(io), flush_timer_(io) {}

void RoundMarks::MarkDone(const Round& r, int exit_status) {
  if (r.round < 0 || r.master_port <= 0) return;
  WriteDoneMarkAsync(client_.For(r.master_addr, r.master_port), r.round, r.node_rank, exit_status,
                     client_.timeout(), [](const absl::Status& s) {
                       if (!s.ok()) {
                         spdlog::debug("dgt-run: cannot write the done mark: {}", s.message());
                       }
                     });
}

void RoundMarks::MarkSeen(const Round& r) {
  WriteSeenMarkAsync(client_.For(r.master_addr, r.master_port), r.round, r.node_rank,
                     client_.timeout(), nullptr);
}

void RoundMarks::Poll(const Round& r, std::function<void()> done) {
  if (polling_ || r.round < 0 || r.master_port <= 0) return;
  polling_ = true;
  ReadDoneMarksAsync(
      client_.For(r.master_addr, r.master_port), r.round, r.node_count, client_.timeout(),
      [this, done = std::move(done)](const absl::StatusOr<DoneMarks>& marks) {
        polling_ = false;
        if (marks.ok()) {
          last_ = *marks;
        } else {
          spdlog::debug("dgt-run: cannot read the done marks: {}", marks.status().message());
        }
        done();
      });
}

void RoundMarks::PollLater(std::function<void()> poll) {
  poll_timer_.expires_after(std::chrono::milliseconds(250));
  poll_timer_.async_wait([poll = std::move(poll)](boost::system::error_code ec) {
    if (!ec) poll();
  });
}

std::optional<MarksView> RoundMarks::View(int node_rank) const {
  if (!last_) return std::nullopt;
  MarksView view;
  view.all_done = last_->AllDone();
  view.all_succeeded = last_->AllSucceeded();
  view.seen_by_others = last_->AllSeenExcept(node_rank);
  view.first_worker_failure = last_->FirstWorkerFailure();
  if (view.first_worker_failure >= 0) {
    view.first_worker_failure_status = *last_->status[view.first_worker_failure];
  }
  return view;
}

std::optional<MarkedFailure> RoundMarks::FailureWhenAllDone() const {
  if (!last_ || !last_->AllDone() || last_->FirstWorkerFailure() < 0) return std::nullopt;
  const int failed = last_->FirstWorkerFailure();
  return MarkedFailure{failed, *last_->status[failed]};
}

void RoundMarks::FlushThen(const std::function<void()>& stop) {
  // Connecting (1 s) and writing (1 s) are bounded by the client; this bounds the whole.
  flush_timer_.expires_after(std::chrono::seconds(3));
  flush_timer_.async_wait([stop](boost::system::error_code ec) {
    if (!ec) stop();
  });
  client_.Flush([stop](const absl::Status& s) {
    if (!s.ok()) spdlog::debug("dgt-run: cannot write the last done mark: {}", s.message());
    stop();
  });
}

}  // namespace dgt::agent
