// absl::Status plumbing used throughout the core.
#ifndef ZERO_CORE_COMMON_STATUS_MACROS_H_
#define ZERO_CORE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZERO_CONCAT_INNER(a, b) a##b
#define ZERO_CONCAT(a, b) ZERO_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status _zero_status = (expr);      \
    if (!_zero_status.ok()) return _zero_status; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ZERO_CONCAT(_zero_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#endif  // ZERO_CORE_COMMON_STATUS_MACROS_H_
