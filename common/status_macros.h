// Small helpers for absl::Status propagation. Our Abseil (Debian, 2022) ships no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so dgt keeps these two here.
#ifndef DGT_COMMON_STATUS_MACROS_H_
#define DGT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DGT_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status dgt_status_ = (expr);       \
    if (!dgt_status_.ok()) return dgt_status_; \
  } while (0)

#define DGT_STATUS_CONCAT_INNER_(a, b) a##b
#define DGT_STATUS_CONCAT_(a, b) DGT_STATUS_CONCAT_INNER_(a, b)

// DGT_ASSIGN_OR_RETURN(auto x, F()) declares x from an absl::StatusOr, or returns its status.
#define DGT_ASSIGN_OR_RETURN(lhs, expr) \
  DGT_ASSIGN_OR_RETURN_IMPL_(DGT_STATUS_CONCAT_(dgt_statusor_, __LINE__), lhs, expr)
#define DGT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // DGT_COMMON_STATUS_MACROS_H_
