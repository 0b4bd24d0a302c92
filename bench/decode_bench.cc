// decode_bench: single-sequence decode steps through the core (Model over a
// BlockPool + BlockTable, no server) against the roofline measured in the
// same run: (weight bytes + KV bytes read per token) / read bandwidth.
//
//   decode_bench [--json] [--rounds=N] [--batched_only]
//
// The model is made here (bench/util BenchModelOptions: 16 heads / 4 KV
// heads, dim 1024, 270 MB f32 / 135 MB bf16 of weights), loaded once per
// weight dtype; each case fills the KV cache with T random positions and
// times the step that decodes position T (always the same position, so every
// step reads exactly T + 1 positions). The machine is shared and its load
// changes by the second, so each case alternates bandwidth samples (one
// streaming read of 1 GiB) with steps: "ratio" is the median step over the
// median roofline of those rounds, "r(min)" the fastest step over the
// roofline at the best bandwidth.
// OMP_WAIT_POLICY defaults to passive (the program re-executes itself with
// it when unset; set it to measure another policy).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/util/bench_util.h"
#include "bench/util/serve_util.h"
#include "core/dnnl/context.h"
#include "core/kv/block_table.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "core/util/cpu_features.h"

namespace kvserve {
namespace {

constexpr int kContext = 4352;

struct Case {
  DType weight_dtype, kv_dtype;
  int64_t depth;  // cached tokens before the step
};

constexpr int kStepsPerRound = 3;

struct Result {
  int64_t bytes = 0;                          // read per token
  double step_s = 0, step_min_s = 0;          // median and fastest step
  double roofline_s = 0, roofline_min_s = 0;  // bytes / bandwidth samples
  double bandwidth_gbps() const { return bytes / roofline_s / 1e9; }
  double ratio() const { return step_s / roofline_s; }
  double ratio_min() const { return step_min_s / roofline_min_s; }
};

// Writes T positions of random K/V into `table` (all layers).
void FillKv(const ModelConfig& c, int64_t T, BlockTable& table) {
  std::minstd_rand rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> k(c.kv_dim()), v(c.kv_dim());
  for (int64_t pos = 0; pos < T; ++pos) {
    for (int layer = 0; layer < c.n_layers; ++layer) {
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      table.WriteKv(layer, pos, k.data(), v.data());
    }
  }
}

absl::StatusOr<Result> RunCase(const ModelWeights& weights, const Case& cs,
                               int rounds, bench::BandwidthProbe& probe) {
  const ModelConfig& c = weights.config;
  BlockPoolOptions po;
  po.n_layers = c.n_layers;
  po.n_kv_heads = c.n_kv_heads;
  po.head_dim = c.head_dim;
  po.dtype = cs.kv_dtype;
  po.capacity_bytes =
      (cs.depth + 1 + 2 * po.block_tokens) * c.KvBytesPerToken(cs.kv_dtype);
  absl::StatusOr<std::unique_ptr<BlockPool>> pool = BlockPool::Create(po);
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(&weights, pool->get());
  if (!model.ok()) return model.status();
  BlockTable table(pool->get());
  if (absl::Status s = table.Extend(cs.depth + 1); !s.ok()) return s;
  FillKv(c, cs.depth, table);
  const std::vector<int32_t> token = {42 % c.vocab_size};
  const SeqChunk chunk{.kv = &table,
                       .start_pos = cs.depth,
                       .tokens = token,
                       .want_logits = true};
  absl::Status failed;
  auto step = [&](int64_t) {
    absl::StatusOr<absl::Span<const float>> logits =
        (*model)->Forward(absl::MakeConstSpan(&chunk, 1));
    if (!logits.ok()) failed = logits.status();
  };
  // Rounds of one bandwidth sample and a few steps, so that both see the
  // same load on a shared machine; the ratio compares their medians.
  for (int i = 0; i < 3; ++i) step(i);
  std::vector<double> step_s, roofline_s;
  const int64_t bytes =
      bench::DecodeWeightBytes(c, weights.layers[0].wq.dtype) +
      (cs.depth + 1) * c.KvBytesPerToken(cs.kv_dtype);
  for (int round = 0; round < rounds; ++round) {
    roofline_s.push_back(bytes / (probe.MeasureGbps(1) * 1e9));
    for (int i = 0; i < kStepsPerRound; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step(i);
      step_s.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count());
    }
  }
  if (!failed.ok()) return failed;
  Result r;
  r.bytes = bytes;
  r.step_s = bench::Quantile(step_s, 0.5);
  r.step_min_s = bench::Quantile(step_s, 0);
  r.roofline_s = bench::Quantile(roofline_s, 0.5);
  r.roofline_min_s = bench::Quantile(roofline_s, 0);
  return r;
}

// Steps of `batch` sequences at `depth` decoding together (one token each),
// as the engine batches running sessions: the median step time.
absl::StatusOr<double> BatchedStep(const ModelWeights& weights, int batch,
                                   int64_t depth, int rounds) {
  const ModelConfig& c = weights.config;
  BlockPoolOptions po;
  po.n_layers = c.n_layers;
  po.n_kv_heads = c.n_kv_heads;
  po.head_dim = c.head_dim;
  po.capacity_bytes =
      batch * (depth + 1 + 2 * po.block_tokens) * c.KvBytesPerToken(po.dtype);
  absl::StatusOr<std::unique_ptr<BlockPool>> pool = BlockPool::Create(po);
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(&weights, pool->get());
  if (!model.ok()) return model.status();
  std::vector<BlockTable> tables;
  std::vector<SeqChunk> chunks;
  const std::vector<int32_t> token = {42 % c.vocab_size};
  tables.reserve(batch);
  for (int b = 0; b < batch; ++b) {
    tables.emplace_back(pool->get());
    if (absl::Status s = tables.back().Extend(depth + 1); !s.ok()) return s;
    FillKv(c, depth, tables.back());
  }
  for (int b = 0; b < batch; ++b) {
    chunks.push_back(SeqChunk{.kv = &tables[b],
                              .start_pos = depth,
                              .tokens = token,
                              .want_logits = true});
  }
  absl::Status failed;
  const bench::Timing t = bench::TimeCalls(
      [&](int64_t) {
        absl::StatusOr<absl::Span<const float>> logits =
            (*model)->Forward(chunks);
        if (!logits.ok()) failed = logits.status();
      },
      rounds * kStepsPerRound, 0.3, 2);
  if (!failed.ok()) return failed;
  return t.median_s;
}

int Main(int argc, char** argv) {
  const bool json = bench::HasFlag(argc, argv, "--json");
  const int rounds = bench::IntFlag(argc, argv, "--rounds", 12);
  const int threads = omp_get_max_threads();
  const bool batched_only = bench::HasFlag(argc, argv, "--batched_only");

  absl::StatusOr<bench::ScratchDir> dir =
      bench::ScratchDir::Create("decode_bench.");
  if (!dir.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  const std::string path = dir->path() + "/model.gguf";
  const RandomModelOptions mo = bench::BenchModelOptions(kContext);
  if (absl::Status s = bench::WriteBenchModel(mo, path); !s.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  bench::BandwidthProbe probe;
  if (!json) {
    std::printf(
        "decode_bench: made model %d layers, dim %d, %d heads / %d KV heads, "
        "hidden %d; %d OpenMP threads, OMP_WAIT_POLICY=%s\n%s; oneDNN ISA "
        "%s\n"
        "%d rounds of (1 bandwidth sample, %d steps); roofline = (weight + KV "
        "bytes per token) / read bandwidth\n\n",
        mo.n_layers, mo.dim, mo.n_heads, mo.n_kv_heads, mo.hidden_dim, threads,
        bench::OmpWaitPolicy().c_str(), CpuSummary().c_str(),
        DnnlIsaName().c_str(), rounds, kStepsPerRound);
    std::printf("%-6s %-4s %5s %8s %9s %8s %8s %9s %7s %7s %7s\n", "weight",
                "kv", "T", "MB/tok", "step ms", "min ms", "tok/s", "roof ms",
                "bw GB/s", "ratio", "r(min)");
  }
  double worst = 0;
  for (DType wd : {DType::kF32, DType::kBF16}) {
    if (batched_only) break;
    LoadOptions lo;
    lo.model_path = path;
    lo.weight_dtype = std::string(DTypeName(wd));
    absl::StatusOr<LoadedModel> loaded = LoadModel(lo);
    if (!loaded.ok()) {
      std::fprintf(stderr, "decode_bench: %s\n",
                   loaded.status().ToString().c_str());
      return 1;
    }
    // Held as f32 where this CPU cannot compute bf16 (the loader's warning).
    const DType held = loaded->weights->layers[0].wq.dtype;
    for (DType kd : {DType::kF32, DType::kBF16}) {
      for (int64_t depth : {128, 4000}) {
        const Case cs{held, kd, depth};
        absl::StatusOr<Result> r = RunCase(*loaded->weights, cs, rounds, probe);
        if (!r.ok()) {
          std::fprintf(stderr, "decode_bench: %s\n",
                       r.status().ToString().c_str());
          return 1;
        }
        worst = std::max(worst, r->ratio());
        if (json) {
          std::printf("%s\n",
                      bench::JsonLine()
                          .Add("kind", "decode")
                          .Add("weight_dtype", DTypeName(held))
                          .Add("isa", IsaLevelName(EffectiveIsa()))
                          .Add("kv_dtype", DTypeName(kd))
                          .Add("cached_tokens", depth)
                          .Add("bytes_per_token", r->bytes)
                          .Add("step_seconds", r->step_s)
                          .Add("step_min_seconds", r->step_min_s)
                          .Add("tokens_per_second", 1.0 / r->step_s)
                          .Add("roofline_seconds", r->roofline_s)
                          .Add("roofline_min_seconds", r->roofline_min_s)
                          .Add("bandwidth_gbps", r->bandwidth_gbps())
                          .Add("step_over_roofline", r->ratio())
                          .Add("step_min_over_roofline", r->ratio_min())
                          .Add("threads", threads)
                          .Add("omp_wait_policy", bench::OmpWaitPolicy())
                          .str()
                          .c_str());
        } else {
          std::printf(
              "%-6s %-4s %5lld %8.1f %9.2f %8.2f %8.1f %9.2f %7.1f %7.2f "
              "%7.2f\n",
              std::string(DTypeName(held)).c_str(),
              std::string(DTypeName(kd)).c_str(), static_cast<long long>(depth),
              r->bytes / 1e6, r->step_s * 1e3, r->step_min_s * 1e3,
              1.0 / r->step_s, r->roofline_s * 1e3, r->bandwidth_gbps(),
              r->ratio(), r->ratio_min());
        }
        std::fflush(stdout);
      }
    }
  }
  // Batched decode (bf16 weights, f32 KV, 128 cached tokens each): what
  // one engine step costs per batch size, the core's share of serve_bench's
  // aggregate throughput.
  {
    LoadOptions lo;
    lo.model_path = path;
    lo.weight_dtype = "bf16";
    absl::StatusOr<LoadedModel> loaded = LoadModel(lo);
    if (!loaded.ok()) {
      std::fprintf(stderr, "decode_bench: %s\n",
                   loaded.status().ToString().c_str());
      return 1;
    }
    if (!json) {
      std::printf(
          "\nbatched decode, %s weights, f32 KV, 128 cached tokens "
          "per sequence\n%5s %9s %14s\n",
          std::string(DTypeName(loaded->weights->layers[0].wq.dtype)).c_str(),
          "batch", "step/b=1", "tok/s / b=1");
    }
    double one = 0;
    for (int batch : {1, 4, 16, 64}) {
      absl::StatusOr<double> step =
          BatchedStep(*loaded->weights, batch, 128, rounds);
      if (!step.ok()) {
        std::fprintf(stderr, "decode_bench: %s\n",
                     step.status().ToString().c_str());
        return 1;
      }
      if (batch == 1) one = *step;
      const double speedup = batch * one / *step;
      if (json) {
        std::printf("%s\n", bench::JsonLine()
                                .Add("kind", "batched_decode")
                                .Add("batch", batch)
                                .Add("step_seconds", *step)
                                .Add("tokens_per_second_over_batch1", speedup)
                                .str()
                                .c_str());
      } else {
        std::printf("%5d %9.2f %14.2f\n", batch, *step / one, speedup);
      }
      std::fflush(stdout);
    }
  }

  if (json) {
    std::printf("%s\n", bench::JsonLine()
                            .Add("kind", "summary")
                            .Add("worst_step_over_roofline", worst)
                            .Add("target", 1.15)
                            .str()
                            .c_str());
  } else {
    std::printf("\nworst step / roofline: %.2f (target <= 1.15)\n", worst);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::ExecWithPassiveOmpWaitUnlessSet(argv);
  return kvserve::Main(argc, argv);
}
