// Helpers shared by the benchmarks: the machine limits they are judged
// against (memory read bandwidth, oneDNN sgemm throughput), robust timing on
// a noisy shared machine, and one-JSON-object-per-line output.
#ifndef KVSERVE_BENCH_UTIL_BENCH_UTIL_H_
#define KVSERVE_BENCH_UTIL_BENCH_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::bench {

// Read bandwidth of this machine in GB/s (1e9 bytes/s): the best of a few
// streaming sums over a buffer of `bytes` (>= 1 GiB is meant), split across
// omp_get_max_threads() threads, as the kernels are. Keeps its buffer, so a
// benchmark on a shared machine can re-measure right beside each case.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(int64_t bytes = int64_t{1} << 30);
  double MeasureGbps(int repeats = 3);

 private:
  std::vector<float> buf_;
};

// GFLOP/s of a oneDNN sgemm C[m][n] = A[m][k] · B[k][n] on the current
// thread count (the median of a few runs after a warm-up).
double MeasureSgemmGflops(int64_t m, int64_t n, int64_t k);

// Per-call seconds of `fn` (called with the iteration index, so callers can
// rotate inputs) over at least `min_calls` calls and at least `min_seconds`,
// after `warmup` calls.
struct Timing {
  double median_s = 0;
  double min_s = 0;
};
Timing TimeCalls(const std::function<void(int64_t)>& fn, int64_t min_calls = 5,
                 double min_seconds = 0.25, int warmup = 2);

// The value of OMP_WAIT_POLICY, or "default".
std::string OmpWaitPolicy();

// A flat JSON object built field by field, printed as one line.
class JsonLine {
 public:
  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) {
    return Add(key, std::string_view(value));
  }
  JsonLine& Add(std::string_view key, int64_t value);
  JsonLine& Add(std::string_view key, int value) {
    return Add(key, int64_t{value});
  }
  JsonLine& Add(std::string_view key, double value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// The weight bytes of a decode step at the 1B shape (16 layers, dim 2048,
// 32 / 8 heads, ffn 8192, `vocab` tokens) in Q4_K_M (4.84 bits per weight
// with its scales): over the read bandwidth, the floor of a step's time.
double OneBQ4KMStepBytes(int64_t vocab);

// True when `flag` (e.g. "--json") is among argv.
bool HasFlag(int argc, char** argv, std::string_view flag);
// The integer value of `--name=value` in argv, or `fallback`.
int64_t IntFlag(int argc, char** argv, std::string_view name, int64_t fallback);
// The value of `--name=value` in argv, or `fallback`.
std::string StringFlag(int argc, char** argv, std::string_view name,
                       std::string fallback);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_UTIL_BENCH_UTIL_H_
