// The JobStateBackend conformance checks (jobs/job_state_backend.h), run against each backend: in
// memory (job_state_backend_test.cc) and etcd (tests/etcd/job_state_backend_test.cc).
#ifndef DGT_TESTS_JOBS_JOB_STATE_BACKEND_SUITE_H_
#define DGT_TESTS_JOBS_JOB_STATE_BACKEND_SUITE_H_

#include "jobs/job_state_backend.h"

namespace dgt::jobs::testing {

// Each runs on an empty backend and reports through gtest's EXPECT/ASSERT.
void CheckJobsRoundTripInSubmissionOrder(JobStateBackend& backend);
void CheckNodesRoundTripAndDelete(JobStateBackend& backend);

}  // namespace dgt::jobs::testing

#endif  // DGT_TESTS_JOBS_JOB_STATE_BACKEND_SUITE_H_
