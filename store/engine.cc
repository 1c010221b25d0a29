#include "store/engine.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dgt::store {

void Engine::Set(absl::string_view key, absl::string_view value) {
  // assign() reuses the stored string's capacity: a SET that replaces a value allocates nothing.
  auto it = values_.try_emplace(key).first;
  it->second.assign(value.data(), value.size());
  WakeWaiters(key);
}

const std::string* Engine::Get(absl::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> Engine::Add(absl::string_view key, int64_t delta) {
  auto [it, inserted] = values_.try_emplace(key);
  int64_t current = 0;
  if (!inserted && !absl::SimpleAtoi(it->second, &current)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ADD on key '", key, "' whose value is not a decimal integer"));
  }
  // Wrap like the two's-complement add torch performs, without signed-overflow UB.
  int64_t sum = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
  char digits[24];  // "-9223372036854775808" is 20 characters.
  char* end = std::to_chars(digits, digits + sizeof digits, sum).ptr;
  it->second.assign(digits, static_cast<size_t>(end - digits));
  WakeWaiters(key);
  return sum;
}

absl::string_view Engine::CompareSet(absl::string_view key, absl::string_view expected,
                                     absl::string_view desired) {
  auto it = values_.find(key);
  if (it == values_.end()) {
    if (!expected.empty()) return expected;
    values_.try_emplace(key, desired.data(), desired.size());
  } else if (it->second == expected) {
    it->second.assign(desired.data(), desired.size());
  }
  // torch 2.13 wakes the key's waiters whether or not the value changed (only BARRIER waits can
  // be registered on a present key). It also wakes them on a missing key with a non-empty
  // `expected`, which answers a WAIT for a key that does not exist; dgt does not copy that.
  WakeWaiters(key);
  // Looked up again: a wake-up callback may have changed the map.
  it = values_.find(key);
  return it == values_.end() ? absl::string_view() : absl::string_view(it->second);
}

void Engine::Append(absl::string_view key, absl::string_view value) {
  auto it = values_.try_emplace(key).first;
  it->second.append(value.data(), value.size());
  WakeWaiters(key);
}

bool Engine::Present(absl::string_view key) const {
  if (values_.contains(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool Engine::Check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return Present(k); });
}

int64_t Engine::NumKeys() const { return static_cast<int64_t>(values_.size()); }

std::vector<std::string> Engine::ListKeys() const {
  std::vector<std::string> keys;
  keys.reserve(values_.size());
  for (const auto& [k, v] : values_) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

bool Engine::Delete(absl::string_view key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  values_.erase(it);
  return true;
}

void Engine::QueuePush(absl::string_view key, absl::string_view value) {
  queues_[key].emplace_back(value);
  WakeWaiters(key, /*only_one=*/true);
}

std::optional<std::string> Engine::QueuePop(absl::string_view key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return std::nullopt;
  std::string front = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return front;
}

int64_t Engine::QueueLen(absl::string_view key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

std::optional<Engine::WaitId> Engine::Wait(const std::vector<std::string>& keys,
                                           WaitCallback callback) {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!Present(key)) missing.push_back(key);
  }
  if (missing.empty()) return std::nullopt;
  return Register(std::move(missing), std::move(callback));
}

Engine::WaitId Engine::Register(std::vector<std::string> missing_keys, WaitCallback callback) {
  WaitId id = next_wait_id_++;
  PendingWait wait;
  wait.remaining = missing_keys.size();
  wait.missing_keys = std::move(missing_keys);
  wait.callback = std::move(callback);
  for (const std::string& key : wait.missing_keys) waiters_by_key_[key].push_back(id);
  waits_.emplace(id, std::move(wait));
  return id;
}

absl::StatusOr<std::optional<Engine::WaitId>> Engine::Barrier(absl::string_view key,
                                                              int64_t world_size,
                                                              WaitCallback callback) {
  int64_t count = 0;
  if (const std::string* value = Get(key); value != nullptr && !absl::SimpleAtoi(*value, &count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BARRIER on key '", key, "' whose value is not a decimal integer"));
  }
  // Stored without waking anyone yet: the caller's own wait must not count as woken by its own
  // increment, and the waits already there are woken below only when the count is reached.
  count = static_cast<int64_t>(static_cast<uint64_t>(count) + 1);
  char digits[24];
  char* end = std::to_chars(digits, digits + sizeof digits, count).ptr;
  values_[key].assign(digits, static_cast<size_t>(end - digits));
  if (count >= world_size) {
    WakeWaiters(key);
    return std::nullopt;
  }
  return Register({std::string(key)}, std::move(callback));
}

bool Engine::CancelWait(WaitId id) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return false;
  for (const std::string& key : it->second.missing_keys) {
    auto w = waiters_by_key_.find(key);
    if (w == waiters_by_key_.end()) continue;
    std::erase(w->second, id);
    if (w->second.empty()) waiters_by_key_.erase(w);
  }
  waits_.erase(it);
  return true;
}

void Engine::WakeWaiters(absl::string_view key, bool only_one) {
  if (waiters_by_key_.empty()) return;  // The common case: a SET with nobody waiting.
  auto w = waiters_by_key_.find(key);
  if (w == waiters_by_key_.end()) return;
  std::vector<WaitId> ids;
  if (only_one) {
    // As torch's wakeupOneWaitingClient: walk the waits on `key` oldest first, each counting
    // `key` as arrived, until one completes; the rest stay registered.
    std::vector<WaitId>& list = w->second;
    size_t i = 0;
    for (; i < list.size(); ++i) {
      auto it = waits_.find(list[i]);
      if (it != waits_.end() && it->second.remaining == 1) {
        ++i;
        break;
      }
    }
    ids.assign(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i));
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i));
    if (list.empty()) waiters_by_key_.erase(w);
  } else {
    ids = std::move(w->second);
    waiters_by_key_.erase(w);
  }
  std::vector<WaitCallback> ready;
  ready.reserve(ids.size());
  for (WaitId id : ids) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    if (--it->second.remaining == 0) {
      ready.push_back(std::move(it->second.callback));
      waits_.erase(it);
    }
  }
  // Callbacks run after the bookkeeping so that one may call back into the engine.
  for (WaitCallback& cb : ready) cb();
}

}  // namespace dgt::store
