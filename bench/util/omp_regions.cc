#include "bench/util/omp_regions.h"

#include <dlfcn.h>

#include <atomic>

namespace kvserve::bench {
namespace {

std::atomic<int64_t> g_regions{0};

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

int64_t OmpRegionCount() { return g_regions.load(); }

}  // namespace kvserve::bench

using kvserve::bench::g_regions;
using kvserve::bench::Real;

extern "C" {

using OmpFn = void (*)(void*);

void GOMP_parallel(OmpFn fn, void* data, unsigned threads, unsigned flags) {
  using F = void (*)(OmpFn, void*, unsigned, unsigned);
  static const F real = Real<F>("GOMP_parallel");
  if (threads != 1) ++g_regions;  // 1: an `if` clause that was false
  real(fn, data, threads, flags);
}

// `#pragma omp parallel for schedule(...)`: one region each.
#define KVSERVE_COUNT_LOOP(name)                                            \
  void name(OmpFn fn, void* data, unsigned threads, long start, long end,   \
            long incr, long chunk, unsigned flags) {                        \
    using F =                                                               \
        void (*)(OmpFn, void*, unsigned, long, long, long, long, unsigned); \
    static const F real = Real<F>(#name);                                   \
    if (threads != 1) ++g_regions;                                          \
    real(fn, data, threads, start, end, incr, chunk, flags);                \
  }
KVSERVE_COUNT_LOOP(GOMP_parallel_loop_static)
KVSERVE_COUNT_LOOP(GOMP_parallel_loop_dynamic)
KVSERVE_COUNT_LOOP(GOMP_parallel_loop_guided)
KVSERVE_COUNT_LOOP(GOMP_parallel_loop_nonmonotonic_dynamic)
KVSERVE_COUNT_LOOP(GOMP_parallel_loop_nonmonotonic_guided)
#undef KVSERVE_COUNT_LOOP

}  // extern "C"
