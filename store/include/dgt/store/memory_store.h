// dgt::store::MemoryStore — the store engine in the calling process, behind the Store interface:
// for single-process programs and tests, and as the reference the wire server is checked
// against (the same semantics as torch's TCPStore server).
//
// Thread-safe: calls from any thread; a blocked Wait/Get does not block other callers.
#ifndef DGT_STORE_MEMORY_STORE_H_
#define DGT_STORE_MEMORY_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dgt/store/store.h"

namespace dgt::store {

struct MemoryStoreOptions {
  // How long Get and MultiGet wait for their keys.
  absl::Duration timeout = absl::Seconds(300);
};

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys) override;
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& items) override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgt::store

#endif  // DGT_STORE_MEMORY_STORE_H_
