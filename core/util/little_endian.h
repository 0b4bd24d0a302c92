// Little-endian fixed-width integers in byte strings: the on-disk byte order
// of session logs and KV snapshots, whatever the CPU's.
//
// Get* read exactly 4 or 8 bytes at `p`; the caller checks the bounds.
#ifndef KVSERVE_CORE_UTIL_LITTLE_ENDIAN_H_
#define KVSERVE_CORE_UTIL_LITTLE_ENDIAN_H_

#include <cstdint>
#include <string>

namespace kvserve {

inline void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

inline uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_LITTLE_ENDIAN_H_
