// EtcdRunStateBackend's view of the runs (rendezvous/etcd_run_state_backend.h): the local copy
// every read is served from, loaded by one Range at Open, kept current by one Watch of the prefix
// and by this replica's own writes, re-read when the watch ended. The fenced writes are in
// etcd_run_state_backend.cc.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rendezvous/etcd_run_state_backend.h"
#include "spdlog/spdlog.h"

namespace dgt::rendezvous {
namespace {

// A key under the prefix, split: the run id and the node bucket (-1: the run's own key).
// False for a bucket suffix that is not a number.
bool SplitKey(absl::string_view rest, std::string* run_id, int* bucket) {
  const size_t sep = rest.find(kNodeBucketSeparator);
  if (sep == absl::string_view::npos) {
    *run_id = std::string(rest);
    *bucket = -1;
    return true;
  }
  *run_id = std::string(rest.substr(0, sep));
  return absl::SimpleAtoi(rest.substr(sep + 1), bucket) && *bucket >= 0 &&
         *bucket < kMaxNodeBuckets;
}

// The keys of each run in a read of the prefix.
struct RunKeys {
  const etcd::KeyValue* run = nullptr;
  std::vector<const etcd::KeyValue*> buckets;
};

std::map<std::string, RunKeys, std::less<>> GroupByRun(const std::vector<etcd::KeyValue>& kvs,
                                                       size_t prefix_size) {
  std::map<std::string, RunKeys, std::less<>> runs;
  for (const etcd::KeyValue& kv : kvs) {
    std::string run_id;
    int bucket = -1;
    if (!SplitKey(absl::string_view(kv.key).substr(prefix_size), &run_id, &bucket)) {
      spdlog::warn("etcd backend: skipping key {}: not a run or node bucket key", kv.key);
      continue;
    }
    RunKeys& keys = runs[run_id];
    if (bucket < 0) {
      keys.run = &kv;
    } else {
      keys.buckets.push_back(&kv);
    }
  }
  return runs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdRunStateBackend>> EtcdRunStateBackend::Open(Options options) {
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("etcd backend: the key prefix must not be empty");
  }
  std::unique_ptr<EtcdRunStateBackend> backend(new EtcdRunStateBackend(std::move(options)));
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Create(backend->options_.client);
  if (!client.ok()) return client.status();
  backend->client_ = *std::move(client);
  absl::StatusOr<etcd::RangeResult> all = backend->client_->GetPrefix(backend->options_.prefix);
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrCat("etcd backend: reading the runs under '",
                                     backend->options_.prefix, "': ", all.status().message()));
  }
  {
    MutexLock lock(&backend->mu_);
    backend->known_revision_ = all->revision;
    for (const auto& [id, keys] : GroupByRun(all->kvs, backend->options_.prefix.size())) {
      if (keys.run != nullptr) backend->ApplyRead(id, keys.run, keys.buckets, all->revision);
    }
  }
  absl::Status watching = backend->StartWatch(all->revision + 1);
  if (!watching.ok()) return watching;
  return backend;
}

absl::Status EtcdRunStateBackend::StartWatch(Revision revision) {
  absl::StatusOr<std::unique_ptr<etcd::Watcher>> watcher = client_->Watch(
      options_.prefix, /*prefix=*/true, revision,
      [this](const std::vector<etcd::Event>& events) { OnWatchEvents(events); },
      [this](const absl::Status& error) {
        spdlog::error("etcd backend: the watch of '{}' ended: {}; the next write re-reads the runs",
                      options_.prefix, error.ToString());
        watch_ended_.store(true);
      });
  if (!watcher.ok()) return watcher.status();
  watcher_ = *std::move(watcher);
  return absl::OkStatus();
}

absl::Status EtcdRunStateBackend::Resync() {
  watcher_.reset();  // Its thread has ended (terminal error); joins it.
  absl::StatusOr<etcd::RangeResult> all = client_->GetPrefix(options_.prefix);
  if (!all.ok()) return all.status();
  std::vector<RunEvent> deliver;
  {
    MutexLock lock(&mu_);
    std::map<std::string, RunKeys, std::less<>> read = GroupByRun(all->kvs, options_.prefix.size());
    std::vector<std::string> gone;
    for (const auto& [id, entry] : view_) {
      auto r = read.find(id);
      if ((r == read.end() || r->second.run == nullptr) && entry.revision < all->revision) {
        gone.push_back(id);
      }
    }
    for (const std::string& id : gone) {
      ApplyRead(id, nullptr, {}, all->revision);
      deliver.push_back(RunEvent{RunEvent::Type::kDelete, id, all->revision});
    }
    for (const auto& [id, keys] : read) {
      if (keys.run == nullptr) continue;
      auto it = view_.find(id);
      if (it != view_.end() && it->second.revision >= keys.run->mod_revision) continue;
      ApplyRead(id, keys.run, keys.buckets, all->revision);
      deliver.push_back(RunEvent{RunEvent::Type::kPut, id, keys.run->mod_revision});
    }
    known_revision_ = std::max(known_revision_, all->revision);
    ++resyncs_;
  }
  std::sort(deliver.begin(), deliver.end(),
            [](const RunEvent& a, const RunEvent& b) { return a.revision < b.revision; });
  {
    MutexLock lock(&watch_mu_);
    for (const RunEvent& event : deliver) {
      for (const auto& [id, watch] : watches_) {
        if (event.revision > watch.after) watch.fn(event);
      }
    }
  }
  watch_ended_.store(false);
  return StartWatch(all->revision + 1);
}

int64_t EtcdRunStateBackend::own_writes_from_watch() const {
  MutexLock lock(&mu_);
  return own_writes_from_watch_;
}

int64_t EtcdRunStateBackend::resyncs() const {
  MutexLock lock(&mu_);
  return resyncs_;
}

void EtcdRunStateBackend::ApplyRead(const std::string& run_id, const etcd::KeyValue* kv,
                                    const std::vector<const etcd::KeyValue*>& buckets,
                                    Revision read_revision) {
  auto it = view_.find(run_id);
  if (kv == nullptr) {
    if (it != view_.end() && it->second.revision < read_revision) {
      retired_.push_back(std::move(it->second.run));
      view_.erase(it);
      floors_[run_id] = std::max(floors_[run_id], read_revision);
    }
    return;
  }
  if (it != view_.end() && it->second.revision >= kv->mod_revision) return;
  int bucket_count = 0;
  absl::StatusOr<RunRecord> run = DecodeRunRecord(kv->value, nullptr, &bucket_count);
  for (const etcd::KeyValue* b : buckets) {
    if (!run.ok()) break;
    absl::StatusOr<std::vector<NodeRecord>> nodes = DecodeNodeBucket(b->value);
    if (!nodes.ok()) {
      run = absl::Status(nodes.status().code(),
                         absl::StrCat("bucket key ", b->key, ": ", nodes.status().message()));
      break;
    }
    for (NodeRecord& n : *nodes) {
      std::string id = n.node_id;
      run->nodes.insert_or_assign(std::move(id), std::move(n));
    }
  }
  if (!run.ok()) {
    spdlog::warn("etcd backend: skipping run key {} (revision {}): {}", kv->key, kv->mod_revision,
                 run.status().ToString());
    return;
  }
  if (it != view_.end()) retired_.push_back(std::move(it->second.run));
  view_[run_id] = Entry{std::make_shared<const RunRecord>(*std::move(run)), kv->mod_revision,
                        kv->lease, bucket_count};
  Revision& floor = floors_[run_id];
  floor = std::max(floor, kv->mod_revision);
}

void EtcdRunStateBackend::ApplyLocal(const std::string& run_id,
                                     std::shared_ptr<const RunRecord> run, Revision revision,
                                     LeaseId lease, int buckets) {
  MutexLock lock(&mu_);
  known_revision_ = std::max(known_revision_, revision);
  Revision& floor = floors_[run_id];
  floor = std::max(floor, revision);
  auto it = view_.find(run_id);
  if (it != view_.end()) {
    if (it->second.revision > revision) return;  // The watch already applied a later change.
    retired_.push_back(std::move(it->second.run));
    if (run == nullptr) {
      view_.erase(it);
      return;
    }
  }
  if (run != nullptr) view_[run_id] = Entry{std::move(run), revision, lease, buckets};
}

void EtcdRunStateBackend::OnWatchEvents(const std::vector<etcd::Event>& events) {
  // One write of a run (its run key and the node buckets it changed, one revision) is one group,
  // applied together and delivered as one RunEvent.
  struct Group {
    std::string run_id;
    Revision revision = 0;
    const etcd::Event* run_event = nullptr;
    std::vector<std::pair<int, const etcd::Event*>> buckets;
  };
  std::vector<Group> groups;
  std::map<std::pair<std::string, Revision>, size_t> index;
  for (const etcd::Event& e : events) {
    if (!absl::StartsWith(e.kv.key, options_.prefix)) continue;
    std::string run_id;
    int bucket = -1;
    if (!SplitKey(absl::string_view(e.kv.key).substr(options_.prefix.size()), &run_id, &bucket)) {
      continue;
    }
    auto [it, added] = index.try_emplace({run_id, e.kv.mod_revision}, groups.size());
    if (added) groups.push_back(Group{std::move(run_id), e.kv.mod_revision, nullptr, {}});
    Group& g = groups[it->second];
    if (bucket < 0) {
      g.run_event = &e;
    } else {
      g.buckets.emplace_back(bucket, &e);
    }
  }
  std::vector<RunEvent> deliver;
  {
    MutexLock lock(&mu_);
    for (Group& g : groups) {
      const std::string& run_id = g.run_id;
      const Revision revision = g.revision;
      known_revision_ = std::max(known_revision_, revision);
      if (g.run_event == nullptr) continue;  // Never alone: each write puts or deletes the run key.
      const bool deleted = g.run_event->type == etcd::Event::Type::kDelete;
      auto floor = floors_.find(run_id);
      const bool stale = floor != floors_.end() && revision <= floor->second;
      if (floor != floors_.end() && revision >= floor->second) floors_.erase(floor);
      if (!stale) {
        auto it = view_.find(run_id);
        if (deleted) {
          if (it != view_.end()) {
            retired_.push_back(std::move(it->second.run));
            view_.erase(it);
          }
        } else {
          int bucket_count = 0;
          std::string writer;
          absl::StatusOr<RunRecord> run =
              DecodeRunRecord(g.run_event->kv.value, &writer, &bucket_count);
          if (auto mine = in_flight_.find(run_id);
              run.ok() && mine != in_flight_.end() && mine->second.writer == writer) {
            // This replica's own put, before its Txn answered: the record written is the run.
            if (it != view_.end()) retired_.push_back(std::move(it->second.run));
            view_[run_id] = Entry{mine->second.run, revision, g.run_event->kv.lease, bucket_count};
            ++own_writes_from_watch_;
            deliver.push_back(RunEvent{RunEvent::Type::kPut, run_id, revision});
            continue;
          }
          if (run.ok() && it != view_.end()) run->nodes = it->second.run->nodes;
          // The changed buckets' nodes are replaced by what each holds now (none once deleted):
          // one pass over the nodes, not one per bucket.
          if (run.ok() && bucket_count > 0) {
            std::vector<bool> replaced(bucket_count, false);
            for (const auto& [bucket, e] : g.buckets) {
              if (bucket >= 0 && bucket < bucket_count) replaced[bucket] = true;
            }
            std::erase_if(run->nodes, [&](const auto& node) {
              return replaced[NodeBucket(node.first, bucket_count)];
            });
          }
          for (const auto& [bucket, e] : g.buckets) {
            if (!run.ok()) break;
            if (e->type == etcd::Event::Type::kDelete) continue;
            absl::StatusOr<std::vector<NodeRecord>> nodes = DecodeNodeBucket(e->kv.value);
            if (!nodes.ok()) {
              run = nodes.status();
              break;
            }
            for (NodeRecord& n : *nodes) {
              std::string id = n.node_id;
              run->nodes.insert_or_assign(std::move(id), std::move(n));
            }
          }
          if (run.ok()) {
            if (it != view_.end()) retired_.push_back(std::move(it->second.run));
            view_[run_id] = Entry{std::make_shared<const RunRecord>(*std::move(run)), revision,
                                  g.run_event->kv.lease, bucket_count};
          } else {
            spdlog::warn("etcd backend: skipping run key {} (revision {}): {}", g.run_event->kv.key,
                         revision, run.status().ToString());
          }
        }
      }
      deliver.push_back(
          RunEvent{deleted ? RunEvent::Type::kDelete : RunEvent::Type::kPut, run_id, revision});
    }
  }
  MutexLock lock(&watch_mu_);
  for (const RunEvent& event : deliver) {
    for (const auto& [id, watch] : watches_) {
      if (event.revision > watch.after) watch.fn(event);
    }
  }
}

void EtcdRunStateBackend::ReleaseRetired() {
  {
    MutexLock lock(&mu_);
    retired_.clear();
  }
  if (watch_ended_.load()) {
    absl::Status resynced = Resync();
    if (!resynced.ok()) {
      watch_ended_.store(true);
      spdlog::warn(
          "etcd backend: re-reading the runs under '{}' after the watch ended: {}; "
          "trying again at the next write",
          options_.prefix, resynced.ToString());
    }
  }
}

const RunRecord* EtcdRunStateBackend::Find(absl::string_view run_id) const {
  if (auto stage = stages_.find(run_id); stage != stages_.end()) return &stage->second.run;
  MutexLock lock(&mu_);
  auto it = view_.find(run_id);
  return it == view_.end() ? nullptr : it->second.run.get();
}

Revision EtcdRunStateBackend::RevisionOf(absl::string_view run_id) const {
  MutexLock lock(&mu_);
  auto it = view_.find(run_id);
  return it == view_.end() ? 0 : it->second.revision;
}

void EtcdRunStateBackend::ForEach(absl::FunctionRef<void(const RunRecord&)> fn) const {
  // The records, not the map: fn runs without the lock (it may call Find). The shared_ptrs keep
  // them alive whatever the watch does meanwhile.
  std::vector<std::pair<std::string, std::shared_ptr<const RunRecord>>> runs;
  {
    MutexLock lock(&mu_);
    runs.reserve(view_.size());
    for (const auto& [id, entry] : view_) runs.emplace_back(id, entry.run);
  }
  auto stage = stages_.begin();
  for (const auto& [id, run] : runs) {
    for (; stage != stages_.end() && stage->first < id; ++stage) fn(stage->second.run);
    if (stage != stages_.end() && stage->first == id) {
      fn(stage->second.run);
      ++stage;
    } else {
      fn(*run);
    }
  }
  for (; stage != stages_.end(); ++stage) fn(stage->second.run);
}

size_t EtcdRunStateBackend::size() const {
  MutexLock lock(&mu_);
  size_t n = view_.size();
  for (const auto& [id, stage] : stages_) {
    if (!view_.contains(id)) ++n;
  }
  return n;
}

absl::Status EtcdRunStateBackend::Reload() {
  DiscardStages();
  {
    MutexLock lock(&mu_);
    retired_.clear();
  }
  absl::Status reloaded = Resync();
  // Resync dropped the watch before reading: without a read there is no watch, and the next
  // write tries again.
  if (!reloaded.ok()) watch_ended_.store(true);
  return reloaded;
}

WatchId EtcdRunStateBackend::Watch(std::function<void(const RunEvent&)> fn) {
  Revision after = 0;
  {
    MutexLock lock(&mu_);
    after = known_revision_;
  }
  MutexLock lock(&watch_mu_);
  const WatchId id = next_watch_++;
  watches_.emplace(id, WatchEntry{std::move(fn), after});
  return id;
}

void EtcdRunStateBackend::CancelWatch(WatchId id) {
  MutexLock lock(&watch_mu_);
  watches_.erase(id);
}

}  // namespace dgt::rendezvous
