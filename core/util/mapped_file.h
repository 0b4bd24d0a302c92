// MappedFile: a whole file's bytes, read-only, unmapped when the last
// shared_ptr goes. The model loaders read GGUF and llama2.c files through
// it, and it is what ModelWeights::storage keeps alive for zero-copy
// tensors. Two ways to get the bytes:
//   Open  maps the file (MAP_PRIVATE): no copy, pages are read on first
//         use and shared with the page cache. The file must not change while
//         mapped: pages past a truncated end raise SIGBUS when touched, and
//         bytes rewritten in place show through.
//   Read  reads the file into anonymous memory: the load costs a copy and
//         the bytes count as the process's own memory, but later changes to
//         the file, truncation included, do not reach them.
//
// Thread-safety: immutable after creation; safe to share across threads.
#ifndef KVSERVE_CORE_UTIL_MAPPED_FILE_H_
#define KVSERVE_CORE_UTIL_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace kvserve {

class MappedFile {
 public:
  // NOT_FOUND when the file cannot be opened, INVALID_ARGUMENT when it is
  // not a regular file. An empty file maps to no bytes.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(
      const std::string& path);
  // As Open, with the bytes read into a private anonymous mapping (page
  // aligned, as a file mapping is). INTERNAL when reading fails or the file
  // shrinks while it is read.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Read(
      const std::string& path);
  // Wraps bytes owned by the caller (tests); `bytes` must outlive this.
  static std::shared_ptr<const MappedFile> FromBytes(std::string_view bytes,
                                                     std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::string_view bytes() const {
    return {reinterpret_cast<const char*>(data_), size_};
  }
  const std::string& name() const { return name_; }

 private:
  // Open (map) or Read (!map).
  static absl::StatusOr<std::shared_ptr<const MappedFile>> OpenAs(
      const std::string& path, bool map);
  MappedFile(const uint8_t* data, uint64_t size, bool owned, std::string name)
      : data_(data), size_(size), owned_(owned), name_(std::move(name)) {}
  const uint8_t* data_;
  uint64_t size_;
  bool owned_;  // munmap on destruction
  std::string name_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_MAPPED_FILE_H_
