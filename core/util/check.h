// KVSERVE_CHECK: aborts on a broken invariant (never for bad input or
// capacity failures, which are absl::Status return values).
#ifndef KVSERVE_CORE_UTIL_CHECK_H_
#define KVSERVE_CORE_UTIL_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define KVSERVE_CHECK(cond)                                                 \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

#endif  // KVSERVE_CORE_UTIL_CHECK_H_
