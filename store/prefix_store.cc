#include "dgt/store/prefix_store.h"

#include "absl/strings/str_cat.h"

namespace dgt::store {

std::string PrefixStore::Join(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::vector<std::string> PrefixStore::JoinAll(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(Join(k));
  return out;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return store_.Set(Join(key), value);
}
absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key) {
  return store_.Get(Join(key));
}
absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return store_.Add(Join(key), delta);
}
absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return store_.CompareSet(Join(key), expected, desired);
}
absl::StatusOr<bool> PrefixStore::Check(const std::vector<std::string>& keys) {
  return store_.Check(JoinAll(keys));
}
absl::Status PrefixStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  return store_.Wait(JoinAll(keys), timeout);
}
absl::StatusOr<bool> PrefixStore::DeleteKey(absl::string_view key) {
  return store_.DeleteKey(Join(key));
}
absl::StatusOr<int64_t> PrefixStore::NumKeys() { return store_.NumKeys(); }
absl::Status PrefixStore::Append(absl::string_view key, absl::string_view value) {
  return store_.Append(Join(key), value);
}
absl::StatusOr<std::vector<std::string>> PrefixStore::MultiGet(
    const std::vector<std::string>& keys) {
  return store_.MultiGet(JoinAll(keys));
}
absl::Status PrefixStore::MultiSet(const std::vector<std::pair<std::string, std::string>>& items) {
  std::vector<std::pair<std::string, std::string>> joined;
  joined.reserve(items.size());
  for (const auto& [k, v] : items) joined.emplace_back(Join(k), v);
  return store_.MultiSet(joined);
}

}  // namespace dgt::store
