// ForwardingRunStateBackend: a RunStateBackend that passes every call to an
// InMemoryRunStateBackend of its own. Test fakes derive from it and override only the calls they
// change (a commit that fails, one that waits for the test); DiscardStages and Reload keep
// RunStateBackend's defaults.
//
// Thread-compatible, as InMemoryRunStateBackend.
#ifndef DGT_TESTS_TESTUTIL_FORWARDING_RUN_STATE_BACKEND_H_
#define DGT_TESTS_TESTUTIL_FORWARDING_RUN_STATE_BACKEND_H_

#include <functional>
#include <utility>

#include "rendezvous/run_state_backend.h"

namespace dgt::rendezvous {

class ForwardingRunStateBackend : public RunStateBackend {
 public:
  const RunRecord* Find(absl::string_view id) const override { return mem_.Find(id); }
  Revision RevisionOf(absl::string_view id) const override { return mem_.RevisionOf(id); }
  void ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const override { mem_.ForEach(fn); }
  size_t size() const override { return mem_.size(); }
  absl::StatusOr<RunRecord*> Create(absl::string_view id) override { return mem_.Create(id); }
  RunRecord* Mutable(absl::string_view id) override { return mem_.Mutable(id); }
  absl::StatusOr<Revision> Commit(absl::string_view id) override { return mem_.Commit(id); }
  absl::Status Delete(absl::string_view id) override { return mem_.Delete(id); }
  absl::StatusOr<Revision> CompareAndPut(const RunRecord& run, Revision expected,
                                         LeaseId lease) override {
    return mem_.CompareAndPut(run, expected, lease);
  }
  absl::Status CompareAndDelete(absl::string_view id, Revision expected) override {
    return mem_.CompareAndDelete(id, expected);
  }
  absl::StatusOr<LeaseId> GrantLease(absl::Duration ttl, absl::Time now) override {
    return mem_.GrantLease(ttl, now);
  }
  absl::Status KeepAlive(LeaseId lease, absl::Time now) override {
    return mem_.KeepAlive(lease, now);
  }
  absl::Status RevokeLease(LeaseId lease) override { return mem_.RevokeLease(lease); }
  void ExpireLeases(absl::Time now) override { mem_.ExpireLeases(now); }
  WatchId Watch(std::function<void(const RunEvent&)> fn) override {
    return mem_.Watch(std::move(fn));
  }
  void CancelWatch(WatchId id) override { mem_.CancelWatch(id); }

 private:
  InMemoryRunStateBackend mem_;
};

}  // namespace dgt::rendezvous

#endif  // DGT_TESTS_TESTUTIL_FORWARDING_RUN_STATE_BACKEND_H_
