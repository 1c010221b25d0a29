// dgt::store::PrefixStore — a Store that puts `prefix + "/"` in front of every key and passes the
// call to another Store, as torch's and gloo's PrefixStore do. Several jobs or process groups
// share one store this way without their keys colliding.
//
// Thread-safety: as thread-safe as the wrapped store. The wrapped store must outlive this one.
#ifndef DGT_STORE_PREFIX_STORE_H_
#define DGT_STORE_PREFIX_STORE_H_

#include <string>
#include <utility>
#include <vector>

#include "dgt/store/store.h"

namespace dgt::store {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store& store) : prefix_(std::move(prefix)), store_(store) {}

  // The key as the wrapped store sees it: prefix + "/" + key.
  std::string Join(absl::string_view key) const;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  // Counts every key of the wrapped store, as torch's PrefixStore does.
  absl::StatusOr<int64_t> NumKeys() override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys) override;
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& items) override;

 private:
  std::vector<std::string> JoinAll(const std::vector<std::string>& keys) const;

  std::string prefix_;
  Store& store_;
};

}  // namespace dgt::store

#endif  // DGT_STORE_PREFIX_STORE_H_
