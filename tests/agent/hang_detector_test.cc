#include "agent/progress/hang_detector.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace dgt::agent {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

// A rank's readings on a simulated clock: Check at `t` with the given counter and waiting word.
class Harness {
 public:
  explicit Harness(HangDetector::Options o) : d_(o) {}
  HangDetector& d() { return d_; }
  std::optional<Hang> At(int rank, double t, uint64_t counter, bool waiting = false) {
    ++reads_;
    return d_.Check(rank, {counter, waiting}, ::dgt::agent::At(t), [this] {
      ++stopped_asked_;
      return stopped_;
    });
  }
  bool stopped_ = false;
  int stopped_asked_ = 0;
  int reads_ = 0;

 private:
  HangDetector d_;
};

HangDetector::Options Timeouts(double first, double hang) {
  HangDetector::Options o;
  o.first_progress_timeout = absl::Seconds(first);
  o.hang_timeout = absl::Seconds(hang);
  return o;
}

TEST(HangDetectorTest, OffByDefaultAndPollPeriodFollowsTheShorterTimeout) {
  EXPECT_FALSE(HangDetector({}).enabled());
  EXPECT_TRUE(HangDetector(Timeouts(0, 2)).enabled());
  EXPECT_TRUE(HangDetector(Timeouts(30, 0)).enabled());
  EXPECT_EQ(HangDetector(Timeouts(0, 2)).PollPeriod(), absl::Milliseconds(50));
  EXPECT_EQ(HangDetector(Timeouts(30, 0.4)).PollPeriod(), absl::Milliseconds(20));
  EXPECT_EQ(HangDetector(Timeouts(0.1, 300)).PollPeriod(), absl::Milliseconds(5));
  EXPECT_EQ(HangDetector(Timeouts(1800, 300)).PollPeriod(), absl::Milliseconds(50));
}

TEST(HangDetectorTest, HangTimeoutCountsFromTheLastReportSeen) {
  Harness h(Timeouts(0, 2));
  h.d().Watch(0, At(0));
  EXPECT_FALSE(h.At(0, 0.5, 1));  // First report seen at 0.5.
  EXPECT_FALSE(h.At(0, 1.0, 2));  // Another at 1.0.
  EXPECT_FALSE(h.At(0, 2.0, 2));
  EXPECT_FALSE(h.At(0, 3.0, 2));  // Exactly the timeout: not past it.
  std::optional<Hang> hang = h.At(0, 3.05, 2);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->local_rank, 0);
  EXPECT_FALSE(hang->first);
  EXPECT_EQ(hang->silent, absl::Milliseconds(2050));
  EXPECT_EQ(hang->timeout, absl::Seconds(2));
  EXPECT_EQ(hang->reports, 2u);
  EXPECT_EQ(hang->Describe(), "no progress report for 2.0 s (--hang-timeout=2), after 2 reports");
  // Declared once: forgotten after.
  EXPECT_FALSE(h.d().watching(0));
  EXPECT_FALSE(h.At(0, 10, 2));
  EXPECT_EQ(h.stopped_asked_, 0);  // Never waiting: /proc was not read.
}

TEST(HangDetectorTest, NeverReportingIsFineWithoutFirstProgressTimeout) {
  Harness h(Timeouts(0, 2));
  h.d().Watch(3, At(0));
  for (double t = 0; t < 600; t += 0.05) ASSERT_FALSE(h.At(3, t, 0)) << t;
  EXPECT_TRUE(h.d().watching(3));
}

TEST(HangDetectorTest, FirstProgressTimeoutCountsFromTheStartThenHangTimeoutTakesOver) {
  Harness h(Timeouts(30, 2));
  h.d().Watch(1, At(0));
  EXPECT_FALSE(h.At(1, 29.9, 0));  // Importing torch: long but inside the first window.
  EXPECT_FALSE(h.At(1, 30.0, 1));  // The first report.
  EXPECT_FALSE(h.At(1, 31.9, 1));
  std::optional<Hang> hang = h.At(1, 32.1, 1);
  ASSERT_TRUE(hang);
  EXPECT_FALSE(hang->first);
  EXPECT_EQ(hang->Describe(), "no progress report for 2.1 s (--hang-timeout=2), after 1 report");

  Harness never(Timeouts(30, 2));
  never.d().Watch(0, At(0));
  EXPECT_FALSE(never.At(0, 30.0, 0));
  hang = never.At(0, 30.05, 0);
  ASSERT_TRUE(hang);
  EXPECT_TRUE(hang->first);
  EXPECT_EQ(hang->reports, 0u);
  EXPECT_EQ(hang->Describe(),
            "no progress report since its start, silent for 30.1 s "
            "(--first-progress-timeout=30)");
}

TEST(HangDetectorTest, FirstProgressTimeoutAloneLeavesLaterSilenceAlone) {
  Harness h(Timeouts(5, 0));
  h.d().Watch(0, At(0));
  EXPECT_FALSE(h.At(0, 4, 1));
  EXPECT_FALSE(h.At(0, 1000, 1));  // --hang-timeout off.
}

TEST(HangDetectorTest, WaitingOnPeersIsNotSilenceUnlessTheProcessIsStopped) {
  Harness h(Timeouts(0, 2));
  h.d().Watch(0, At(0));
  EXPECT_FALSE(h.At(0, 1, 5));
  // Blocked in a collective on a hung peer for 10 s: running, so not silent.
  for (double t = 1.5; t <= 11; t += 0.5) ASSERT_FALSE(h.At(0, t, 5, /*waiting=*/true)) << t;
  EXPECT_EQ(h.stopped_asked_, 20);
  // The wait ends (the peer was killed); silence counts from the last wait seen (11).
  EXPECT_FALSE(h.At(0, 12.9, 5));
  EXPECT_TRUE(h.At(0, 13.05, 5));

  // SIGSTOPped while in the collective: the wait does not count any more.
  Harness s(Timeouts(0, 2));
  s.d().Watch(1, At(0));
  EXPECT_FALSE(s.At(1, 1, 7, true));
  s.stopped_ = true;
  EXPECT_FALSE(s.At(1, 2, 7, true));
  EXPECT_FALSE(s.At(1, 3, 7, true));
  std::optional<Hang> hang = s.At(1, 3.05, 7, true);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->silent, absl::Milliseconds(2050));
  EXPECT_TRUE(hang->waiting);
}

// One reading declares a hung rank and the peers blocked on it, silent since the same report:
// the blame goes to the longest silent, then to one not waiting on its peers, then by local rank.
TEST(HangDetectorTest, BlameGoesToTheLongestSilentThenToOneNotWaiting) {
  Harness h(Timeouts(0, 2));
  for (int rank = 0; rank < 4; ++rank) h.d().Watch(rank, At(0));
  // Every rank reports its step at 1; rank 2's report of that step is seen one reading later.
  for (int rank = 0; rank < 4; ++rank) ASSERT_FALSE(h.At(rank, 1, rank == 2 ? 4 : 5));
  ASSERT_FALSE(h.At(2, 1.05, 5));
  // Rank 0 is stopped inside the collective that the others are blocked in without saying so (a
  // trainer that marks no waits).
  h.stopped_ = true;
  std::vector<Hang> hung;
  for (int rank = 0; rank < 4; ++rank) {
    std::optional<Hang> hang = h.At(rank, 3.1, 5, /*waiting=*/rank == 0);
    if (hang) hung.push_back(*hang);
  }
  ASSERT_EQ(hung.size(), 4u);
  std::sort(hung.begin(), hung.end(), BlameBefore);
  std::vector<int> order;
  for (const Hang& hang : hung) order.push_back(hang.local_rank);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 0, 2}));
  EXPECT_EQ(hung[3].silent, absl::Milliseconds(2050));
  EXPECT_EQ(hung[2].silent, hung[0].silent);
  EXPECT_TRUE(hung[2].waiting);
  EXPECT_FALSE(hung[0].waiting);

  Hang longer;
  longer.local_rank = 3;
  longer.silent = absl::Seconds(3);
  Hang shorter;
  shorter.local_rank = 0;
  shorter.silent = absl::Seconds(2);
  EXPECT_TRUE(BlameBefore(longer, shorter));
  EXPECT_FALSE(BlameBefore(shorter, longer));
  shorter.silent = absl::Seconds(3);
  shorter.waiting = true;
  EXPECT_TRUE(BlameBefore(longer, shorter));
  EXPECT_FALSE(BlameBefore(longer, longer));
}

TEST(HangDetectorTest, WatchRestartsARankAndForgetEndsIt) {
  Harness h(Timeouts(10, 2));
  h.d().Watch(2, At(0));
  EXPECT_FALSE(h.At(2, 1, 40));
  // Replaced in place at 2.5: a fresh process, slot zeroed, first window again.
  h.d().Watch(2, At(2.5));
  EXPECT_FALSE(h.At(2, 12.5, 0));
  EXPECT_TRUE(h.At(2, 12.55, 0));
  h.d().Watch(2, At(20));
  h.d().Forget(2);
  EXPECT_FALSE(h.At(2, 100, 0));
  EXPECT_FALSE(h.d().watching(2));
  // Ranks are independent.
  h.d().Watch(0, At(0));
  h.d().Watch(1, At(0));
  EXPECT_FALSE(h.At(0, 1, 1));
  EXPECT_FALSE(h.At(1, 1, 1));
  EXPECT_FALSE(h.At(0, 3.0, 2));
  std::optional<Hang> hang = h.At(1, 3.05, 1);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->local_rank, 1);
  EXPECT_TRUE(h.d().watching(0));
}

TEST(HangDetectorTest, DetectedWithinTimeoutPlusTwoPollPeriodsOfTheLastReport) {
  // The runtime reads every PollPeriod(); a rank reports every 10 ms until it hangs at an
  // arbitrary moment. Detection comes within the timeout + 100 ms of its last report.
  for (double hang_at : {0.01, 1.003, 1.049, 1.051, 7.777}) {
    Harness h(Timeouts(0, 2));
    h.d().Watch(0, At(0));
    const double period = absl::ToDoubleSeconds(h.d().PollPeriod());
    double last_report = 0;
    uint64_t counter = 0;
    std::optional<double> detected;
    for (int i = 1; i < 1000 && !detected; ++i) {
      const double t = i * period;
      while (last_report + 0.01 <= t && last_report + 0.01 <= hang_at) {
        last_report += 0.01;
        ++counter;
      }
      if (h.At(0, t, counter)) detected = t;
    }
    ASSERT_TRUE(detected) << hang_at;
    EXPECT_GT(*detected - last_report, 2.0) << hang_at;
    EXPECT_LE(*detected - last_report, 2.1 + 1e-9) << hang_at;
  }
}

}  // namespace
}  // namespace dgt::agent
