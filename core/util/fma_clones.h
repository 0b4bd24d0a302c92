// KVSERVE_FMA_CLONES: builds a function twice, for AVX2 + FMA CPUs and for
// baseline x86-64 (where std::fma is libm's: the same bits, slower), and
// picks one when the binary loads (GCC's target_clones, an ifunc). For
// plain-C++ loops that compute llama.cpp's values with std::fma (no
// intrinsics). Off under clang (the fuzz build) and the sanitizers, whose
// runtimes are not up when ifunc resolvers run.
#ifndef KVSERVE_CORE_UTIL_FMA_CLONES_H_
#define KVSERVE_CORE_UTIL_FMA_CLONES_H_

#if defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define KVSERVE_FMA_CLONES \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KVSERVE_FMA_CLONES
#endif

#endif  // KVSERVE_CORE_UTIL_FMA_CLONES_H_
