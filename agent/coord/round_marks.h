// RoundMarks: this node's done marks in the round's store (coord/done_marks.h), on the agent's
// event loop: writing its own done and seen marks, reading every node's (one read at a time,
// again 250 ms later when asked), and, before the agent exits, flushing what it wrote. What the
// marks mean is NodeLifecycle::OnMarks's decision; View() is what it weighs.
//
// Thread-compatible: used from the agent's event loop only.
#ifndef DGT_AGENT_COORD_ROUND_MARKS_H_
#define DGT_AGENT_COORD_ROUND_MARKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "agent/coord/done_marks.h"
#include "agent/lifecycle/node_lifecycle.h"
#include "boost/asio.hpp"

namespace dgt::agent {

class RoundMarks {
 public:
  // The round whose store holds the marks.
  struct Round {
    int64_t round = -1;  // -1: no round yet (nothing is written or read).
    int node_rank = 0;
    int node_count = 1;
    std::string master_addr;  // The round's store.
    int master_port = 0;      // 0: none.
  };

  // `timeout` bounds connecting and each request.
  RoundMarks(boost::asio::io_context& io, absl::Duration timeout);

  // Writes this node's done mark (`exit_status`) into `r`'s store; a failure is logged (debug).
  void MarkDone(const Round& r, int exit_status);
  // Writes this node's seen mark (it learned the outcome from the marks).
  void MarkSeen(const Round& r);
  // Reads every node's marks of `r` unless a read is in flight; `done` runs when it completes
  // (last() holds the marks read last; a failed read keeps the earlier ones).
  void Poll(const Round& r, std::function<void()> done);
  // `poll` in 250 ms.
  void PollLater(std::function<void()> poll);
  void CancelPollLater() { poll_timer_.cancel(); }
  // The marks read last, if any.
  const std::optional<DoneMarks>& last() const { return last_; }
  // The last marks as NodeLifecycle::OnMarks weighs them, for node `node_rank`.
  std::optional<MarksView> View(int node_rank) const;
  // The first failed node of the last marks when every node is done (OnReconnectWindowOver).
  std::optional<MarkedFailure> FailureWhenAllDone() const;
  // Forgets the client: what is pending completes with Cancelled.
  void Drop() { client_.Drop(); }
  // `stop` once what was written went out, or 3 s from now if that is sooner; the later of the
  // two calls it again, so `stop` must be idempotent.
  void FlushThen(const std::function<void()>& stop);
  // Ends FlushThen's bound (the agent stops).
  void CancelFlush() { flush_timer_.cancel(); }

 private:
  RoundStoreClient client_;
  boost::asio::steady_timer poll_timer_;
  boost::asio::steady_timer flush_timer_;  // Bounds the flush.
  bool polling_ = false;
  std::optional<DoneMarks> last_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_COORD_ROUND_MARKS_H_
