// `dgt submit / jobs / job show / logs / cancel / nodes`: the jobs service's command line (the jobs
// contract; docs/JOBS.md). Each calls one RPC of dgt.jobs.v1.Jobs on dgt-rendezvous.
//
// Endpoint: --rdzv-endpoint H:P[,H:P] (default $DGT_RDZV_ENDPOINT, else 127.0.0.1:29400); each
// endpoint is tried in turn while the answer is UNAVAILABLE (a replica that is down). Token:
// --token-file, the submit token. Exit codes (docs/EXIT_CODES.md, "dgt"): 0 done; 2 usage, a job
// file that does not parse or validate, or INVALID_ARGUMENT from the service; 69 no service
// answered; 77 refused (UNAUTHENTICATED, PERMISSION_DENIED); 1 anything else (an unknown job id,
// a job that already finished).
#ifndef DGT_CLI_JOBS_COMMAND_H_
#define DGT_CLI_JOBS_COMMAND_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "dgt/jobs/v1/jobs.pb.h"

namespace dgt::cli {

// Adds submit, jobs, job (show), logs, cancel and nodes to `app`; selecting one sets `*run`.
void AddJobsCommands(CLI::App& app, std::function<int()>* run);

// The tables the commands print, with times relative to `now_unix_s`. Columns of user text
// (names, labels) are padded by their width on a terminal (cli/display_width.h), not bytes.
std::string FormatJobs(const dgt::jobs::v1::ListJobsResponse& jobs);
std::string FormatJob(const dgt::jobs::v1::JobInfo& job, double now_unix_s);
// `dgt nodes`' last column, HEALTH, is "ok", or "unhealthy " and the node's health reason on one
// line (line breaks and tabs as blanks, control characters escaped), cut to 100 columns.
std::string FormatNodes(const dgt::jobs::v1::ListNodesResponse& nodes, double now_unix_s);
// `dgt job show --json`: every field (dgt.jobs.v1.JobInfo), with the spec's empty restart_policy
// and distribution.type given as what they stand for ("group", "pytorch").
std::string FormatJobJson(dgt::jobs::v1::JobInfo job);

}  // namespace dgt::cli

#endif  // DGT_CLI_JOBS_COMMAND_H_
