// Fingerprint: a stable 64-bit content hash (XXH64, chained) of a model's
// weight bytes, printed as 16 hex digits. Unlike absl::Hash it is the same in
// every process and on every run, so clients can compare models by it.
//
// Thread-safety: a Fingerprint is a plain value; not for concurrent mutation.
#ifndef KVSERVE_CORE_MODEL_FINGERPRINT_H_
#define KVSERVE_CORE_MODEL_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/util/xxhash64.h"

namespace kvserve {

class Fingerprint {
 public:
  // Mixes `size` bytes into the state: state = XXH64(bytes, seed = state).
  void Add(const void* data, size_t size) {
    state_ = Xxh64(data, size, state_);
  }
  void Add(std::string_view s) { Add(s.data(), s.size()); }
  uint64_t value() const { return state_; }
  std::string Hex() const;

 private:
  uint64_t state_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_FINGERPRINT_H_
