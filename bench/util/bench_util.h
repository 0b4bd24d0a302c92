// Helpers shared by the benchmarks.
#ifndef KVSERVE_BENCH_UTIL_BENCH_UTIL_H_
#define KVSERVE_BENCH_UTIL_BENCH_UTIL_H_
#endif  // KVSERVE_BENCH_UTIL_BENCH_UTIL_H_
