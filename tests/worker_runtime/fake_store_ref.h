// A Store that forwards to a shared store (e.g. one MemoryStore), so several "processes" of a
// test, each owning its connections, talk to one store.
#ifndef DGT_TESTS_WORKER_RUNTIME_FAKE_STORE_REF_H_
#define DGT_TESTS_WORKER_RUNTIME_FAKE_STORE_REF_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dgt/store/store.h"
#include "dgt/worker/elastic_group.h"

namespace dgt::worker::testing {

class StoreRef final : public store::Store {
 public:
  explicit StoreRef(store::Store& s) : s_(s) {}
  absl::Status Set(absl::string_view k, absl::string_view v) override { return s_.Set(k, v); }
  absl::StatusOr<std::string> Get(absl::string_view k) override { return s_.Get(k); }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override { return s_.Add(k, d); }
  absl::StatusOr<std::string> CompareSet(absl::string_view k, absl::string_view e,
                                         absl::string_view d) override {
    return s_.CompareSet(k, e, d);
  }
  absl::StatusOr<bool> Check(const std::vector<std::string>& k) override { return s_.Check(k); }
  absl::Status Wait(const std::vector<std::string>& k, absl::Duration t) override {
    return s_.Wait(k, t);
  }
  absl::StatusOr<bool> DeleteKey(absl::string_view k) override { return s_.DeleteKey(k); }
  absl::StatusOr<int64_t> NumKeys() override { return s_.NumKeys(); }
  absl::Status Append(absl::string_view k, absl::string_view v) override { return s_.Append(k, v); }
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& k) override {
    return s_.MultiGet(k);
  }
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& i) override {
    return s_.MultiSet(i);
  }

 private:
  store::Store& s_;
};

inline StoreConnector ConnectorTo(store::Store& s) {
  return [&s]() -> absl::StatusOr<std::unique_ptr<store::Store>> {
    return std::unique_ptr<store::Store>(std::make_unique<StoreRef>(s));
  };
}

}  // namespace dgt::worker::testing

#endif  // DGT_TESTS_WORKER_RUNTIME_FAKE_STORE_REF_H_
