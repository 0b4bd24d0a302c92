// Software prefetch hints the compiler keeps. GCC 12 finds a helper whose
// body is a loop of __builtin_prefetch / _mm_prefetch calls free of side
// effects and deletes the calls to it before inlining (the decode
// kernels' helpers compiled to nothing; the same loop written inline
// stays). An asm volatile statement is never removed, and GCC and clang
// both accept it.
#ifndef KVSERVE_CORE_UTIL_PREFETCH_H_
#define KVSERVE_CORE_UTIL_PREFETCH_H_

namespace kvserve {

// The line of p into L2 (PREFETCHT1; L1 too on CPUs before Zen 4).
inline void PrefetchL2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_PREFETCH_H_
