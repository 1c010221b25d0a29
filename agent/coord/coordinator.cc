#include "agent/coord/coordinator.h"

#include <string>
#include <utility>

namespace dgt::agent {

StaticBackend::StaticBackend(boost::asio::io_context& io, StaticCoordinator::Options options,
                             NodeLifecycle* lifecycle, Sink sink)
    : coordinator_(io, std::move(options)), lifecycle_(lifecycle), sink_(std::move(sink)) {}

void StaticBackend::Start() {
  coordinator_.Start(
      [this](const absl::Status& s) {
        sink_(lifecycle_->OnStaticStarted(s.ok(), s.code() == absl::StatusCode::kAlreadyExists,
                                          std::string(s.message())));
      },
      [this](int exit_status, const std::string& message, bool stopped_by_signal) {
        sink_(lifecycle_->OnStaticRemoteFailure(exit_status, message, stopped_by_signal));
      });
}

void StaticBackend::Report(const actions::Report& report) {
  auto outcome = [this](const absl::Status& others) {
    sink_(lifecycle_->OnStaticOutcome(others.ok(), std::string(others.message())));
  };
  if (report.signal != 0) {
    // The others fail naming this node and the signal, not as if they had been signalled.
    coordinator_.ReportStopped(SignalName(report.signal), std::move(outcome));
  } else if (report.unhealthy) {
    // The others fail naming this node and its check, not as if they were unhealthy.
    coordinator_.ReportUnhealthy(report.text, std::move(outcome));
  } else {
    coordinator_.Report(report.exit_status, report.text, std::move(outcome));
  }
}

}  // namespace dgt::agent
