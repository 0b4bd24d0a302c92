// KVSERVE_RETURN_IF_ERROR(expr): returns the absl::Status `expr` from the
// enclosing function unless it is OK.
#ifndef KVSERVE_CORE_UTIL_STATUS_MACROS_H_
#define KVSERVE_CORE_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"

#define KVSERVE_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    if (absl::Status kvserve_status_ = (expr); !kvserve_status_.ok()) { \
      return kvserve_status_;                                           \
    }                                                                   \
  } while (0)

#endif  // KVSERVE_CORE_UTIL_STATUS_MACROS_H_
