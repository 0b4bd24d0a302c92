// XXH64 (Debian's libxxhash): a fast, stable 64-bit hash of bytes, the same
// in every process, on every run and on every CPU. Checksums of session logs
// and KV snapshots and the model fingerprint (core/model/fingerprint.h) are
// made with it, so its output must never change.
#ifndef KVSERVE_CORE_UTIL_XXHASH64_H_
#define KVSERVE_CORE_UTIL_XXHASH64_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace kvserve {

// XXH64 of `size` bytes at `data`.
inline uint64_t Xxh64(const void* data, size_t size, uint64_t seed) {
  return XXH64(data, size, seed);
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_XXHASH64_H_
