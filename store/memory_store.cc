#include "dgt/store/memory_store.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "store/engine.h"

namespace dgt::store {

class MemoryStore::Impl {
 public:
  explicit Impl(MemoryStoreOptions options) : options_(options) {}

  absl::Duration timeout() const { return options_.timeout; }

  // Runs `fn` on the engine under the lock.
  template <typename Fn>
  auto With(Fn fn) {
    dgt::MutexLock lock(&mu_);
    return fn(engine_);
  }

  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    dgt::MutexLock lock(&mu_);
    auto done = std::make_shared<bool>(false);
    std::optional<Engine::WaitId> id = engine_.Wait(keys, [this, done] {
      *done = true;  // Runs under mu_, inside the mutating call.
      cv_.SignalAll();
    });
    if (!id) return absl::OkStatus();
    while (!*done) {
      if (cv_.WaitWithDeadline(&mu_, deadline) && !*done) {
        engine_.CancelWait(*id);
        return absl::DeadlineExceededError(
            absl::StrCat("memory store: wait timed out after ", absl::FormatDuration(timeout)));
      }
    }
    return absl::OkStatus();
  }

 private:
  MemoryStoreOptions options_;
  dgt::Mutex mu_;
  dgt::CondVar cv_;
  Engine engine_ ABSL_GUARDED_BY(mu_);
};

MemoryStore::MemoryStore(MemoryStoreOptions options) : impl_(std::make_unique<Impl>(options)) {}
MemoryStore::~MemoryStore() = default;

absl::Status MemoryStore::Set(absl::string_view key, absl::string_view value) {
  impl_->With([&](Engine& e) { e.Set(key, value); });
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(absl::string_view key) {
  if (absl::Status s = impl_->Wait({std::string(key)}, impl_->timeout()); !s.ok()) return s;
  return impl_->With([&](Engine& e) -> absl::StatusOr<std::string> {
    const std::string* v = e.Get(key);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat("key '", key, "' was deleted"));
    return *v;
  });
}

absl::StatusOr<int64_t> MemoryStore::Add(absl::string_view key, int64_t delta) {
  return impl_->With([&](Engine& e) { return e.Add(key, delta); });
}

absl::StatusOr<std::string> MemoryStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return impl_->With([&](Engine& e) { return std::string(e.CompareSet(key, expected, desired)); });
}

absl::StatusOr<bool> MemoryStore::Check(const std::vector<std::string>& keys) {
  return impl_->With([&](Engine& e) { return e.Check(keys); });
}

absl::Status MemoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  return impl_->Wait(keys, timeout);
}

absl::StatusOr<bool> MemoryStore::DeleteKey(absl::string_view key) {
  return impl_->With([&](Engine& e) { return e.Delete(key); });
}

absl::StatusOr<int64_t> MemoryStore::NumKeys() {
  return impl_->With([&](Engine& e) { return e.NumKeys(); });
}

absl::Status MemoryStore::Append(absl::string_view key, absl::string_view value) {
  impl_->With([&](Engine& e) { e.Append(key, value); });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemoryStore::MultiGet(
    const std::vector<std::string>& keys) {
  if (absl::Status s = impl_->Wait(keys, impl_->timeout()); !s.ok()) return s;
  return impl_->With([&](Engine& e) {
    std::vector<std::string> values;
    for (const std::string& k : keys) {
      const std::string* v = e.Get(k);
      values.push_back(v ? *v : std::string());
    }
    return values;
  });
}

absl::Status MemoryStore::MultiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  impl_->With([&](Engine& e) {
    for (const auto& [k, v] : items) e.Set(k, v);
  });
  return absl::OkStatus();
}

}  // namespace dgt::store
