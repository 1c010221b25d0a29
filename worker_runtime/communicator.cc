#include "dgt/worker/communicator.h"

#include <utility>

namespace dgt::worker {

void BootstrapCancel::Cancel(absl::string_view reason) {
  std::function<void()> action;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    reason_ = std::string(reason);
    if (!action_) return;
    action = action_;
    running_ = true;
  }
  action();
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  done_.notify_all();
}

bool BootstrapCancel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

std::string BootstrapCancel::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void BootstrapCancel::OnCancel(std::function<void()> action) {
  std::unique_lock<std::mutex> lock(mu_);
  // An action running in Cancel() may use what the caller is about to destroy.
  done_.wait(lock, [this] { return !running_; });
  action_ = std::move(action);
  if (cancelled_ && action_) {
    std::function<void()> run = action_;
    lock.unlock();
    run();
  }
}

}  // namespace dgt::worker
