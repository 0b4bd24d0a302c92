#include "bench/util/bench_util.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/proto_json.h"
#include "core/dnnl/context.h"
#include "dnnl.hpp"

namespace kvserve::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sum of x[0, n) with enough independent accumulators to keep many loads
// in flight; compiled for AVX2 so one core can saturate its share.
__attribute__((target("avx2"))) double StreamSum(const float* x, int64_t n) {
  float acc[64] = {};
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    for (int j = 0; j < 64; ++j) acc[j] += x[i + j];
  }
  double s = 0;
  for (float a : acc) s += a;
  return s;
}

}  // namespace

BandwidthProbe::BandwidthProbe(int64_t bytes)
    : buf_(bytes / sizeof(float) / 64 * 64) {
  // First touch by the threads that will read, in the same split.
  const int64_t n = static_cast<int64_t>(buf_.size());
  float* x = buf_.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = 1.0f;
}

double BandwidthProbe::MeasureGbps(int repeats) {
  const int64_t n = static_cast<int64_t>(buf_.size());
  const float* x = buf_.data();
  double best = 0;
  volatile double sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = Now();
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const int nt = omp_get_num_threads();
      const int id = omp_get_thread_num();
      const int64_t per = (n / 64 + nt - 1) / nt * 64;
      const int64_t begin = std::min(n, id * per);
      const int64_t end = std::min(n, begin + per);
      total += StreamSum(x + begin, end - begin);
    }
    const double dt = Now() - t0;
    sink = sink + total;
    best = std::max(best, n * sizeof(float) / dt / 1e9);
  }
  return best;
}

double MeasureSgemmGflops(int64_t m, int64_t n, int64_t k) {
  // The engine caps oneDNN's ISA (KVSERVE_MAX_ISA) before its first kernel;
  // dnnl::sgemm alone would dispatch at the CPU's full ISA for good.
  DnnlEngine();
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  const double s = TimeCalls(
                       [&](int64_t) {
                         dnnl::sgemm('N', 'N', m, n, k, 1.0f, a.data(), k,
                                     b.data(), n, 0.0f, c.data(), n);
                       },
                       5, 0.3, 2)
                       .median_s;
  return 2.0 * m * n * k / s / 1e9;
}

Timing TimeCalls(const std::function<void(int64_t)>& fn, int64_t min_calls,
                 double min_seconds, int warmup) {
  int64_t i = 0;
  for (; i < warmup; ++i) fn(i);
  std::vector<double> times;
  const double start = Now();
  while (static_cast<int64_t>(times.size()) < min_calls ||
         Now() - start < min_seconds) {
    const double t0 = Now();
    fn(i++);
    times.push_back(Now() - t0);
  }
  std::sort(times.begin(), times.end());
  return Timing{times[times.size() / 2], times.front()};
}

std::string OmpWaitPolicy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  return p != nullptr ? p : "default";
}

void JsonLine::Key(std::string_view key) {
  if (!body_.empty()) body_ += ", ";
  AppendJsonString(absl::string_view(key.data(), key.size()), &body_);
  body_ += ": ";
}

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  Key(key);
  AppendJsonString(absl::string_view(value.data(), value.size()), &body_);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, double value) {
  Key(key);
  absl::StrAppend(&body_, absl::StrFormat("%.6g", value));
  return *this;
}

double OneBQ4KMStepBytes(int64_t vocab) {
  const double dim = 2048, kv_dim = 512, ffn = 8192, layers = 16;
  const double per_layer =
      dim * dim * 2 + dim * kv_dim * 2 + dim * ffn * 3;  // q, o, k, v, ffn
  const double params = layers * per_layer + 2 * dim * vocab;
  return params * 4.84 / 8;
}

bool HasFlag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    if (flag == argv[i]) return true;
  }
  return false;
}

int64_t IntFlag(int argc, char** argv, std::string_view name,
                int64_t fallback) {
  int64_t v;
  const std::string value = StringFlag(argc, argv, name, "");
  return !value.empty() && absl::SimpleAtoi(value, &v) ? v : fallback;
}

std::string StringFlag(int argc, char** argv, std::string_view name,
                       std::string fallback) {
  const std::string prefix = std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    if (arg.substr(0, prefix.size()) == prefix) {
      return std::string(arg.substr(prefix.size()));
    }
  }
  return fallback;
}

}  // namespace kvserve::bench
