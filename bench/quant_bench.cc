// quant_bench: the quantized-weight Gemv kernels (core/quant) against this
// machine's read bandwidth, measured in the same run.
//
//   quant_bench [--json] [--k=4096] [--rows=4096] [--rounds=7]
//   [--rotate_mb=256]
//               [--only=q4_0] [--level=avx2]
//
// For every weight type quant::Info knows: a rows × k matrix of random data
// quantized with the type's reference quantizer, timed as decode runs it
// (y = W·x over omp_get_max_threads() threads, one `omp parallel` splitting
// the rows, m = 1 and m = 8 activation rows in the type's activation
// format), and a dequantization pass over the same rows. The matrix is
// copied enough times that the calls rotate through >= 256 MB, so no call
// finds its weights in the last-level cache. "GB/s" counts weight bytes
// read. The machine is shared and its load changes by the second, so each
// case alternates bandwidth samples (bench_util's BandwidthProbe, one 1 GiB
// streaming read) with a pass of calls over every copy: "ratio" is the
// median over those rounds of the pass's GB/s over the round's bandwidth.
// OMP_WAIT_POLICY defaults to passive (the program re-executes itself with
// it when unset).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/util/bench_util.h"
#include "core/quant/quant.h"
#include "core/util/cpu_features.h"
#include "core/util/omp_wait.h"

namespace kvserve {
namespace {

using quant::Type;

constexpr Type kAllTypes[] = {
    Type::kF32,  Type::kF16,  Type::kBF16, Type::kQ4_0,  Type::kQ4_1,
    Type::kQ5_0, Type::kQ5_1, Type::kQ8_0, Type::kQ2_K,  Type::kQ3_K,
    Type::kQ4_K, Type::kQ5_K, Type::kQ6_K, Type::kIQ4_NL};

// Rows [begin, end) of thread `id` of `nt` over `rows`.
void ThreadRows(int64_t rows, int id, int nt, int64_t* begin, int64_t* end) {
  const int64_t per = (rows + nt - 1) / nt;
  *begin = std::min(rows, id * per);
  *end = std::min(rows, *begin + per);
}

struct Case {
  Type type;
  std::string what;  // "gemv m=1", "gemv m=8", "dequant"
  std::string kernel;
  double seconds = 0;  // median call
  double gbps = 0;     // weight bytes / median call
  double bw_gbps = 0;  // median bandwidth sample
  double ratio = 0;    // median over rounds of GB/s over that round's sample
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rounds of one bandwidth sample and one pass over every copy of the
// matrix, so that both see the same load on a shared machine.
void Measure(const std::function<void(int64_t)>& call, int64_t copies,
             int64_t bytes, int rounds, bench::BandwidthProbe& probe, Case& c) {
  for (int64_t i = 0; i < copies; ++i) call(i);  // warm-up
  std::vector<double> seconds, bw, ratio;
  for (int r = 0; r < rounds; ++r) {
    bw.push_back(probe.MeasureGbps(1));
    const double s = bench::TimeCalls(call, copies, 0.0, 0).median_s;
    seconds.push_back(s);
    ratio.push_back(bytes / s / 1e9 / bw.back());
  }
  c.seconds = Median(seconds);
  c.gbps = bytes / c.seconds / 1e9;
  c.bw_gbps = Median(bw);
  c.ratio = Median(ratio);
}

// Cpu() restricted to the kernels of one level (--level=...), so that a
// level below the machine's best can be measured: "scalar", "avx2" (no
// VNNI), "avx_vnni", "avx512" (no VNNI) or "avx512_vnni"; "" keeps Cpu().
CpuFeatures LevelFeatures(std::string_view level) {
  CpuFeatures f = Cpu();
  if (level.empty()) return f;
  const bool avx512 = level == "avx512" || level == "avx512_vnni";
  if (level == "scalar") f.avx2 = f.fma = f.f16c = false;
  if (level != "avx_vnni") f.avx_vnni = false;
  if (!avx512) f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = false;
  if (level != "avx512_vnni") f.avx512_vnni = false;
  return f;
}

int Main(int argc, char** argv) {
  const bool json = bench::HasFlag(argc, argv, "--json");
  const int64_t k = bench::IntFlag(argc, argv, "--k", 4096);
  const int64_t rows = bench::IntFlag(argc, argv, "--rows", 4096);
  // The matrix is copied until the copies fill this much (1 = no copies:
  // cache-resident, to see the kernels' compute bound).
  const int64_t rotate_bytes = bench::IntFlag(argc, argv, "--rotate_mb", 256)
                               << 20;
  const int rounds =
      static_cast<int>(bench::IntFlag(argc, argv, "--rounds", 7));
  std::string only, level;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg.substr(0, 7) == "--only=") only = arg.substr(7);
    if (arg.substr(0, 8) == "--level=") level = arg.substr(8);
  }
  const int nt = omp_get_max_threads();
  const CpuFeatures cpu = LevelFeatures(level);
  bench::BandwidthProbe probe;
  if (!json) {
    std::printf(
        "quant_bench: %lld x %lld, %d OpenMP threads, OMP_WAIT_POLICY=%s\n"
        "%s; effective ISA %s\n\n",
        static_cast<long long>(rows), static_cast<long long>(k), nt,
        bench::OmpWaitPolicy().c_str(), CpuSummary().c_str(),
        std::string(IsaLevelName(EffectiveIsa())).c_str());
    std::printf("%-7s %-9s %-18s %10s %8s %8s %6s\n", "type", "case", "kernel",
                "time_us", "GB/s", "bw_GB/s", "ratio");
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const Type t : kAllTypes) {
    const quant::TypeInfo* info = quant::Info(t);
    if (info == nullptr || !quant::IsWeightType(t)) continue;
    if (!only.empty() && info->name != only) continue;
    if (k % info->block_elems != 0) continue;
    const quant::TypeInfo* act = quant::Info(info->act_type);
    if (act == nullptr) continue;
    const int64_t row_bytes = quant::RowBytes(t, k);
    const int64_t matrix_bytes = rows * row_bytes;
    const int64_t copies =
        std::max<int64_t>(1, (rotate_bytes + matrix_bytes - 1) / matrix_bytes);
    std::vector<uint8_t> w(copies * matrix_bytes);
    {
      std::vector<float> row(k);
      for (int64_t i = 0; i < rows; ++i) {
        for (float& v : row) v = normal(rng);
        info->quantize(row.data(), &w[i * row_bytes], k);
      }
      for (int64_t c = 1; c < copies; ++c) {
        std::memcpy(&w[c * matrix_bytes], w.data(), matrix_bytes);
      }
    }
    constexpr int kMaxM = 8;
    const int64_t x_row_bytes = quant::RowBytes(info->act_type, k);
    std::vector<uint8_t> x(kMaxM * x_row_bytes);
    {
      std::vector<float> row(k);
      for (int r = 0; r < kMaxM; ++r) {
        for (float& v : row) v = normal(rng);
        act->quantize(row.data(), &x[r * x_row_bytes], k);
      }
    }
    std::vector<float> y(kMaxM * rows);
    std::vector<Case> cases;
    // q4_0 also as BlockLinear keeps it: repacked 8 rows interleaved.
    const bool x8 = t == Type::kQ4_0 && rows % 8 == 0;
    std::vector<uint8_t> w8(x8 ? w.size() : 0);
    for (int64_t c = 0; x8 && c < copies; ++c) {
      quant::RepackQ4_0x8(&w[c * matrix_bytes], rows, k, &w8[c * matrix_bytes]);
    }
    for (const bool repacked : {false, true}) {
      if (repacked && !x8) continue;
      const quant::GemvFn gemv =
          repacked ? quant::SelectGemvQ4_0x8(cpu) : quant::SelectGemv(t, cpu);
      const std::string kernel(repacked ? quant::GemvNameQ4_0x8(cpu)
                                        : quant::GemvName(t, cpu));
      const std::vector<uint8_t>& wm = repacked ? w8 : w;
      for (const int m : {1, kMaxM}) {
        auto call = [&](int64_t iter) {
          const uint8_t* wc = &wm[(iter % copies) * matrix_bytes];
#pragma omp parallel
          {
            quant::GemvArgs a;
            ThreadRows(rows, omp_get_thread_num(), omp_get_num_threads(),
                       &a.row_begin, &a.row_end);
            a.k = k;
            a.w = wc;
            a.w_row_bytes = row_bytes;
            a.x = x.data();
            a.x_row_bytes = x_row_bytes;
            a.m = m;
            a.y = y.data();
            a.ldy = rows;
            a.w_rows = rows;  // as BlockLinear passes it (q4_0's order)
            if (a.row_end > a.row_begin) gemv(a);
          }
        };
        Case c{t, "gemv m=" + std::to_string(m), kernel};
        Measure(call, copies, matrix_bytes, rounds, probe, c);
        cases.push_back(c);
      }
    }
    {
      std::vector<float> out(static_cast<size_t>(nt) * k);
      auto call = [&](int64_t iter) {
        const uint8_t* wc = &w[(iter % copies) * matrix_bytes];
#pragma omp parallel
        {
          int64_t begin, end;
          const int id = omp_get_thread_num();
          ThreadRows(rows, id, omp_get_num_threads(), &begin, &end);
          for (int64_t i = begin; i < end; ++i) {
            info->dequantize(wc + i * row_bytes, &out[id * k], k);
          }
        }
      };
      Case c{t, "dequant", std::string(info->name) + "/scalar"};
      Measure(call, copies, matrix_bytes, rounds, probe, c);
      cases.push_back(c);
    }
    for (const Case& c : cases) {
      if (json) {
        std::printf("%s\n", bench::JsonLine()
                                .Add("bench", "quant")
                                .Add("type", info->name)
                                .Add("case", c.what)
                                .Add("kernel", c.kernel)
                                .Add("isa", IsaLevelName(EffectiveIsa()))
                                .Add("rows", rows)
                                .Add("k", k)
                                .Add("threads", nt)
                                .Add("weight_bytes", matrix_bytes)
                                .Add("time_s", c.seconds)
                                .Add("gbps", c.gbps)
                                .Add("bandwidth_gbps", c.bw_gbps)
                                .Add("ratio", c.ratio)
                                .str()
                                .c_str());
      } else {
        std::printf("%-7s %-9s %-18s %10.1f %8.2f %8.2f %6.2f\n",
                    std::string(info->name).c_str(), c.what.c_str(),
                    c.kernel.c_str(), c.seconds * 1e6, c.gbps, c.bw_gbps,
                    c.ratio);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::ExecWithPassiveOmpWaitUnlessSet(argv);
  return kvserve::Main(argc, argv);
}
