// Internal to the agent library: a worker's bookkeeping, shared by agent/workers/worker_group.cc
// and agent/workers/worker_group_standby.cc (warm standbys). Not a public header.
#ifndef DGT_AGENT_WORKERS_WORKER_GROUP_INTERNAL_H_
#define DGT_AGENT_WORKERS_WORKER_GROUP_INTERNAL_H_

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/workers/worker_group.h"
#include "boost/asio.hpp"
#include "nlohmann/json.hpp"

namespace dgt::agent {

// What is pending of one output stream. Output is forwarded in segments: text up to a '\n' (a
// line), or up to a '\r' (a progress bar redrawing its line, as tqdm writes "\r 10%|█ |").
struct StreamState {
  std::string partial;    // The current segment, not terminated yet.
  size_t previewed = 0;   // Leading bytes of `partial` already shown on the console.
  bool carriage = false;  // The last segment ended with '\r': the stream draws a progress bar.
};

// Whether argv[0] names a CPython interpreter: its file name is "python" followed by nothing
// but a version ("python", "python3", "python3.11"; any directory).
bool LooksLikePython(const std::vector<std::string>& argv);

// Adds "env" (and "env_b64" for entries whose bytes are not UTF-8: [base64 key, base64 value]
// pairs) to a standby's or the fork server's message, from "KEY=VALUE" entries.
void AddEnvToMessage(const std::vector<std::string>& env, nlohmann::json* message);

// Opens the spec's stdout and stderr log files for appending (O_CLOEXEC); -1 where the spec
// names none. The caller closes them. Errors: from open(2), with the path; nothing left open.
absl::StatusOr<std::array<int, 2>> OpenLogFiles(const WorkerSpec& spec);

struct WorkerGroup::Worker {
  Worker(boost::asio::io_context& io) : pidfd(io), out(io), err(io), channel(io) {}
  ~Worker() {
    if (out_file >= 0) ::close(out_file);
    if (err_file >= 0) ::close(err_file);
  }
  int local_rank = 0;
  int rank = 0;
  int attempt = 0;
  pid_t pid = 0;
  int out_file = -1;
  int err_file = -1;
  bool out_console = true;
  bool err_console = true;
  bool exited = false;
  // A standby until activated; `ready` once it wrote "ready\n" on its channel.
  bool standby = false;
  bool ready = false;
  std::vector<std::string> argv;  // A standby's, to extend at activation.
  // A child of the fork server: `ended` once its pidfd fired, `forked_status` once the server
  // reported its waitpid status (-1 before); its exit is reported when both are in.
  bool forked = false;
  bool ended = false;
  int forked_status = -1;
  int pipes_open = 2;  // Its stdout and stderr pipes not at EOF yet.
  std::string prefix;
  std::shared_ptr<FilteredLog> out_filtered;
  std::shared_ptr<FilteredLog> err_filtered;
  boost::asio::posix::stream_descriptor pidfd;
  boost::asio::posix::stream_descriptor out;
  boost::asio::posix::stream_descriptor err;
  boost::asio::posix::stream_descriptor channel;  // A standby's; closed once activated.
  std::string channel_data;
  std::array<char, 64> channel_buf;
  StreamState out_state;
  StreamState err_state;
  std::array<char, 16384> out_buf;
  std::array<char, 16384> err_buf;
  std::deque<std::string> stderr_tail;
  // A standby's: run once both its output pipes reached EOF (PipeClosed).
  std::function<void()> on_pipes_closed;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_WORKERS_WORKER_GROUP_INTERNAL_H_
