// Error-propagation macros for absl::Status / absl::StatusOr.
//
// Debian's Abseil (20220623) ships Status and StatusOr but not these macros.
//
//   RETURN_IF_ERROR(DoThing());
//   ASSIGN_OR_RETURN(Plan plan, LoadPlan(path));
#ifndef TRAINC_COMPILER_UTIL_STATUS_MACROS_H_
#define TRAINC_COMPILER_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TRAINC_CONCAT_INNER_(a, b) a##b
#define TRAINC_CONCAT_(a, b) TRAINC_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status trainc_status_ = (expr);        \
    if (!trainc_status_.ok()) return trainc_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(TRAINC_CONCAT_(trainc_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // TRAINC_COMPILER_UTIL_STATUS_MACROS_H_
