// The conformance suite every RunStateBackend passes (rendezvous/run_state_backend.h): reads,
// staged writes, revisions, compare-and-swap, leases and watches, with exact values. A backend
// runs it by linking run_state_backend_suite.cc into its test and instantiating the suite with a
// factory:
//
//   INSTANTIATE_TEST_SUITE_P(Etcd, RunStateBackendSuite,
//                            ::testing::Values(BackendFactory{"Etcd", MakeEtcd, true}));
//
// Watches may deliver on another thread (etcd): the suite waits for events up to a deadline.
#ifndef DGT_TESTS_RENDEZVOUS_RUN_STATE_BACKEND_SUITE_H_
#define DGT_TESTS_RENDEZVOUS_RUN_STATE_BACKEND_SUITE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "rendezvous/run_state_backend.h"

namespace dgt::rendezvous {

struct BackendFactory {
  std::string name;
  // A fresh, empty backend for one test. It may GTEST_SKIP (from a void helper) and return
  // nullptr: the test is skipped.
  std::function<std::unique_ptr<RunStateBackend>()> make;
  // Leases expire on the backend's own clock (etcd), not on the `now` passed in: the lease
  // expiry test waits out the ttl in real time.
  bool leases_on_own_clock = false;
};

// gtest names the parameter by its backend in failure messages.
inline void PrintTo(const BackendFactory& factory, std::ostream* os) { *os << factory.name; }

class RunStateBackendSuite : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    if (IsSkipped()) return;  // The factory skipped (e.g. no etcd binary).
    ASSERT_NE(backend_, nullptr);
  }
  std::unique_ptr<RunStateBackend> backend_;
};

}  // namespace dgt::rendezvous

#endif  // DGT_TESTS_RENDEZVOUS_RUN_STATE_BACKEND_SUITE_H_
