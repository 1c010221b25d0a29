#include "rendezvous/run_state_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dgt::rendezvous {

const RunRecord* InMemoryRunStateBackend::Find(absl::string_view run_id) const {
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : &it->second.run;
}

Revision InMemoryRunStateBackend::RevisionOf(absl::string_view run_id) const {
  auto it = runs_.find(run_id);
  return it == runs_.end() ? 0 : it->second.revision;
}

void InMemoryRunStateBackend::ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const {
  for (const auto& [id, entry] : runs_) fn(entry.run);
}

absl::StatusOr<RunRecord*> InMemoryRunStateBackend::Create(absl::string_view run_id) {
  auto [it, created] = runs_.try_emplace(std::string(run_id));
  if (!created) {
    return absl::AlreadyExistsError(absl::StrCat("run '", run_id, "' already exists"));
  }
  it->second.run.run_id = std::string(run_id);
  return &it->second.run;
}

RunRecord* InMemoryRunStateBackend::Mutable(absl::string_view run_id) {
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : &it->second.run;
}

absl::StatusOr<Revision> InMemoryRunStateBackend::Commit(absl::string_view run_id) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) {
    return absl::NotFoundError(absl::StrCat("no run '", run_id, "' to commit"));
  }
  it->second.revision = ++revision_;
  Notify(RunEvent{RunEvent::Type::kPut, it->first, it->second.revision});
  return it->second.revision;
}

absl::Status InMemoryRunStateBackend::Delete(absl::string_view run_id) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return absl::NotFoundError(absl::StrCat("no run '", run_id, "'"));
  std::string id = it->first;
  runs_.erase(it);
  Notify(RunEvent{RunEvent::Type::kDelete, std::move(id), ++revision_});
  return absl::OkStatus();
}

absl::StatusOr<Revision> InMemoryRunStateBackend::CompareAndPut(const RunRecord& run,
                                                                Revision expected, LeaseId lease) {
  if (lease != kNoLease && !leases_.contains(lease)) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " does not exist (expired?)"));
  }
  const Revision current = RevisionOf(run.run_id);
  if (current != expected) {
    return absl::AbortedError(
        absl::StrCat("run '", run.run_id, "' is at revision ", current, ", expected ", expected));
  }
  Entry& entry = runs_[run.run_id];
  entry.run = run;
  entry.lease = lease;
  entry.revision = ++revision_;
  Notify(RunEvent{RunEvent::Type::kPut, run.run_id, entry.revision});
  return entry.revision;
}

absl::Status InMemoryRunStateBackend::CompareAndDelete(absl::string_view run_id,
                                                       Revision expected) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return absl::NotFoundError(absl::StrCat("no run '", run_id, "'"));
  if (it->second.revision != expected) {
    return absl::AbortedError(absl::StrCat("run '", run_id, "' is at revision ",
                                           it->second.revision, ", expected ", expected));
  }
  return Delete(run_id);
}

absl::StatusOr<LeaseId> InMemoryRunStateBackend::GrantLease(absl::Duration ttl, absl::Time now) {
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ttl must be > 0, got ", absl::FormatDuration(ttl)));
  }
  LeaseId id = next_lease_++;
  leases_[id] = Lease{ttl, now + ttl};
  return id;
}

absl::Status InMemoryRunStateBackend::KeepAlive(LeaseId lease, absl::Time now) {
  auto it = leases_.find(lease);
  if (it == leases_.end()) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " does not exist (expired?)"));
  }
  it->second.expires = now + it->second.ttl;
  return absl::OkStatus();
}

absl::Status InMemoryRunStateBackend::RevokeLease(LeaseId lease) {
  if (!leases_.contains(lease)) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " does not exist (expired?)"));
  }
  EndLease(lease);
  return absl::OkStatus();
}

void InMemoryRunStateBackend::ExpireLeases(absl::Time now) {
  std::vector<LeaseId> ended;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires <= now) ended.push_back(id);
  }
  std::sort(ended.begin(), ended.end());  // Deterministic event order.
  for (LeaseId id : ended) EndLease(id);
}

void InMemoryRunStateBackend::EndLease(LeaseId lease) {
  leases_.erase(lease);
  std::vector<std::string> attached;
  for (const auto& [id, entry] : runs_) {
    if (entry.lease == lease) attached.push_back(id);
  }
  for (const std::string& id : attached) (void)Delete(id);
}

WatchId InMemoryRunStateBackend::Watch(std::function<void(const RunEvent&)> fn) {
  WatchId id = next_watch_++;
  watches_.emplace(id, std::move(fn));
  return id;
}

void InMemoryRunStateBackend::CancelWatch(WatchId id) { watches_.erase(id); }

void InMemoryRunStateBackend::Notify(const RunEvent& event) {
  for (const auto& [id, fn] : watches_) fn(event);
}

}  // namespace dgt::rendezvous
