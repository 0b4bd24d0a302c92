#include "core/util/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvserve {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          int64_t max_bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"),
                                          &std::fclose);
  if (f == nullptr) {
    const std::string message =
        absl::StrFormat("cannot open %s: %s", path, std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(message);
    return absl::FailedPreconditionError(message);
  }
  std::string data;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0) {
    if (static_cast<int64_t>(data.size() + n) > max_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s holds more than %d bytes, the most read", path, max_bytes));
    }
    data.append(buffer, n);
  }
  if (std::ferror(f.get())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot read %s: %s", path, std::strerror(errno)));
  }
  return data;
}

std::optional<std::string> ReadFileIfPresent(const std::string& path) {
  absl::StatusOr<std::string> data = ReadSmallFile(path);
  if (!data.ok()) return std::nullopt;
  return *std::move(data);
}

}  // namespace kvserve
