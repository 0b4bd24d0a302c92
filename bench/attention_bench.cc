// attention_bench: GqaDecode and GqaPrefill against this machine's limits,
// measured in the same run: memory read bandwidth for decode (which reads
// every K and V once per token) and a oneDNN sgemm for prefill.
//
//   attention_bench [--json] [--block_tokens=N] [--quick] [--decode_only]
//                   [--fused_only] [--hot] [--head_dim=N] [--T=N]
//                   [--kv_dtype=f32|bf16|q8_0|q4_0]
//
// Decode runs cold: every call reads a different copy of the batch's KV
// cache, and the copies together exceed the L3 cache.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/util/bench_util.h"
#include "core/attention/gqa_attention.h"
#include "core/dnnl/context.h"
#include "core/kv/block_table.h"
#include "core/kv/kv_rows.h"
#include "core/util/cpu_features.h"

namespace kvserve {
namespace {

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
// --head_dim (default 128).
int g_head_dim = 128;
// --T=N: only the decode cases of N cached positions (512 with --hot: the
// kernel's rate from L2).
int64_t g_only_T = 0;
// --kv_dtype=T: only the decode cases of that KV type (one kernel to
// profile).
std::optional<DType> g_only_dtype;
constexpr int64_t kL3Bytes = int64_t{32} << 20;

struct Env {
  bool json = false;
  // --hot: one copy of the KV cache, read again by every call (from the
  // caches as far as it fits): the kernel's compute rate, not memory's.
  bool hot = false;
  int threads = 1;
  bench::BandwidthProbe* probe = nullptr;
};

const char* PathName(AttentionPath p) {
  return p == AttentionPath::kOneDnn       ? "onednn"
         : p == AttentionPath::kLlamaOrder ? "llama"
                                           : "fused";
}

// `replicas` copies of a batch of `batch` sequences of T positions each,
// filled with small random K/V.
class Fixture {
 public:
  Fixture(DType dtype, int block_tokens, int batch, int64_t T,
          int64_t min_bytes) {
    BlockPoolOptions o;
    o.n_layers = 1;
    o.n_kv_heads = kKvHeads;
    o.head_dim = g_head_dim;
    o.block_tokens = block_tokens;
    o.dtype = dtype;
    const int64_t blocks_per_seq = (T + block_tokens - 1) / block_tokens;
    const int64_t block_bytes =
        2LL * kKvHeads * block_tokens * DTypeRowBytes(dtype, g_head_dim);
    const int64_t replica_bytes = batch * blocks_per_seq * block_bytes;
    replicas_ = static_cast<int>(
        std::max<int64_t>(1, (min_bytes + replica_bytes - 1) / replica_bytes));
    o.capacity_bytes = replicas_ * replica_bytes;
    pool_ = std::move(BlockPool::Create(o)).value();
    Fill(dtype);
    views_.resize(replicas_);
    for (int r = 0; r < replicas_; ++r) {
      for (int b = 0; b < batch; ++b) {
        tables_.emplace_back(pool_.get());
        if (!tables_.back().Extend(T).ok()) std::abort();
      }
    }
    for (int r = 0; r < replicas_; ++r) {
      for (int b = 0; b < batch; ++b) {
        views_[r].push_back(SeqKv{tables_[r * batch + b].blocks(), T});
      }
    }
  }

  const BlockPool* pool() const { return pool_.get(); }
  int replicas() const { return replicas_; }
  absl::Span<const SeqKv> views(int64_t i) const {
    return views_[i % replicas_];
  }

 private:
  void Fill(DType dtype) {
    const int bt = pool_->options().block_tokens;
    const int32_t n = pool_->num_blocks();
#pragma omp parallel for schedule(static)
    for (int32_t b = 0; b < n; ++b) {
      std::minstd_rand rng(b + 1);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> row(g_head_dim);
      for (void* p : {pool_->KeyBlock(0, b), pool_->ValueBlock(0, b)}) {
        for (int h = 0; h < kKvHeads; ++h) {
          for (int slot = 0; slot < bt; ++slot) {
            for (float& x : row) x = u(rng);
            StoreKvRowAt(dtype, row.data(), g_head_dim, bt, slot,
                         static_cast<char*>(p) + pool_->GroupOffset(h));
          }
        }
      }
    }
  }

  int replicas_ = 1;
  std::unique_ptr<BlockPool> pool_;
  std::vector<BlockTable> tables_;
  std::vector<std::vector<SeqKv>> views_;
};

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::minstd_rand rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& f : x) f = normal(rng);
  return x;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct DecodeResult {
  double us;              // median per call
  double us_min;          // fastest call
  double gbps;            // K+V bytes / median
  double bandwidth_gbps;  // median of the streaming passes paired with it
  double ratio_paired;    // median over rounds of (round's GB/s / its pass)
};

// On a shared machine the bandwidth left to us changes by 2-3x within
// seconds, so each case alternates kRounds times between one streaming pass
// and ~kRoundSeconds of calls, and also reports the median of the per-round
// ratios.
constexpr int kRounds = 5;
constexpr double kRoundSeconds = 0.06;

// UNIMPLEMENTED where this CPU has no kernels for the path and dtype.
absl::StatusOr<DecodeResult> TimeDecode(const Env& env, const Fixture& f,
                                        AttentionPath path, int batch,
                                        int64_t T, DType dtype) {
  GqaAttentionOptions o;
  o.n_heads = kHeads;
  o.decode_path = path;
  auto created = GqaAttention::Create(f.pool(), o);
  if (!created.ok()) return created.status();
  std::unique_ptr<GqaAttention> attention = *std::move(created);
  const std::vector<float> q =
      RandomVector(int64_t{batch} * kHeads * g_head_dim, 7);
  std::vector<float> out(q.size());
  const double bytes =
      2.0 * batch * T * kKvHeads * DTypeRowBytes(dtype, g_head_dim);
  auto call = [&](int64_t i) {
    attention->GqaDecode(0, f.views(i), q.data(), out.data());
  };
  for (int i = 0; i < std::min(4, f.replicas()); ++i) call(i);  // warm-up
  std::vector<double> times, bandwidths, ratios;
  double min_s = 1e30;
  int64_t next = 0;
  for (int round = 0; round < kRounds; ++round) {
    const double bandwidth = env.probe->MeasureGbps(1);
    const bench::Timing t =
        bench::TimeCalls([&](int64_t) { call(next++); },
                         std::max(2, f.replicas()), kRoundSeconds, 0);
    bandwidths.push_back(bandwidth);
    ratios.push_back(bytes / t.median_s / 1e9 / bandwidth);
    times.push_back(t.median_s);
    min_s = std::min(min_s, t.min_s);
  }
  const double median_s = Median(times);
  return DecodeResult{median_s * 1e6, min_s * 1e6, bytes / median_s / 1e9,
                      Median(bandwidths), Median(ratios)};
}

void PrintDecode(const Env& env, const char* kind, AttentionPath path,
                 DType dtype, int batch, int64_t T, int block_tokens,
                 const absl::StatusOr<DecodeResult>& result) {
  if (!result.ok()) {
    if (env.json) {
      std::printf("%s\n",
                  bench::JsonLine()
                      .Add("kind", kind)
                      .Add("path", PathName(path))
                      .Add("dtype", DTypeName(dtype))
                      .Add("batch", batch)
                      .Add("T", T)
                      .Add("skipped", std::string(result.status().message()))
                      .str()
                      .c_str());
    } else {
      std::printf("%-11s %-6s %-4s %5d %6lld %4d skipped: %s\n", kind,
                  PathName(path), std::string(DTypeName(dtype)).c_str(), batch,
                  static_cast<long long>(T), block_tokens,
                  std::string(result.status().message()).c_str());
    }
    return;
  }
  const DecodeResult& r = *result;
  const double ratio = r.gbps / r.bandwidth_gbps;
  if (env.json) {
    std::printf("%s\n", bench::JsonLine()
                            .Add("kind", kind)
                            .Add("path", PathName(path))
                            .Add("dtype", DTypeName(dtype))
                            .Add("batch", batch)
                            .Add("T", T)
                            .Add("us", r.us)
                            .Add("gbps", r.gbps)
                            .Add("bandwidth_gbps", r.bandwidth_gbps)
                            .Add("ratio", ratio)
                            .Add("us_min", r.us_min)
                            .Add("ratio_paired", r.ratio_paired)
                            .Add("block_tokens", block_tokens)
                            .Add("threads", env.threads)
                            .Add("omp_wait_policy", bench::OmpWaitPolicy())
                            .str()
                            .c_str());
  } else {
    std::printf(
        "%-11s %-6s %-4s %5d %6lld %4d %10.1f %10.1f %6.1f %6.1f %6.2f %6.2f\n",
        kind, PathName(path), std::string(DTypeName(dtype)).c_str(), batch,
        static_cast<long long>(T), block_tokens, r.us, r.us_min, r.gbps,
        r.bandwidth_gbps, ratio, r.ratio_paired);
  }
  std::fflush(stdout);
}

void RunDecode(const Env& env, int block_tokens, bool quick, bool sweep_only,
               bool decode_only, bool fused_only) {
  if (!env.json) {
    std::printf("\n%-11s %-6s %-4s %5s %6s %4s %10s %10s %6s %6s %6s %6s\n",
                "kind", "path", "dtype", "batch", "T", "bt", "us/call",
                "us_min", "GB/s", "bw", "ratio", "paired");
  }
  // Block size sweep: the evidence for BlockPoolOptions' default.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int bt : {16, 32, 64, 128, 256}) {
      if (decode_only) break;
      Fixture f(dtype, bt, 1, 4096, 3 * kL3Bytes);
      PrintDecode(env, "block_sweep", AttentionPath::kFused, dtype, 1, 4096, bt,
                  TimeDecode(env, f, AttentionPath::kFused, 1, 4096, dtype));
    }
  }
  if (sweep_only) return;
  // Median us per call of the fused path, by (dtype, batch, T): the KV
  // types' summary below.
  std::map<std::tuple<DType, int, int64_t>, double> fused_us;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (g_only_dtype && *g_only_dtype != dtype) continue;
    for (int batch : {1, 8}) {
      for (int64_t T : {512, 4096, 8192, 32768}) {
        if (quick && T == 32768 && batch == 8) continue;
        if (decode_only && T < 4096 && g_only_T == 0) continue;
        if (g_only_T != 0 && T != g_only_T) continue;
        Fixture f(dtype, block_tokens, batch, T, env.hot ? 0 : 3 * kL3Bytes);
        for (AttentionPath path :
             {AttentionPath::kFused, AttentionPath::kOneDnn,
              AttentionPath::kLlamaOrder}) {
          if (fused_only && path != AttentionPath::kFused) continue;
          // llama.cpp's order (kAuto's choice for f32): f32 caches only;
          // oneDNN cannot read q8_0 / q4_0 blocks.
          if ((path == AttentionPath::kLlamaOrder && dtype != DType::kF32) ||
              (path == AttentionPath::kOneDnn && IsBlockQuantized(dtype))) {
            continue;
          }
          const absl::StatusOr<DecodeResult> r =
              TimeDecode(env, f, path, batch, T, dtype);
          PrintDecode(env, "decode", path, dtype, batch, T, block_tokens, r);
          if (path == AttentionPath::kFused && r.ok()) {
            fused_us[{dtype, batch, T}] = r->us;
          }
        }
      }
    }
  }
  // How much faster a smaller KV type makes the kernel than bf16, in the
  // same run (the goal for q8_0 at 8k: >= 1.8x).
  if (!env.json) {
    std::printf(
        "\nfused decode, speed vs bf16 (bf16 us / type us)\n%5s %6s %6s %6s "
        "%6s\n",
        "batch", "T", "f32", "q8_0", "q4_0");
  }
  for (int batch : {1, 8}) {
    for (int64_t T : {4096, 8192, 32768}) {
      auto bf16 = fused_us.find({DType::kBF16, batch, T});
      if (bf16 == fused_us.end()) continue;
      double vs[3] = {0, 0, 0};
      const DType types[3] = {DType::kF32, DType::kQ8_0, DType::kQ4_0};
      for (int i = 0; i < 3; ++i) {
        auto it = fused_us.find({types[i], batch, T});
        if (it != fused_us.end()) vs[i] = bf16->second / it->second;
      }
      if (env.json) {
        std::printf("%s\n", bench::JsonLine()
                                .Add("kind", "kv_types_vs_bf16")
                                .Add("batch", batch)
                                .Add("T", T)
                                .Add("f32", vs[0])
                                .Add("q8_0", vs[1])
                                .Add("q4_0", vs[2])
                                .str()
                                .c_str());
      } else {
        std::printf("%5d %6lld %6.2f %6.2f %6.2f\n", batch,
                    static_cast<long long>(T), vs[0], vs[1], vs[2]);
      }
    }
  }
}

void RunPrefill(const Env& env, int block_tokens) {
  constexpr int64_t kChunk = 512;
  const double sgemm = bench::MeasureSgemmGflops(kChunk, kChunk, g_head_dim);
  if (!env.json) {
    std::printf(
        "\nprefill of a %lld-token chunk; oneDNN sgemm %lldx%lldx%d: %.1f "
        "GFLOP/s\n%-7s %-7s %6s %10s %9s %6s\n",
        static_cast<long long>(kChunk), static_cast<long long>(kChunk),
        static_cast<long long>(kChunk), g_head_dim, sgemm, "path", "dtype",
        "start", "us/call", "GFLOP/s", "ratio");
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t start : {int64_t{0}, int64_t{3584}}) {
      Fixture f(dtype, block_tokens, 1, start + kChunk, 0);
      const std::vector<float> q =
          RandomVector(kChunk * kHeads * g_head_dim, 11);
      std::vector<float> out(q.size());
      // QKᵀ and PV over the causal context of every row.
      double flops = 0;
      for (int64_t i = 0; i < kChunk; ++i) {
        flops += 4.0 * kHeads * g_head_dim * (start + i + 1);
      }
      for (AttentionPath path : {AttentionPath::kFused, AttentionPath::kOneDnn,
                                 AttentionPath::kLlamaOrder}) {
        if (path == AttentionPath::kLlamaOrder && dtype != DType::kF32) {
          continue;
        }
        GqaAttentionOptions o;
        o.n_heads = kHeads;
        o.prefill_path = path;
        auto attention = std::move(GqaAttention::Create(f.pool(), o)).value();
        const SeqKv seq = f.views(0)[0];
        const double s = bench::TimeCalls(
                             [&](int64_t) {
                               attention->GqaPrefill(0, seq, start, kChunk,
                                                     q.data(), out.data());
                             },
                             2, 0.3, 1)
                             .median_s;
        const double gflops = flops / s / 1e9;
        if (env.json) {
          std::printf("%s\n", bench::JsonLine()
                                  .Add("kind", "prefill")
                                  .Add("path", PathName(path))
                                  .Add("dtype", DTypeName(dtype))
                                  .Add("batch", 1)
                                  .Add("T", start + kChunk)
                                  .Add("start_pos", start)
                                  .Add("n_new", kChunk)
                                  .Add("us", s * 1e6)
                                  .Add("gflops", gflops)
                                  .Add("sgemm_gflops", sgemm)
                                  .Add("ratio", gflops / sgemm)
                                  .Add("threads", env.threads)
                                  .str()
                                  .c_str());
        } else {
          std::printf("%-7s %-7s %6lld %10.1f %9.1f %6.2f\n", PathName(path),
                      std::string(DTypeName(dtype)).c_str(),
                      static_cast<long long>(start), s * 1e6, gflops,
                      gflops / sgemm);
        }
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  using namespace kvserve;
  Env env;
  env.json = bench::HasFlag(argc, argv, "--json");
  env.hot = bench::HasFlag(argc, argv, "--hot");
  g_head_dim = static_cast<int>(bench::IntFlag(argc, argv, "--head_dim", 128));
  g_only_T = bench::IntFlag(argc, argv, "--T", 0);
  if (g_only_T != 0 && g_only_T != 512 && g_only_T != 4096 &&
      g_only_T != 8192 && g_only_T != 32768) {
    std::fprintf(stderr,
                 "attention_bench: --T=%lld is not a case (512, 4096, 8192 or "
                 "32768)\n",
                 static_cast<long long>(g_only_T));
    return 2;
  }
  if (const std::string t = bench::StringFlag(argc, argv, "--kv_dtype", "");
      !t.empty()) {
    absl::StatusOr<DType> d = ParseKvDType(t);
    if (!d.ok()) {
      std::fprintf(stderr, "attention_bench: %s\n",
                   std::string(d.status().message()).c_str());
      return 2;
    }
    g_only_dtype = *d;
  }
  const bool quick = bench::HasFlag(argc, argv, "--quick");
  const int block_tokens = static_cast<int>(bench::IntFlag(
      argc, argv, "--block_tokens", BlockPoolOptions{}.block_tokens));
  env.threads = omp_get_max_threads();
  bench::BandwidthProbe probe;
  env.probe = &probe;
  const double bandwidth = probe.MeasureGbps(5);
  if (env.json) {
    std::printf("%s\n", bench::JsonLine()
                            .Add("kind", "bandwidth")
                            .Add("bandwidth_gbps", bandwidth)
                            .Add("isa", IsaLevelName(EffectiveIsa()))
                            .Add("cpu", CpuFeatureString(Cpu()))
                            .Add("onednn_isa", DnnlIsaName())
                            .Add("threads", env.threads)
                            .Add("omp_wait_policy", bench::OmpWaitPolicy())
                            .str()
                            .c_str());
  } else {
    std::printf(
        "attention_bench: n_heads %d, n_kv_heads %d, head_dim %d, %d threads, "
        "OMP_WAIT_POLICY=%s\n%s; oneDNN ISA %s\nread bandwidth (streaming sum "
        "over 1 GiB): %.1f "
        "GB/s; re-measured beside every decode case (bw column), which its "
        "ratio uses\n",
        kHeads, kKvHeads, g_head_dim, env.threads,
        bench::OmpWaitPolicy().c_str(), CpuSummary().c_str(),
        DnnlIsaName().c_str(), bandwidth);
  }
  const bool sweep_only = bench::HasFlag(argc, argv, "--sweep_only");
  // --decode_only: the decode cases with T >= 4096 only (no block sweep, no
  // prefill); --fused_only: skip the oneDNN decode path. For quick A/B runs.
  const bool decode_only = bench::HasFlag(argc, argv, "--decode_only");
  const bool fused_only = bench::HasFlag(argc, argv, "--fused_only");
  RunDecode(env, block_tokens, quick, sweep_only, decode_only, fused_only);
  if (!sweep_only && !decode_only) RunPrefill(env, block_tokens);
  return 0;
}
