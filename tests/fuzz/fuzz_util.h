// Helpers shared by the fuzzers: a check that aborts (so libFuzzer records
// the input as a crash) and the shared test data folder.
#ifndef KVSERVE_TESTS_FUZZ_FUZZ_UTIL_H_
#define KVSERVE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

// A property the code under test promises; a violation is a crash.
#define FUZZ_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, \
                   __LINE__, #cond);                                   \
      std::fprintf(stderr, __VA_ARGS__);                               \
      std::fprintf(stderr, "\n");                                      \
      std::abort();                                                    \
    }                                                                  \
  } while (0)

namespace kvserve::fuzz {

// ../shared, or $KVSERVE_SHARED_DIR when set (fuzz_util.cc).
std::string SharedPath(std::string_view relative);

// The whole file, or nullopt when it cannot be read.
inline std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kvserve::fuzz

#endif  // KVSERVE_TESTS_FUZZ_FUZZ_UTIL_H_
