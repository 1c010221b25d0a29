#include "agent/flags/hostlist.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

struct Case {
  const char* list;
  std::vector<std::string> hosts;
};

// The forms of Slurm's hostlist expressions (its man pages' "hostlist" examples and the node
// names its commands print), each with the names `scontrol show hostnames` gives.
const Case kCases[] = {
    {"node1", {"node1"}},
    {"lx[10-12]", {"lx10", "lx11", "lx12"}},
    {"linux[0-2,128]", {"linux0", "linux1", "linux2", "linux128"}},
    {"tux[2,1-2]", {"tux2", "tux1", "tux2"}},
    {"gpu[01-04,07]", {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}},
    {"n[08-10]", {"n08", "n09", "n10"}},
    {"n[8-10]", {"n8", "n9", "n10"}},
    {"n[0009-0011]", {"n0009", "n0010", "n0011"}},
    {"n[007]", {"n007"}},
    {"r[1-2]n[01-02]", {"r1n01", "r1n02", "r2n01", "r2n02"}},
    {"rack[0-1]_blade[0-1]", {"rack0_blade0", "rack0_blade1", "rack1_blade0", "rack1_blade1"}},
    {"a[1-2],b[3-4]", {"a1", "a2", "b3", "b4"}},
    {"login1,c[1-2],gpu-a[09-10].cluster",
     {"login1", "c1", "c2", "gpu-a09.cluster", "gpu-a10.cluster"}},
    {"node-1,node-2", {"node-1", "node-2"}},
    {"n[1-2]-ib", {"n1-ib", "n2-ib"}},
    {"[1-2]", {"1", "2"}},
    {"x1-y2", {"x1-y2"}},
    {"10.0.0.1", {"10.0.0.1"}},
    {"dgx_a100-[1,3]", {"dgx_a100-1", "dgx_a100-3"}},
};

TEST(HostlistTest, SlurmForms) {
  for (const Case& c : kCases) {
    auto hosts = ExpandHostlist(c.list, "SLURM_JOB_NODELIST");
    ASSERT_TRUE(hosts.ok()) << c.list << ": " << hosts.status();
    EXPECT_EQ(*hosts, c.hosts) << c.list << " -> " << absl::StrJoin(*hosts, ",");
  }
}

TEST(HostlistTest, LargeRangeKeepsOrder) {
  auto hosts = ExpandHostlist("n[0998-1001]", "L");
  ASSERT_TRUE(hosts.ok());
  EXPECT_EQ(*hosts, (std::vector<std::string>{"n0998", "n0999", "n1000", "n1001"}));
  auto many = ExpandHostlist("n[1-65536]", "L");
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->size(), 65536u);
  EXPECT_EQ(many->back(), "n65536");
}

TEST(HostlistTest, BadListsNameTheList) {
  const std::pair<const char*, const char*> kBad[] = {
      {"", "SLURM_JOB_NODELIST='' is not a Slurm hostlist: it is empty"},
      {"n[1-2", "SLURM_JOB_NODELIST='n[1-2' is not a Slurm hostlist: '[' without ']'"},
      {"n1-2]", "SLURM_JOB_NODELIST='n1-2]' is not a Slurm hostlist: ']' without '['"},
      {"n[[1]]", "SLURM_JOB_NODELIST='n[[1]]' is not a Slurm hostlist: nested '['"},
      {"n[]", "SLURM_JOB_NODELIST='n[]' is not a Slurm hostlist: empty brackets"},
      {"n[a-b]",
       "SLURM_JOB_NODELIST='n[a-b]' is not a Slurm hostlist: 'a-b' is not a number or a range N-M"},
      {"n[1-2-3]",
       "SLURM_JOB_NODELIST='n[1-2-3]' is not a Slurm hostlist: '1-2-3' is not a number or a "
       "range N-M"},
      {"n[1,]",
       "SLURM_JOB_NODELIST='n[1,]' is not a Slurm hostlist: '' is not a number or a range N-M"},
      {"n[5-3]",
       "SLURM_JOB_NODELIST='n[5-3]' is not a Slurm hostlist: range '5-3' ends below its start"},
      {"a,,b", "SLURM_JOB_NODELIST='a,,b' is not a Slurm hostlist: an empty name"},
      {"a,", "SLURM_JOB_NODELIST='a,' is not a Slurm hostlist: an empty name"},
      {"a b",
       "SLURM_JOB_NODELIST='a b' is not a Slurm hostlist: it holds a space or control "
       "character"},
      {"n[0-99999999]",
       "SLURM_JOB_NODELIST='n[0-99999999]' is not a Slurm hostlist: more than 65536 names"},
      {"a[1-300]b[1-300]",
       "SLURM_JOB_NODELIST='a[1-300]b[1-300]' is not a Slurm hostlist: more than 65536 names"},
      {"n[99999999999999999999]",
       "SLURM_JOB_NODELIST='n[99999999999999999999]' is not a Slurm hostlist: "
       "'99999999999999999999' is too large"},
  };
  for (const auto& [list, message] : kBad) {
    auto hosts = ExpandHostlist(list, "SLURM_JOB_NODELIST");
    ASSERT_FALSE(hosts.ok()) << list;
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << list;
    EXPECT_EQ(hosts.status().message(), message) << list;
  }
}

TEST(HostlistTest, TaskCounts) {
  auto counts = ExpandTaskCounts("2(x3),1", "SLURM_STEP_TASKS_PER_NODE");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int>{2, 2, 2, 1}));
  counts = ExpandTaskCounts("1", "T");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int>{1}));
  counts = ExpandTaskCounts("4(x2)", "T");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int>{4, 4}));
  for (const char* bad : {"", "x", "2(x)", "2(x0)", "2(3)", "2(x3", "-1", "2,,1"}) {
    auto c = ExpandTaskCounts(bad, "T");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().message(),
              absl::StrCat("T='", bad, "' is not a Slurm task-count list such as 2(x3),1"));
  }
}

}  // namespace
}  // namespace dgt::agent
