// Counts the OpenMP parallel regions the process opens (ours and
// oneDNN's): libgomp's entry points for `#pragma omp parallel [for]` are
// interposed by this file's definitions, which count and forward to
// libgomp's. The executable must export them (CMake ENABLE_EXPORTS) so that
// shared libraries (oneDNN) bind to them too.
#ifndef KVSERVE_BENCH_UTIL_OMP_REGIONS_H_
#define KVSERVE_BENCH_UTIL_OMP_REGIONS_H_

#include <cstdint>

namespace kvserve::bench {

// Regions opened so far with more than one thread (all threads); a region
// whose `if` clause was false runs on the calling thread alone and is not
// counted.
int64_t OmpRegionCount();

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_UTIL_OMP_REGIONS_H_
