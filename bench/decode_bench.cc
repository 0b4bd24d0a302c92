// decode_bench: decode steps and prefill chunks through the core (Model over
// a BlockPool + BlockTables, no server) for every common weight format,
// against limits measured in the same run.
//
//   decode_bench [--json] [--rounds=N] [--types=f16,bf16,...] [--quick]
//                [--gemv_max_rows=N] [--no_avx2] [--prefill_paths]
//                [--kv_types [--kv_cached=N] [--kv_passes=N]]
//
// --kv_types: instead, a 1B-parameter shape (16 layers, dim 2048, 32 / 8
// heads of 64, ffn 8192, DeepSeek LLM's 102,400-token vocabulary) in
// Q4_K_M decodes one token after N cached positions (default 16384) over
// a bf16, q8_0, q4_0 and f32 KV cache: each type's step time over bf16's.
// The types are measured in turn, --kv_passes times (default 3), and each
// type's fastest pass is kept: the machine's bandwidth drifts over seconds,
// and passes spread every type over the same stretch of time.
//
// The model is made here (bench/util BenchModelOptions with 8 layers: dim
// 1024, 16 heads / 4 KV heads, hidden 2816, 91 M parameters), once per
// weight format with the model maker's quantizers, and loaded as stored.
// Decode: B sequences (batch 1 or 8) with T cached positions each decode
// one token together; ratio = step time / roofline, where roofline = (weight
// bytes + B * KV bytes of T + 1 positions) / read bandwidth, bandwidth
// sampled between rounds of steps (the machine is shared). Prefill: one
// 512-token chunk at position 0; ratio = its GFLOP/s / a oneDNN f32 sgemm's
// measured in the same run. "regions": OpenMP parallel regions one step
// opens (ours and oneDNN's).
//
// After its own rows the program runs itself again under
// KVSERVE_MAX_ISA=avx2 (unless --no_avx2, or it already runs capped), so
// one table shows the native and the AVX2 paths.
// OMP_WAIT_POLICY defaults to passive (the program re-executes itself with
// it when unset; set it to measure another policy).
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/util/bench_util.h"
#include "bench/util/omp_regions.h"
#include "bench/util/serve_util.h"
#include "core/dnnl/context.h"
#include "core/kv/block_table.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "core/util/cpu_features.h"
#include "core/util/omp_wait.h"
#include "core/util/status_macros.h"

namespace kvserve {
namespace {

LoadOptions ModelAt(const std::string& path) {
  LoadOptions o;
  o.model_path = path;
  return o;
}

constexpr int kContext = 4352;
constexpr int kStepsPerRound = 3;
constexpr int64_t kPrefillChunk = 512;

struct Env {
  bool json = false;
  int rounds = 8;
  int threads = 1;
  int64_t gemv_max_rows = -1;
  bool team = true;  // ModelOptions::decode_in_team
  bench::BandwidthProbe* probe = nullptr;
  double sgemm_gflops = 0;
  DType kv_dtype = DType::kBF16;
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

struct Row {
  std::string type, kind;
  int64_t T = 0;
  int batch = 1;
  int64_t bytes = 0;   // read per decode step / weight bytes for prefill
  double ms = 0;       // median step or chunk
  double limit = 0;    // roofline ms (decode) or sgemm GFLOP/s (prefill)
  double ratio = 0;    // ms / roofline (decode), GFLOP/s / sgemm (prefill)
  double regions = 0;  // OpenMP regions per step
  double gflops = 0;   // prefill only
};

void Print(const Env& env, const Row& r) {
  const std::string isa(IsaLevelName(EffectiveIsa()));
  if (env.json) {
    std::printf("%s\n", bench::JsonLine()
                            .Add("kind", r.kind)
                            .Add("isa", isa)
                            .Add("weights", r.type)
                            .Add("cached_tokens", r.T)
                            .Add("batch", r.batch)
                            .Add("bytes", r.bytes)
                            .Add("ms", r.ms)
                            .Add("limit", r.limit)
                            .Add("ratio", r.ratio)
                            .Add("gflops", r.gflops)
                            .Add("omp_regions", r.regions)
                            .Add("threads", env.threads)
                            .Add("omp_wait_policy", bench::OmpWaitPolicy())
                            .str()
                            .c_str());
  } else if (r.kind == "decode") {
    std::printf(
        "%-11s %-7s %-7s %5lld %5d %8.1f %8.2f %8.1f %8.2f %6.2f %7.0f\n",
        isa.c_str(), r.type.c_str(), "decode", static_cast<long long>(r.T),
        r.batch, r.bytes / 1e6, r.ms, r.batch * 1e3 / r.ms, r.limit, r.ratio,
        r.regions);
  } else {
    std::printf(
        "%-11s %-7s %-7s %5lld %5d %8.1f %8.2f %8.1f %8.1f %6.2f %7.0f  "
        "(%.1f GFLOP/s vs sgemm %.1f)\n",
        isa.c_str(), r.type.c_str(), "prefill", static_cast<long long>(r.T),
        r.batch, r.bytes / 1e6, r.ms, kPrefillChunk * 1e3 / r.ms, r.limit,
        r.ratio, r.regions, r.gflops, r.limit);
  }
  std::fflush(stdout);
}

absl::StatusOr<std::unique_ptr<BlockPool>> MakePool(const ModelConfig& c,
                                                    int64_t tokens,
                                                    DType dtype) {
  BlockPoolOptions po;
  po.n_layers = c.n_layers;
  po.n_kv_heads = c.n_kv_heads;
  po.head_dim = c.head_dim;
  po.dtype = dtype;
  po.capacity_bytes =
      (tokens + 4 * po.block_tokens) * c.KvBytesPerToken(po.dtype);
  return BlockPool::Create(po);
}

// `batch` sequences at depth T decode one token together.
absl::StatusOr<Row> Decode(const Env& env, const ModelWeights& w,
                           const std::string& type, int batch, int64_t T) {
  const ModelConfig& c = w.config;
  absl::StatusOr<std::unique_ptr<BlockPool>> pool =
      MakePool(c, batch * (T + 1) + batch * 128, env.kv_dtype);
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(
      &w, pool->get(),
      {.gemv_max_rows = env.gemv_max_rows, .decode_in_team = env.team});
  if (!model.ok()) return model.status();
  std::vector<BlockTable> tables;
  tables.reserve(batch);
  std::vector<SeqChunk> chunks;
  const std::vector<int32_t> token = {42 % c.vocab_size};
  for (int b = 0; b < batch; ++b) {
    tables.emplace_back(pool->get());
    if (absl::Status s = tables.back().Extend(T + 1); !s.ok()) return s;
    FillKv(c, T, tables.back());
  }
  for (int b = 0; b < batch; ++b) {
    chunks.push_back(SeqChunk{.kv = &tables[b],
                              .start_pos = T,
                              .tokens = token,
                              .want_logits = true});
  }
  absl::Status failed;
  auto step = [&] {
    absl::StatusOr<absl::Span<const float>> logits = (*model)->Forward(chunks);
    if (!logits.ok()) failed = logits.status();
  };
  for (int i = 0; i < 3; ++i) step();
  const int64_t regions0 = bench::OmpRegionCount();
  step();
  const int64_t regions = bench::OmpRegionCount() - regions0;
  const int64_t bytes = bench::DecodeWeightBytes(w) +
                        batch * (T + 1) * c.KvBytesPerToken(env.kv_dtype);
  std::vector<double> step_s, roofline_s;
  for (int round = 0; round < env.rounds; ++round) {
    roofline_s.push_back(bytes / (env.probe->MeasureGbps(1) * 1e9));
    for (int i = 0; i < kStepsPerRound; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      step_s.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count());
    }
  }
  if (!failed.ok()) return failed;
  Row r;
  r.type = type;
  r.kind = "decode";
  r.T = T;
  r.batch = batch;
  r.bytes = bytes;
  r.ms = bench::Quantile(step_s, 0.5) * 1e3;
  r.limit = bench::Quantile(roofline_s, 0.5) * 1e3;
  r.ratio = r.ms / r.limit;
  r.regions = regions;
  return r;
}

// One 512-token chunk at position 0.
absl::StatusOr<Row> Prefill(const Env& env, const ModelWeights& w,
                            const std::string& type) {
  const ModelConfig& c = w.config;
  absl::StatusOr<std::unique_ptr<BlockPool>> pool =
      MakePool(c, kPrefillChunk + 16, env.kv_dtype);
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(
      &w, pool->get(),
      {.gemv_max_rows = env.gemv_max_rows, .decode_in_team = env.team});
  if (!model.ok()) return model.status();
  BlockTable table(pool->get());
  if (absl::Status s = table.Extend(kPrefillChunk); !s.ok()) return s;
  std::vector<int32_t> tokens(kPrefillChunk);
  for (int64_t i = 0; i < kPrefillChunk; ++i)
    tokens[i] = (i * 7) % c.vocab_size;
  const SeqChunk chunk{
      .kv = &table, .start_pos = 0, .tokens = tokens, .want_logits = true};
  absl::Status failed;
  int64_t regions = 0;
  const bench::Timing t = bench::TimeCalls(
      [&](int64_t) {
        const int64_t r0 = bench::OmpRegionCount();
        absl::StatusOr<absl::Span<const float>> logits =
            (*model)->Forward(absl::MakeConstSpan(&chunk, 1));
        regions = bench::OmpRegionCount() - r0;
        if (!logits.ok()) failed = logits.status();
      },
      3, 0.5, 1);
  if (!failed.ok()) return failed;
  // Matmul FLOPs of every layer (the classifier runs for the last row
  // only) plus causal attention's QKᵀ and PV.
  const double per_token = 2.0 *
                           (c.dim * (c.q_dim() + 2.0 * c.kv_dim()) +
                            c.q_dim() * c.dim + 3.0 * c.dim * c.hidden_dim) *
                           c.n_layers;
  double attention = 0;
  for (int64_t i = 0; i < kPrefillChunk; ++i) {
    attention += 4.0 * c.n_heads * c.head_dim * (i + 1) * c.n_layers;
  }
  Row r;
  r.type = type;
  r.kind = "prefill";
  r.T = kPrefillChunk;
  r.bytes = w.TotalBytes();
  r.ms = t.median_s * 1e3;
  r.gflops = (per_token * kPrefillChunk + attention) / t.median_s / 1e9;
  r.limit = env.sgemm_gflops;
  r.ratio = r.gflops / env.sgemm_gflops;
  r.regions = regions;
  return r;
}

// --prefill_paths: a chunk of `rows` tokens at position 0 through the two
// routes a quantized matrix can take above a few rows, timed alternately
// (the machine is shared): dequantized panels + oneDNN sgemm
// (gemv_max_rows 8) and the int8 kernels on quantized activations for
// every row (gemv_max_rows = rows). Prints the best median of each.
absl::Status ComparePrefillPaths(const Env& env, const ModelWeights& w,
                                 const std::string& type, int64_t rows) {
  const ModelConfig& c = w.config;
  absl::StatusOr<std::unique_ptr<BlockPool>> pool =
      MakePool(c, rows + 16, env.kv_dtype);
  if (!pool.ok()) return pool.status();
  std::unique_ptr<Model> models[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Create(&w, pool->get(),
                      {.max_batch_tokens = std::max<int64_t>(rows, 512),
                       .gemv_max_rows = i == 0 ? 8 : rows,
                       .decode_in_team = env.team});
    if (!m.ok()) return m.status();
    models[i] = *std::move(m);
  }
  BlockTable table(pool->get());
  KVSERVE_RETURN_IF_ERROR(table.Extend(rows));
  std::vector<int32_t> tokens(rows);
  for (int64_t i = 0; i < rows; ++i) tokens[i] = (i * 7) % c.vocab_size;
  const SeqChunk chunk{
      .kv = &table, .start_pos = 0, .tokens = tokens, .want_logits = true};
  absl::Status failed;
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 2; ++i) {
      const bench::Timing t = bench::TimeCalls(
          [&](int64_t) {
            absl::StatusOr<absl::Span<const float>> logits =
                models[i]->Forward(absl::MakeConstSpan(&chunk, 1));
            if (!logits.ok()) failed = logits.status();
          },
          2, 0.1, 1);
      KVSERVE_RETURN_IF_ERROR(failed);
      best[i] = std::min(best[i], t.median_s * 1e3);
    }
  }
  std::printf(
      "%-11s %-7s rows %4lld: panels+sgemm %8.2f ms, int8 kernels %8.2f ms "
      "(int8 %.2fx the speed)\n",
      std::string(IsaLevelName(EffectiveIsa())).c_str(), type.c_str(),
      static_cast<long long>(rows), best[0], best[1], best[0] / best[1]);
  std::fflush(stdout);
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "decode_bench: %s\n", s.ToString().c_str());
  return 1;
}

// --kv_types: the 1B shape's decode step over each KV type.
int RunKvTypes(Env& env, const std::string& dir, int64_t cached, int passes) {
  RandomModelOptions mo;
  mo.n_layers = 16;
  mo.dim = 2048;
  mo.n_heads = 32;
  mo.n_kv_heads = 8;
  mo.hidden_dim = 8192;
  mo.context_length = static_cast<int>(cached + 256);
  mo.dtype = "q4_k_m";
  mo.vocab_from =
      std::string(KVSERVE_SHARED_DIR) + "/vocab/ggml-vocab-deepseek-llm.gguf";
  mo.name = "kvserve-bench-1b";
  const std::string path = dir + "/1b-q4_k_m.gguf";
  if (absl::Status s = bench::WriteBenchModel(mo, path); !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<LoadedModel> loaded = LoadModel(ModelAt(path));
  if (!loaded.ok()) return Fail(loaded.status());
  const ModelConfig& c = loaded->weights->config;
  if (!env.json) {
    std::printf(
        "1B shape, Q4_K_M (%.0f MB of weights read per step), vocabulary "
        "%d, %lld cached positions, batch 1; %s\n%-7s %12s %8s %8s %8s %6s "
        "%8s\n",
        bench::DecodeWeightBytes(*loaded->weights) / 1e6, c.vocab_size,
        static_cast<long long>(cached), CpuSummary().c_str(), "kv",
        "KV MB/step", "ms", "tok/s", "limit", "ratio", "vs bf16");
  }
  constexpr DType kTypes[] = {DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                              DType::kF32};
  std::map<DType, Row> best;
  for (int pass = 0; pass < passes; ++pass) {
    for (DType kv : kTypes) {
      env.kv_dtype = kv;
      absl::StatusOr<Row> r =
          Decode(env, *loaded->weights, "q4_k_m", 1, cached);
      if (!r.ok()) return Fail(r.status());
      auto it = best.find(kv);
      if (it == best.end() || r->ms < it->second.ms) best[kv] = *r;
    }
  }
  const double bf16_ms = best[DType::kBF16].ms;
  for (DType kv : kTypes) {
    const Row* r = &best[kv];
    const double kv_mb = (cached + 1) * c.KvBytesPerToken(kv) / 1e6;
    if (env.json) {
      std::printf("%s\n", bench::JsonLine()
                              .Add("kind", "kv_type_decode")
                              .Add("isa", IsaLevelName(EffectiveIsa()))
                              .Add("kv_dtype", DTypeName(kv))
                              .Add("cached_tokens", cached)
                              .Add("kv_bytes", kv_mb * 1e6)
                              .Add("ms", r->ms)
                              .Add("limit_ms", r->limit)
                              .Add("ratio", r->ratio)
                              .Add("speed_over_bf16", bf16_ms / r->ms)
                              .str()
                              .c_str());
    } else {
      std::printf("%-7s %12.1f %8.2f %8.2f %8.2f %6.2f %8.2f\n",
                  std::string(DTypeName(kv)).c_str(), kv_mb, r->ms, 1e3 / r->ms,
                  r->limit, r->ratio, bf16_ms / r->ms);
    }
    std::fflush(stdout);
  }
  return 0;
}

int Main(int argc, char** argv) {
  Env env;
  env.json = bench::HasFlag(argc, argv, "--json");
  env.rounds = bench::IntFlag(argc, argv, "--rounds", 8);
  env.threads = omp_get_max_threads();
  env.gemv_max_rows = bench::IntFlag(argc, argv, "--gemv_max_rows", -1);
  const bool quick = bench::HasFlag(argc, argv, "--quick");
  const bool prefill_paths = bench::HasFlag(argc, argv, "--prefill_paths");
  env.team = !bench::HasFlag(argc, argv, "--no_team");
  const bool child = bench::HasFlag(argc, argv, "--child");
  std::string types = "f16,bf16,q8_0,q6_k,q4_k_m,q4_0";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--types=", 0) == 0) types = a.substr(8);
  }

  absl::StatusOr<bench::ScratchDir> dir =
      bench::ScratchDir::Create("decode_bench.");
  if (!dir.ok()) return Fail(dir.status());
  RandomModelOptions mo = bench::BenchModelOptions(kContext);
  mo.n_layers = 8;
  bench::BandwidthProbe probe;
  env.probe = &probe;
  if (bench::HasFlag(argc, argv, "--kv_types")) {
    return RunKvTypes(env, dir->path(),
                      bench::IntFlag(argc, argv, "--kv_cached", 16384),
                      static_cast<int>(std::max<int64_t>(
                          1, bench::IntFlag(argc, argv, "--kv_passes", 3))));
  }
  env.sgemm_gflops = bench::MeasureSgemmGflops(kPrefillChunk, 2816, 1024);
  if (!env.json && !child) {
    std::printf(
        "decode_bench: made model %d layers, dim %d, %d heads / %d KV heads, "
        "hidden %d; KV bf16; %d OpenMP threads, OMP_WAIT_POLICY=%s\n%s; "
        "oneDNN ISA %s\nread bandwidth %.1f GB/s (sampled again between "
        "rounds); oneDNN sgemm 512x2816x1024: %.1f GFLOP/s\n"
        "decode ratio = step / ((weight + KV bytes) / bandwidth), lower is "
        "better, 1.0 is the memory roofline; prefill ratio = GFLOP/s / "
        "sgemm's\n\n",
        mo.n_layers, mo.dim, mo.n_heads, mo.n_kv_heads, mo.hidden_dim,
        env.threads, bench::OmpWaitPolicy().c_str(), CpuSummary().c_str(),
        DnnlIsaName().c_str(), probe.MeasureGbps(3), env.sgemm_gflops);
    std::printf("%-11s %-7s %-7s %5s %5s %8s %8s %8s %8s %6s %7s\n", "isa",
                "weights", "case", "T", "batch", "MB/step", "ms", "tok/s",
                "limit", "ratio", "regions");
  } else if (!env.json) {
    std::printf("(again under KVSERVE_MAX_ISA=avx2: %s)\n",
                CpuSummary().c_str());
  }
  for (const std::string& type :
       std::vector<std::string>(absl::StrSplit(types, ','))) {
    mo.dtype = type;
    const std::string path = dir->path() + "/" + type + ".gguf";
    if (absl::Status s = bench::WriteBenchModel(mo, path); !s.ok()) {
      return Fail(s);
    }
    absl::StatusOr<LoadedModel> loaded = LoadModel(ModelAt(path));
    if (!loaded.ok()) return Fail(loaded.status());
    if (prefill_paths) {
      for (int64_t rows : {16, 64, 512}) {
        if (absl::Status s =
                ComparePrefillPaths(env, *loaded->weights, type, rows);
            !s.ok()) {
          return Fail(s);
        }
      }
      continue;
    }
    for (int batch : {1, 8}) {
      for (int64_t T : {int64_t{128}, int64_t{4000}}) {
        if (quick && batch == 8 && T == 4000) continue;
        absl::StatusOr<Row> r = Decode(env, *loaded->weights, type, batch, T);
        if (!r.ok()) return Fail(r.status());
        Print(env, *r);
      }
    }
    absl::StatusOr<Row> p = Prefill(env, *loaded->weights, type);
    if (!p.ok()) return Fail(p.status());
    Print(env, *p);
  }
  if (child || bench::HasFlag(argc, argv, "--no_avx2") ||
      EffectiveIsa() <= IsaLevel::kAvx2) {
    return 0;
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("KVSERVE_MAX_ISA", "avx2", 1);
    std::vector<char*> args(argv, argv + argc);
    std::string child_flag = "--child";
    args.push_back(child_flag.data());
    args.push_back(nullptr);
    ExecSelf(args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::ExecWithPassiveOmpWaitUnlessSet(argv);
  return kvserve::Main(argc, argv);
}
