#include "core/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvserve {

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(
    const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return absl::NotFoundError(absl::StrFormat("cannot open model file %s: %s",
                                               path, std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("model file %s is not a regular file", path));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return std::shared_ptr<const MappedFile>(
        new MappedFile(nullptr, 0, false, path));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    return absl::InternalError(absl::StrFormat("cannot mmap model file %s: %s",
                                               path, std::strerror(err)));
  }
  return std::shared_ptr<const MappedFile>(
      new MappedFile(static_cast<const uint8_t*>(p), size, true, path));
}

std::shared_ptr<const MappedFile> MappedFile::FromBytes(std::string_view bytes,
                                                        std::string name) {
  return std::shared_ptr<const MappedFile>(
      new MappedFile(reinterpret_cast<const uint8_t*>(bytes.data()),
                     bytes.size(), false, std::move(name)));
}

MappedFile::~MappedFile() {
  if (owned_ && data_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace kvserve
