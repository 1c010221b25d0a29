// The daemon's loop against the in-test jobs service, with a shell script standing in for
// dgt-run: the drain order (Draining, then the cancelled job's exit, then the stream's end),
// systemd notifications, re-registration after a break with the running jobs named, endpoint
// rotation, reload, ReadLog and start failures.
#include "daemon/daemon.h"

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "dgt/rendezvous/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replica/leadership_status.h"
#include "spdlog/sinks/ostream_sink.h"
#include "tests/daemon/fake_jobs_service.h"
#include "tests/testutil/log_capture.h"

namespace dgt::daemon {
namespace {

using ::dgt::testing::LogCapture;

namespace fs = std::filesystem;
using testing::DescribeAll;
using ::testing::ElementsAre;
using testing::FakeJobsService;

// clang-format off
constexpr char kFakeDgtRun[] = R"sh(#!/bin/sh
trap 'echo "dgt-run got TERM"; exit 143' TERM
echo "args: $*"
case "$*" in *quick*) echo "quick job done"; exit 7;; esac
case "$*" in *on-release*) echo $$ > pid; for i in $(seq 300); do [ -e release ] && exit 0; sleep 0.05; done; exit 9;; esac
case "$*" in *whoami*) echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) user=$USER home=$HOME pwd=$(pwd) env=$(env | sort | tr '\n' ' ')"; exit 0;; esac
sleep 30 &
wait
)sh";
// clang-format on

std::string CurrentUser() {
  const struct passwd* pw = ::getpwuid(::geteuid());
  return pw != nullptr ? pw->pw_name : "root";
}

// A port nothing listens on (bound once, then closed).
std::string DeadEndpoint() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class FakeVerbs final : public worker::VerbsApi {
 public:
  absl::StatusOr<std::vector<worker::IbDevice>> ListDevices() override {
    return std::vector<worker::IbDevice>{{"mlx5_0", {}}, {"mlx5_1", {}}};
  }
};

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dgt-daemon-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);  // The run-as user of RunsJobsAsTheConfiguredUser enters it.
    const std::string script = dir_ + "/fake-dgt-run";
    std::ofstream(script) << kFakeDgtRun;
    ::chmod(script.c_str(), 0755);
    config_.rendezvous_endpoints = {service_.endpoint()};
    config_.node_name = "node-t";
    config_.run_as_user = CurrentUser();
    config_.allow_root = true;
    config_.work_dir = dir_ + "/jobs";
    config_.dgt_run = script;
    config_.stop_grace_s = 5;
    env_.hostname = "host-t";
    env_.dev_dir = dir_ + "/dev";
    fs::create_directories(env_.dev_dir);
    for (const char* f : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}) {
      std::ofstream(env_.dev_dir + "/" + f);
    }
    // The built-in health checks read a tree of the test's: no InfiniBand, a writable /dev/shm.
    fs::create_directories(dir_ + "/root/dev/shm");
    health_fs_ = agent::SystemHealthFs(dir_ + "/root");
    env_.health_fs = health_fs_.get();
    config_.health.min_shm_size = 1024;
    env_.connect_timeout = absl::Milliseconds(300);
    env_.max_backoff = absl::Milliseconds(400);
    env_.notify = [this](const std::string& s) {
      dgt::MutexLock lock(&mu_);
      notes_.push_back(s);
    };
  }
  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->RequestStop();
      if (done_.valid()) done_.wait_for(std::chrono::seconds(20));
    }
    fs::remove_all(dir_);
  }

  void StartDaemon() {
    daemon_ = std::make_unique<Daemon>(config_, env_);
    done_ = std::async(std::launch::async, [this] { return daemon_->Run(); });
  }
  int StopDaemon() {
    daemon_->RequestStop();
    EXPECT_EQ(done_.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    const int rc = done_.get();
    daemon_.reset();
    return rc;
  }
  std::vector<std::string> Notes() {
    dgt::MutexLock lock(&mu_);
    return notes_;
  }
  bool WaitForCount(const std::string& line, size_t n, absl::Duration timeout = absl::Seconds(15)) {
    return service_.WaitFor(
        [&](const auto& ms) {
          auto d = DescribeAll(ms);
          return static_cast<size_t>(std::count(d.begin(), d.end(), line)) >= n;
        },
        timeout);
  }
  bool WaitFor(const std::string& line) { return WaitForCount(line, 1); }

  static dgt::jobs::v1::ControlMessage StartJob(const std::string& id, const std::string& cmd) {
    dgt::jobs::v1::ControlMessage m;
    auto* s = m.mutable_start();
    s->set_job_id(id);
    s->set_rdzv_endpoint("127.0.0.1:1");
    s->mutable_spec()->set_command(cmd);
    s->mutable_spec()->set_instance_count(1);
    s->mutable_spec()->mutable_distribution()->set_process_count_per_instance(2);
    return m;
  }

  FakeJobsService service_;
  FakeVerbs verbs_;  // Set as env_.verbs by a test; it outlives the daemon.
  std::string dir_;
  std::unique_ptr<agent::HealthFs> health_fs_;
  AgentConfig config_;
  DaemonEnv env_;
  std::unique_ptr<Daemon> daemon_;
  std::future<int> done_;
  dgt::Mutex mu_;
  std::vector<std::string> notes_;
};

TEST_F(DaemonTest, DrainStopsJobsThenDeregisters) {
  env_.verbs = &verbs_;
  config_.advertise_address = "10.9.8.7";
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  const auto hello = service_.received()[0].hello();
  EXPECT_EQ(hello.hostname(), "host-t");
  EXPECT_EQ(hello.gpu_count(), 2);
  EXPECT_EQ(hello.version(), "0.1.0");
  EXPECT_EQ(hello.running_job_ids_size(), 0);
  EXPECT_THAT(hello.rdma_devices(), ElementsAre("mlx5_0", "mlx5_1"));
  ASSERT_GE(hello.addresses_size(), 1);
  EXPECT_EQ(hello.addresses(0), "10.9.8.7");
  service_.Send(StartJob("job-1", "sleep 30"));
  ASSERT_TRUE(WaitFor("update job-1 started 0"));
  // The script has set its trap once it has printed its arguments.
  const std::string log_path = dir_ + "/jobs/job-1/dgt-run.log";
  const absl::Time up_by = absl::Now() + absl::Seconds(10);
  while (Slurp(log_path).find("args:") == std::string::npos && absl::Now() < up_by) {
    absl::SleepFor(absl::Milliseconds(20));
  }

  const absl::Time stop = absl::Now();
  EXPECT_EQ(StopDaemon(), 0);
  EXPECT_LT(absl::Now() - stop, absl::Seconds(5));  // SIGTERM sufficed: no SIGKILL wait.
  EXPECT_THAT(DescribeAll(service_.received()),
              ElementsAre("hello node-t", "update job-1 started 0", "draining",
                          "update job-1 exited 143", "<end>"));
  EXPECT_EQ(service_.received()[3].update().message(), "dgt-run got TERM");
  std::ifstream log(dir_ + "/jobs/job-1/dgt-run.log");
  std::string first;
  std::getline(log, first);
  EXPECT_EQ(first,
            "args: --nnodes=1 --nproc-per-node=2 --rdzv-backend=dgt "
            "--rdzv-endpoint=127.0.0.1:1 --rdzv-id=job-1 --node-id=node-t --local-addr=10.9.8.7 "
            "--max-restarts=0 --restart-policy=group --log-dir " +
                dir_ +
                "/jobs/job-1/logs --redirects 3 --min-shm-size=1024 --no-python -- "
                "/bin/sh -c sleep 30");

  const auto notes = Notes();
  const std::string ep = service_.endpoint();
  auto at = [&](const std::string& s) {
    return std::find(notes.begin(), notes.end(), s) - notes.begin();
  };
  ASSERT_TRUE(Has(notes, "READY=1"));
  EXPECT_LT(at("STATUS=connecting to " + ep), at("READY=1"));
  EXPECT_LT(at("READY=1"), at("STATUS=registered with " + ep + "; running job-1"));
  EXPECT_LT(at("STATUS=registered with " + ep + "; running job-1"),
            at("STATUS=draining; stopping 1 job(s)"));
  EXPECT_EQ(std::count(notes.begin(), notes.end(), "READY=1"), 1);
  EXPECT_FALSE(Has(notes, "WATCHDOG=1"));  // No watchdog interval given.
}

TEST_F(DaemonTest, ReregistersRotatesReloadsAndReportsJobs) {
  LogCapture capture(spdlog::level::debug);
  config_.rendezvous_endpoints = {DeadEndpoint(), service_.endpoint()};
  env_.watchdog_interval = absl::Milliseconds(50);
  AgentConfig reloaded = config_;
  reloaded.labels = {{"zone", "b"}};
  dgt::Mutex reload_mu;
  bool reload_ok = false;
  env_.reload = [&]() -> absl::StatusOr<AgentConfig> {
    dgt::MutexLock lock(&reload_mu);
    if (!reload_ok) return absl::InvalidArgumentError("agent.yaml: labels: bad");
    return reloaded;
  };
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));  // After the dead first endpoint.

  // A job that ends by itself: its exit code and last line.
  service_.Send(StartJob("job-q", "quick"));
  ASSERT_TRUE(WaitFor("update job-q exited 7"));
  auto ms = service_.received();
  EXPECT_EQ(ms.back().update().message(), "quick job done");

  // ReadLog: unknown job, bad rank.
  dgt::jobs::v1::ControlMessage read;
  read.mutable_read_log()->set_request_id(41);
  read.mutable_read_log()->set_job_id("job-x");
  service_.Send(read);
  ASSERT_TRUE(WaitFor("log 41 5"));
  read.mutable_read_log()->set_request_id(42);
  read.mutable_read_log()->set_job_id("Bad/Id");
  service_.Send(read);
  ASSERT_TRUE(WaitFor("log 42 3"));
  EXPECT_EQ(service_.received().back().log().error(),
            "job id must be 1..64 bytes of [a-z0-9-], got 'Bad/Id'");

  // A bad spec is answered "exited" with the reason.
  auto bad = StartJob("job-b", "true");
  bad.mutable_start()->mutable_spec()->mutable_distribution()->set_type("mpi");
  service_.Send(bad);
  ASSERT_TRUE(WaitFor("update job-b exited 1"));
  EXPECT_EQ(service_.received().back().update().message(),
            "could not start: job job-b: distribution.type must be pytorch or tensorflow, got "
            "'mpi' (mpi is not supported by dgt-run)");

  // A running job survives a failed reload untouched, and a good one registers again with the
  // new labels and the running job named.
  auto job2 = StartJob("job-2", "sleep 30");
  job2.mutable_start()->set_uid("00ff");
  job2.mutable_start()->add_job_nodes("node-t");
  job2.mutable_start()->set_submitted_unix_s(123);
  service_.Send(job2);
  ASSERT_TRUE(WaitFor("update job-2 started 0"));
  {
    std::ifstream uid_file(config_.work_dir + "/job-2/job-uid");
    std::string uid;
    std::getline(uid_file, uid);
    EXPECT_EQ(uid, "00ff");
  }
  daemon_->RequestReload();
  absl::SleepFor(absl::Milliseconds(300));
  const auto before = DescribeAll(service_.received());
  EXPECT_EQ(std::count(before.begin(), before.end(), "hello node-t"), 1);
  {
    dgt::MutexLock lock(&reload_mu);
    reload_ok = true;
  }
  daemon_->RequestReload();
  ASSERT_TRUE(WaitForCount("hello node-t", 2));
  ms = service_.received();
  const auto second =
      std::find_if(ms.rbegin(), ms.rend(), [](const auto& m) { return m.has_hello(); })->hello();
  EXPECT_EQ(second.labels().at("zone"), "b");
  ASSERT_EQ(second.running_job_ids_size(), 1);
  EXPECT_EQ(second.running_job_ids(0), "job-2");
  // With the StartJob it was sent: a restarted service adopts the job from it.
  ASSERT_EQ(second.running_jobs_size(), 1);
  EXPECT_EQ(second.running_jobs(0).DebugString(), job2.start().DebugString());

  // CancelJob with a grace: SIGTERM, the script's own exit.
  dgt::jobs::v1::ControlMessage cancel;
  cancel.mutable_cancel()->set_job_id("job-2");
  cancel.mutable_cancel()->set_grace_s(3);
  service_.Send(cancel);
  ASSERT_TRUE(WaitFor("update job-2 exited 143"));
  EXPECT_EQ(StopDaemon(), 0);
  // The stream the reload ended on purpose is no warning.
  const auto lines = capture.lines();
  const std::string ep = service_.endpoint();
  EXPECT_EQ(std::count(lines.begin(), lines.end(),
                       "info registration with " + ep +
                           " ended for the reloaded config; registering again"),
            1);
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [&](const std::string& l) {
                            return absl::StartsWith(l, "warning registration with " + ep);
                          }),
            0);
  const auto notes = Notes();
  EXPECT_GE(std::count(notes.begin(), notes.end(), "WATCHDOG=1"), 2);
  EXPECT_EQ(std::count(notes.begin(), notes.end(), "READY=1"), 1);
}

// The leader is lost and the job ends before the node registers again (with the next replica):
// the NodeHello still lists the job, with its StartJob, and its exit follows. Without it, the new
// leader counted the job lost on this node and failed or replaced a job that had succeeded.
TEST_F(DaemonTest, AJobThatEndsWhileUnregisteredIsListedUntilItsExitIsSent) {
  FakeJobsService next;
  next.RefuseWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no leader yet"));
  config_.rendezvous_endpoints = {service_.endpoint(), next.endpoint()};
  AgentConfig relabelled = config_;
  relabelled.labels = {{"zone", "b"}};
  env_.reload = [&]() -> absl::StatusOr<AgentConfig> { return relabelled; };
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  auto start = StartJob("job-e", "on-release");
  start.mutable_start()->set_uid("0e");
  service_.Send(start);
  ASSERT_TRUE(WaitFor("update job-e started 0"));
  const std::string job_dir = config_.work_dir + "/job-e";
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (Slurp(job_dir + "/pid").empty()) {
    ASSERT_LT(absl::Now(), deadline) << "the job wrote no pid";
    absl::SleepFor(absl::Milliseconds(20));
  }
  const pid_t pid = std::stoi(Slurp(job_dir + "/pid"));
  service_.Shutdown();  // The leader is gone: the stream breaks.
  while (next.refused() == 0) {
    ASSERT_LT(absl::Now(), deadline) << "no registration attempt at the next replica";
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::ofstream(job_dir + "/release");
  while (::kill(pid, 0) == 0) {  // Until the daemon reaped it (a zombie answers kill 0).
    ASSERT_LT(absl::Now(), deadline) << "the job did not end";
    absl::SleepFor(absl::Milliseconds(20));
  }
  next.Accept();
  ASSERT_TRUE(next.WaitFor(
      [](const auto& ms) {
        auto d = DescribeAll(ms);
        return std::count(d.begin(), d.end(), "update job-e exited 0") == 1;
      },
      absl::Seconds(15)));
  const auto ms = next.received();
  EXPECT_THAT(DescribeAll(ms), ElementsAre("hello node-t", "update job-e exited 0"));
  ASSERT_EQ(ms[0].hello().running_job_ids_size(), 1);
  EXPECT_EQ(ms[0].hello().running_job_ids(0), "job-e");
  ASSERT_EQ(ms[0].hello().running_jobs_size(), 1);
  EXPECT_EQ(ms[0].hello().running_jobs(0).DebugString(), start.start().DebugString());
  // Reported: a later registration lists it no more.
  daemon_->RequestReload();  // New labels: the node registers again.
  ASSERT_TRUE(next.WaitFor(
      [](const auto& ms) {
        auto d = DescribeAll(ms);
        return std::count(d.begin(), d.end(), "hello node-t") == 2;
      },
      absl::Seconds(15)));
  const auto again = next.received();
  const auto last =
      std::find_if(again.rbegin(), again.rend(), [](const auto& m) { return m.has_hello(); });
  EXPECT_EQ(last->hello().running_job_ids_size(), 0);
  EXPECT_EQ(StopDaemon(), 0);
}

TEST_F(DaemonTest, RunsJobsAsTheConfiguredUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  const struct passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const uid_t uid = nobody->pw_uid;
  const gid_t gid = nobody->pw_gid;
  const std::string home = nobody->pw_dir;
  const std::string shell = nobody->pw_shell;
  config_.run_as_user = "nobody";
  config_.allow_root = false;
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  service_.Send(StartJob("job-u", "whoami"));
  ASSERT_TRUE(WaitFor("update job-u exited 0"));
  // The job's environment is exactly what the contract lists (PWD is the shell's own).
  const std::string job_dir = dir_ + "/jobs/job-u";
  EXPECT_EQ(service_.received().back().update().message(),
            "uid=" + std::to_string(uid) + " gid=" + std::to_string(gid) +
                " groups=" + std::to_string(gid) + " user=nobody home=" + home + " pwd=" + job_dir +
                " env=HOME=" + home + " LOGNAME=nobody PATH=/usr/local/bin:/usr/bin:/bin PWD=" +
                job_dir + " SHELL=" + shell + " USER=nobody");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/jobs/job-u").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  EXPECT_EQ(StopDaemon(), 0);
}

// A standby replica (replica::StandbyStatus) hands over to the next endpoint; a refusal of another
// kind (ALREADY_EXISTS: the name is registered) retries the same endpoint, backing off.
TEST_F(DaemonTest, RotatesPastAStandbyButNotPastARefusal) {
  FakeJobsService standby;
  standby.RefuseWith(replica::StandbyStatus("r2", "10.0.0.1:29400"));
  config_.rendezvous_endpoints = {standby.endpoint(), service_.endpoint()};
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  EXPECT_EQ(standby.refused(), 1);
  EXPECT_EQ(StopDaemon(), 0);

  FakeJobsService taken;
  taken.RefuseWith(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "node-t is registered"));
  config_.rendezvous_endpoints = {taken.endpoint(), service_.endpoint()};
  StartDaemon();
  // 200 + 400 + 400 + 400 ms of backoff (max_backoff 400 ms here): 4 or 5 refusals in 1.6 s
  // (fewer on a loaded machine, never more: the backoff holds), and no hello at the second
  // endpoint.
  absl::SleepFor(absl::Milliseconds(1600));
  EXPECT_GE(taken.refused(), 2);
  EXPECT_LE(taken.refused(), 6);
  const auto d = DescribeAll(service_.received());
  EXPECT_EQ(std::count(d.begin(), d.end(), "hello node-t"), 1);  // The first daemon's only.
  EXPECT_EQ(StopDaemon(), 0);
}

// A standby that still names a dead leader (the leader was just killed): the redirect to it is
// refused at once, and the daemon goes on to the next endpoint without waiting out
// connect_timeout (20 s here, longer than WaitFor's 15 s).
TEST_F(DaemonTest, ARefusedLeaderRedirectMovesOnAtOnce) {
  const std::string dead = DeadEndpoint();
  FakeJobsService standby;
  standby.RefuseWith(replica::StandbyStatus("r2", dead));
  config_.rendezvous_endpoints = {standby.endpoint(), dead, service_.endpoint()};
  env_.connect_timeout = absl::Seconds(20);
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  EXPECT_EQ(standby.refused(), 1);
  EXPECT_EQ(StopDaemon(), 0);
}

// A gRPC server with dgt.rendezvous.v1 only (as dgt-run's embedded rendezvous: no
// dgt.jobs.v1.Jobs): Register ends UNIMPLEMENTED. The daemon names the code and the service it
// lacks, and logs it once however often it retries (repeats at debug level).
TEST_F(DaemonTest, NamesUnimplementedOnceAcrossRetries) {
  int port = 0;
  dgt::rendezvous::v1::Rendezvous::Service rendezvous_only;  // Every method UNIMPLEMENTED.
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&rendezvous_only);
  std::unique_ptr<grpc::Server> bare = builder.BuildAndStart();
  ASSERT_NE(bare, nullptr);
  const std::string old = "127.0.0.1:" + std::to_string(port);
  config_.rendezvous_endpoints = {old};
  std::vector<std::string> lines;
  {
    LogCapture log(spdlog::level::debug);
    StartDaemon();
    // 200 + 400 + 400 ms of backoff (max_backoff 400 ms): at least 3 passes in 2 s.
    absl::SleepFor(absl::Seconds(2));
    EXPECT_EQ(StopDaemon(), 0);
    lines = log.lines();
  }
  bare->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const std::string ended = "registration with " + old + " ended: UNIMPLEMENTED: " + old +
                            " does not serve dgt.jobs.v1.Jobs (an older dgt-rendezvous, or the "
                            "one embedded in dgt-run?); trying the next endpoint";
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "warning " + ended), 1);
  EXPECT_GE(std::count(lines.begin(), lines.end(), "debug " + ended), 2);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "info registering node node-t with " + old), 1);
  EXPECT_FALSE(Has(Notes(), "READY=1"));
  EXPECT_TRUE(Has(Notes(), "STATUS=connecting to " + old));
}

// A service that takes the stream and never answers Registered: given up after
// register_timeout, and logged once however often it recurs.
TEST_F(DaemonTest, ASilentServiceIsLoggedOnce) {
  class Silent final : public dgt::jobs::v1::Jobs::Service {
    grpc::Status Register(grpc::ServerContext* context,
                          grpc::ServerReaderWriter<dgt::jobs::v1::ControlMessage,
                                                   dgt::jobs::v1::NodeMessage>*) override {
      for (int i = 0; i < 100 && !context->IsCancelled(); ++i) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      return grpc::Status::OK;
    }
  } silent;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&silent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  config_.rendezvous_endpoints = {endpoint};
  env_.register_timeout = absl::Milliseconds(200);
  std::vector<std::string> lines;
  {
    LogCapture log(spdlog::level::debug);
    StartDaemon();
    // Each pass: 200 ms waiting for Registered, then 200..400 ms of backoff: 3 or more in 2 s.
    absl::SleepFor(absl::Seconds(2));
    EXPECT_EQ(StopDaemon(), 0);
    lines = log.lines();
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const std::string ended =
      "registration with " + endpoint + " ended: no Registered within 200ms; given up; retrying";
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "warning " + ended), 1);
  EXPECT_GE(std::count(lines.begin(), lines.end(), "debug " + ended), 2);
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) { return absl::StartsWith(l, "warning"); }),
            1);
}

// A standby that names the leader (NotLeader.leader_address, as jobs/jobs_service.h answers) sends
// the next attempt to that endpoint when it is listed, ahead of the endpoints between them.
TEST_F(DaemonTest, GoesToTheLeaderAStandbyNames) {
  FakeJobsService standby;
  FakeJobsService other;
  standby.RefuseWith(replica::StandbyStatus("r2", service_.endpoint()));
  config_.rendezvous_endpoints = {standby.endpoint(), other.endpoint(), service_.endpoint()};
  std::vector<std::string> lines;
  {
    LogCapture log(spdlog::level::debug);
    StartDaemon();
    ASSERT_TRUE(WaitFor("hello node-t"));
    EXPECT_EQ(StopDaemon(), 0);
    lines = log.lines();
  }
  EXPECT_EQ(standby.refused(), 1);
  EXPECT_TRUE(other.received().empty());
  EXPECT_EQ(std::count(lines.begin(), lines.end(),
                       "warning registration with " + standby.endpoint() +
                           " ended: UNAVAILABLE (dgt-rendezvous replica r2 is a standby; "
                           "the leader is " +
                           service_.endpoint() + "); trying the leader, " + service_.endpoint() +
                           ", next"),
            1);
}

// dgt-run gone after the config was checked (a package upgrade): the job ends with 127 and says
// why; the daemon keeps serving.
// The health checks run before the first NodeHello, which carries their verdict, then every
// health_interval_s: each change goes to the service as NodeHealth. Jobs run meanwhile, and their
// reaping takes no check's process (a check that lost its exit status would time out).
TEST_F(DaemonTest, ReportsHealthInTheHelloAndEachChange) {
  const std::string flag = dir_ + "/healthy";
  config_.health.commands = {"test -e " + flag};
  config_.health.interval_s = 0.1;
  const std::string failed =
      "health check 'test -e " + flag + "' failed: exited with code 1: (no output)";
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  const dgt::jobs::v1::NodeHello hello = service_.received().front().hello();
  EXPECT_TRUE(hello.unhealthy());
  EXPECT_EQ(hello.health_reason(), failed);
  const std::string status = "STATUS=registered with " + service_.endpoint() + "; idle; unhealthy";
  for (int i = 0; i < 200 && !Has(Notes(), status); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(Has(Notes(), status));
  std::ofstream(flag) << "";
  ASSERT_TRUE(WaitFor("health ok"));
  for (int i = 0; i < 5; ++i) {
    const std::string id = "job-q" + std::to_string(i);
    service_.Send(StartJob(id, "quick"));
    ASSERT_TRUE(WaitFor("update " + id + " exited 7"));
  }
  fs::remove(flag);
  ASSERT_TRUE(WaitFor("health unhealthy: " + failed));
  std::vector<std::string> health;
  for (const std::string& d : DescribeAll(service_.received())) {
    if (absl::StartsWith(d, "health")) health.push_back(d);
  }
  // Healthy through the jobs: no round failed while they were reaped.
  EXPECT_THAT(health, ElementsAre("health ok", "health unhealthy: " + failed));
  EXPECT_EQ(StopDaemon(), 0);
}

// The first round runs off the main loop: a check that hangs holds back the registration, not
// the loop, and SIGTERM ends the daemon (the check killed) at once.
TEST_F(DaemonTest, AHangingFirstCheckHoldsBackTheRegistrationNotTheLoop) {
  config_.health.commands = {"sleep 300"};
  config_.health.check_timeout_s = 300;
  StartDaemon();
  for (int i = 0; i < 200 && !Has(Notes(), "STATUS=running the health checks"); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(Has(Notes(), "STATUS=running the health checks"));
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time stop = absl::Now();
  EXPECT_EQ(StopDaemon(), 0);
  EXPECT_LT(absl::Now() - stop, absl::Seconds(2));
  EXPECT_TRUE(service_.received().empty());
  EXPECT_FALSE(Has(Notes(), "READY=1"));
}

TEST_F(DaemonTest, AMissingDgtRunEndsTheJobWith127) {
  config_.dgt_run = dir_ + "/no-dgt-run";
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  service_.Send(StartJob("job-m", "true"));
  ASSERT_TRUE(WaitFor("update job-m exited 127"));
  EXPECT_EQ(service_.received().back().update().message(),
            "dgt-agent: cannot execute " + dir_ + "/no-dgt-run: No such file or directory");
  const auto d = DescribeAll(service_.received());
  EXPECT_THAT(d, ElementsAre("hello node-t", "update job-m started 0", "update job-m exited 127"));
  EXPECT_EQ(StopDaemon(), 0);
}

// A code_dir that is not there: the job could not start (1, as docs/EXIT_CODES.md says), with
// the errno, and no dgt-run was started.
TEST_F(DaemonTest, AMissingCodeDirEndsTheJobWith1AndTheErrno) {
  StartDaemon();
  ASSERT_TRUE(WaitFor("hello node-t"));
  auto start = StartJob("job-c", "true");
  start.mutable_start()->mutable_spec()->set_code_dir("/nonexistent/qa3");
  service_.Send(start);
  ASSERT_TRUE(WaitFor("update job-c exited 1"));
  EXPECT_EQ(service_.received().back().update().message(),
            "could not start: cannot change to the job's directory /nonexistent/qa3: No such file "
            "or directory");
  EXPECT_THAT(DescribeAll(service_.received()),
              ElementsAre("hello node-t", "update job-c exited 1"));
  EXPECT_EQ(StopDaemon(), 0);
}

}  // namespace
}  // namespace dgt::daemon
