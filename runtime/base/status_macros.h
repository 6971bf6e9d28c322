// Status plumbing shared by every layer above kernels/: the two DT_ macros.
// Abseil 20220623 has Status/StatusOr but not ABSL_RETURN_IF_ERROR, so we define our own.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DT_STATUS_CONCAT_INNER(a, b) a##b
#define DT_STATUS_CONCAT(a, b) DT_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define DT_RETURN_IF_ERROR(expr)                                      \
    do {                                                              \
        if (::absl::Status dt_s_ = (expr); !dt_s_.ok()) return dt_s_; \
    } while (0)

// Evaluates `expr` (a StatusOr<T>) once; on error returns its status, else moves the value to lhs.
#define DT_ASSIGN_OR_RETURN(lhs, expr) \
    DT_ASSIGN_OR_RETURN_IMPL(DT_STATUS_CONCAT(dt_sor_, __LINE__), lhs, expr)
#define DT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)   \
    auto tmp = (expr);                             \
    if (!tmp.ok()) return std::move(tmp).status(); \
    lhs = std::move(tmp).value()
