// The tables of `dgt jobs` and `dgt nodes`, and the display width their columns are padded by.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "cli/display_width.h"
#include "cli/jobs_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dgt::cli {
namespace {

namespace v1 = ::dgt::jobs::v1;

TEST(DisplayWidth, CountsColumnsNotBytes) {
  EXPECT_EQ(DisplayWidth(""), 0u);
  EXPECT_EQ(DisplayWidth("resnet"), 6u);
  EXPECT_EQ(DisplayWidth("r\xC3\xA9sum\xC3\xA9"), 6u);      // "résumé", precomposed: 8 bytes.
  EXPECT_EQ(DisplayWidth("re\xCC\x81sume\xCC\x81"), 6u);    // "résumé", combining acute.
  EXPECT_EQ(DisplayWidth("\xE8\xAE\xAD\xE7\xBB\x83"), 4u);  // "训练": 2 wide, 6 bytes.
  EXPECT_EQ(DisplayWidth("\xEF\xBC\xA1"), 2u);              // Fullwidth "Ａ".
  EXPECT_EQ(DisplayWidth("\xF0\x9F\x9A\x80"), 2u);          // An emoji (rocket).
  EXPECT_EQ(DisplayWidth("a\xE2\x80\x8B"
                         "b"),
            2u);                            // Zero-width space.
  EXPECT_EQ(DisplayWidth("\xFF\xC3"), 2u);  // Not UTF-8: a column a byte.
  EXPECT_EQ(DisplayWidth("\xC0\xAF"), 2u);  // Overlong "/": not UTF-8.
  EXPECT_EQ(PadRight("\xE8\xAE\xAD\xE7\xBB\x83", 6), "\xE8\xAE\xAD\xE7\xBB\x83  ");
  EXPECT_EQ(PadRight("abc", 2), "abc");
}

TEST(TerminalText, EscapesWhatWouldDriveTheTerminal) {
  EXPECT_EQ(TerminalText("resnet-50 \xE8\xAE\xAD\xE7\xBB\x83"),
            "resnet-50 \xE8\xAE\xAD\xE7\xBB\x83");
  EXPECT_EQ(TerminalText("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");  // ESC, BEL.
  EXPECT_EQ(TerminalText("x\njob-99 succeeded"), "x\\x0ajob-99 succeeded");
  EXPECT_EQ(TerminalText("a\xE2\x80\xAE"
                         "evil"),
            "a\\u202eevil");  // RIGHT-TO-LEFT OVERRIDE.
  EXPECT_EQ(TerminalText("\xC2\x9B"
                         "1m"),
            "\\u009b1m");                            // C1 CSI.
  EXPECT_EQ(TerminalText("caf\xE9!"), "caf\\xe9!");  // Not UTF-8.
  EXPECT_EQ(TerminalText("del\x7F"), "del\\x7f");
  EXPECT_EQ(TerminalText(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(TerminalText("line 1\n\tline 2\r", "\n\t"), "line 1\n\tline 2\\x0d");
}

v1::JobInfo Job(const std::string& id, const std::string& name, const std::string& reason) {
  v1::JobInfo j;
  j.set_job_id(id);
  j.set_state(v1::JOB_STATE_QUEUED);
  j.mutable_spec()->set_name(name);
  j.mutable_spec()->set_instance_count(1);
  j.mutable_spec()->mutable_distribution()->set_process_count_per_instance(2);
  j.set_reason(reason);
  return j;
}

// A job name cannot add a row to `dgt jobs` or recolour it.
TEST(FormatJobs, EscapesControlCharactersInNamesAndReasons) {
  v1::ListJobsResponse jobs;
  *jobs.add_jobs() = Job("job-1", "x\njob-99", "r\x1b[2J");
  const std::vector<std::string> lines = absl::StrSplit(FormatJobs(jobs), '\n');
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1],
            "job-1        queued     1 x 2         0        x\\x0ajob-99          r\\x1b[2J");
  EXPECT_EQ(lines[2], "");
}

// A name that is not ASCII takes as many columns as an ASCII one of the same width, so the
// REASON column starts at one column on every line.
TEST(FormatJobs, PadsNamesByTheirWidthOnATerminal) {
  v1::ListJobsResponse jobs;
  *jobs.add_jobs() = Job("job-1", "resnet", "r1");
  *jobs.add_jobs() = Job("job-2", "\xE8\xAE\xAD\xE7\xBB\x83", "r2");  // "训练"
  *jobs.add_jobs() = Job("job-3", "r\xC3\xA9sum\xC3\xA9", "r3");      // "résumé"
  const std::vector<std::string> lines = absl::StrSplit(FormatJobs(jobs), '\n');
  EXPECT_THAT(
      lines,
      ::testing::ElementsAre(
          "JOB ID       STATE      NODES x PROCS RESTARTS NAME                 REASON",
          "job-1        queued     1 x 2         0        resnet               r1",
          "job-2        queued     1 x 2         0        \xE8\xAE\xAD\xE7\xBB\x83                 "
          "r2",
          "job-3        queued     1 x 2         0        r\xC3\xA9sum\xC3\xA9               r3",
          ""));
  for (size_t i = 1; i < 4; ++i) {
    const size_t at = lines[i].rfind(' ') + 1;
    EXPECT_EQ(DisplayWidth(lines[i].substr(0, at)), 68u) << lines[i];
  }
}

// A job with spares: `dgt jobs` shows "2+1", `dgt job show` how many were used, which node
// waits as a spare and which lost node's part a spare took.
TEST(FormatJobs, ShowsSpareInstances) {
  v1::JobInfo j = Job("job-1", "resnet", "node b: its daemon was lost mid-job");
  j.set_state(v1::JOB_STATE_RUNNING);
  j.mutable_spec()->set_instance_count(2);
  j.mutable_spec()->set_spare_instances(2);
  j.set_spares_used(1);
  for (const auto& [name, rank, taken] : std::vector<std::tuple<std::string, int, bool>>{
           {"a", 0, false}, {"b", -1, true}, {"c", 1, false}, {"d", -1, false}}) {
    v1::JobNode* n = j.add_nodes();
    n->set_node_name(name);
    n->set_node_rank(rank);
    n->set_first_rank(rank >= 0 ? rank * 2 : -1);
    n->set_exit_code(-1);
    n->set_taken_by_spare(taken);
  }
  v1::ListJobsResponse jobs;
  *jobs.add_jobs() = j;
  const std::vector<std::string> lines = absl::StrSplit(FormatJobs(jobs), '\n');
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1],
            "job-1        running    2+2 x 2       0        resnet               node b: its "
            "daemon was lost mid-job");
  const std::vector<std::string> show = absl::StrSplit(FormatJob(j, 0), '\n');
  ASSERT_EQ(show.size(), 11u);
  EXPECT_EQ(
      show[3],
      "  nodes: 2 x 2 process(es), distribution pytorch, restarts 0 of 0, spares 1 of 2 used");
  EXPECT_EQ(show[5], "  NODE                     NODE RANK RANKS       EXIT CODE");
  EXPECT_EQ(show[6], "  a                        0         0-1         -");
  EXPECT_EQ(show[7],
            "  b                        -         -           lost (a spare took its part)");
  EXPECT_EQ(show[8], "  c                        1         2-3         -");
  EXPECT_EQ(show[9], "  d                        spare     -           -");
}

// A spare lost while it waited says so; it took no part over.
TEST(FormatJobs, ALostWaitingSpareIsNotShownAsTakenOver) {
  v1::JobInfo j = Job("job-1", "resnet", "node c: ...");
  j.set_state(v1::JOB_STATE_RUNNING);
  j.mutable_spec()->set_instance_count(1);
  j.mutable_spec()->set_spare_instances(1);
  j.set_spares_used(1);
  v1::JobNode* a = j.add_nodes();
  a->set_node_name("a");
  a->set_node_rank(0);
  a->set_first_rank(0);
  a->set_exit_code(-1);
  v1::JobNode* c = j.add_nodes();
  c->set_node_name("c");
  c->set_node_rank(-1);
  c->set_first_rank(-1);
  c->set_exit_code(-1);
  c->set_taken_by_spare(true);
  c->set_lost_without_ranks(true);
  const std::vector<std::string> show = absl::StrSplit(FormatJob(j, 0), '\n');
  ASSERT_EQ(show.size(), 9u);
  EXPECT_EQ(show[7],
            "  c                        -         -           lost (it held no ranks: one "
            "spare fewer)");
}

// The NODES x PROCS column widens to its widest cell: the columns after it stay in line.
TEST(FormatJobs, WidensTheShapeColumnForLargeJobs) {
  v1::ListJobsResponse jobs;
  v1::JobInfo* big = jobs.add_jobs();
  *big = Job("job-1", "big", "starting");
  big->mutable_spec()->set_instance_count(100000);
  big->mutable_spec()->set_spare_instances(1000);
  *jobs.add_jobs() = Job("job-2", "small", "queued");
  const std::vector<std::string> lines = absl::StrSplit(FormatJobs(jobs), '\n');
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "JOB ID       STATE      NODES x PROCS   RESTARTS NAME                 REASON");
  EXPECT_EQ(lines[1].substr(24, 25), "100000+1000 x 2 0        ");
  EXPECT_EQ(lines[2].substr(24, 25), "1 x 2           0        ");
}

TEST(FormatNodes, PadsNodeNamesAndLabelsByTheirWidth) {
  v1::ListNodesResponse nodes;
  v1::NodeInfo* n = nodes.add_nodes();
  n->set_node_name("\xE8\x8A\x82\xE7\x82\xB9-1");  // "节点-1": 6 columns, 8 bytes.
  n->set_state("idle");
  n->set_gpu_count(8);
  (*n->mutable_labels())["zone"] = "\xE5\x8C\x97";  // "北"
  const std::vector<std::string> lines = absl::StrSplit(FormatNodes(nodes, 100), '\n');
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(
      lines[0],
      "NODE                     STATE     JOB          GPUS LABELS               REGISTERED   "
      "HEALTH");
  EXPECT_EQ(lines[1],
            "\xE8\x8A\x82\xE7\x82\xB9-1                   idle      -            8    "
            "zone=\xE5\x8C\x97              -            ok");
}

// An unhealthy node's reason is one line: line breaks and tabs as blanks, control characters
// escaped, cut to 100 columns.
TEST(FormatNodes, ShowsAnUnhealthyNodesReasonOnOneLine) {
  v1::ListNodesResponse nodes;
  v1::NodeInfo* a = nodes.add_nodes();
  a->set_node_name("a");
  a->set_state("idle");
  a->set_unhealthy(true);
  a->set_health_reason("health check 'check' failed: exited with code 1: GPU 2\n\x1b[31mgone\tnow");
  v1::NodeInfo* b = nodes.add_nodes();
  b->set_node_name("b");
  b->set_state("busy");
  b->set_job_id("job-1");
  b->set_unhealthy(true);
  b->set_health_reason("health check 'long' failed: exited with code 2: " + std::string(200, 'x'));
  const std::vector<std::string> lines = absl::StrSplit(FormatNodes(nodes, 100), '\n');
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(
      lines[1],
      "a                        idle      -            0    -                    -            "
      "unhealthy health check 'check' failed: exited with code 1: GPU 2 \\x1b[31mgone now");
  EXPECT_EQ(
      lines[2],
      "b                        busy      job-1        0    -                    -            "
      "unhealthy health check 'long' failed: exited with code 2: " +
          std::string(97 - 48, 'x') + "...");
}

// An empty restart_policy and distribution.type print as what they stand for, not "".
TEST(FormatJobJson, PrintsTheDefaultsAnEmptyFieldStandsFor) {
  v1::JobInfo job = Job("job-1", "resnet", "");
  nlohmann::json j = nlohmann::json::parse(FormatJobJson(job));
  EXPECT_EQ(j["spec"]["restart_policy"], "group");
  EXPECT_EQ(j["spec"]["distribution"]["type"], "pytorch");
  EXPECT_EQ(j["spec"]["max_restarts"], 0);  // Every field, zeros included.
  EXPECT_EQ(j["state"], "queued");
  job.mutable_spec()->set_restart_policy("rank");
  job.mutable_spec()->mutable_distribution()->set_type("tensorflow");
  j = nlohmann::json::parse(FormatJobJson(job));
  EXPECT_EQ(j["spec"]["restart_policy"], "rank");
  EXPECT_EQ(j["spec"]["distribution"]["type"], "tensorflow");
}

}  // namespace
}  // namespace dgt::cli
