// MappedFile: a whole file mapped read-only (MAP_PRIVATE), unmapped when the
// last shared_ptr goes. The model loaders read GGUF and llama2.c files
// through it, and the mapping is what ModelWeights::storage keeps alive for
// zero-copy tensors.
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
  MappedFile(const uint8_t* data, uint64_t size, bool owned, std::string name)
      : data_(data), size_(size), owned_(owned), name_(std::move(name)) {}
  const uint8_t* data_;
  uint64_t size_;
  bool owned_;  // munmap on destruction
  std::string name_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_MAPPED_FILE_H_
