// Reading a whole (small) file: configuration, templates, /proc entries.
#ifndef KVSERVE_CORE_UTIL_FILE_H_
#define KVSERVE_CORE_UTIL_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve {

// The file's bytes. NOT_FOUND when it does not exist, INVALID_ARGUMENT when
// it holds more than max_bytes, otherwise the errno's reason; every error
// names the path.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes = int64_t{64}
                                                              << 20);

// As ReadSmallFile, for files whose absence is normal (/proc and cgroup
// entries): nullopt on any error.
std::optional<std::string> ReadFileIfPresent(const std::string& path);

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_FILE_H_
