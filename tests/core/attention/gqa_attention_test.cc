#include "core/attention/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"
#include "core/kv/kv_rows.h"
#include "core/util/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/testing/sanitizers.h"

namespace kvserve {
namespace {

constexpr int kLayers = 2;
constexpr int kLayer = 1;  // the layer under test; layer 0 holds decoys
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Context lengths. Under a sanitizer, which looks for memory errors and not
// at the numbers, they are shorter but cross the same boundaries: kMid more
// than a decode run's 256 tokens (kMinRunTokens), kLong more than oneDNN's
// 1024-token stretch (kStretchTokens). 5000 and 1000 took 6 minutes of the
// ASan suite; the release suites keep them.
constexpr int64_t kLong = testing::kSanitizer ? 1100 : 5000;
constexpr int64_t kMid = testing::kSanitizer ? 300 : 1000;

struct Shape {
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int block_tokens;
  DType dtype;
};

std::string Name(const Shape& s) {
  return absl::StrFormat("heads%d_kv%d_d%d_bt%d_%s", s.n_heads, s.n_kv_heads,
                         s.head_dim, s.block_tokens, DTypeName(s.dtype));
}

// A pool with sequences of random K/V and a copy of layer kLayer's values
// as stored (bf16-rounded when the pool is bf16), for the reference.
class Cache {
 public:
  Cache(const Shape& shape, int64_t capacity_tokens, uint32_t seed)
      : shape_(shape), rng_(seed) {
    BlockPoolOptions o;
    o.n_layers = kLayers;
    o.n_kv_heads = shape.n_kv_heads;
    o.head_dim = shape.head_dim;
    o.block_tokens = shape.block_tokens;
    o.dtype = shape.dtype;
    o.capacity_bytes = capacity_tokens * 2 * kLayers * shape.n_kv_heads *
                       DTypeRowBytes(shape.dtype, shape.head_dim);
    pool_ = std::move(BlockPool::Create(o)).value();
    // Unwritten positions hold NaN, so reading past n_ctx fails the test.
    const int64_t block_bytes = int64_t{shape.n_kv_heads} * shape.block_tokens *
                                DTypeRowBytes(shape.dtype, shape.head_dim);
    for (int layer = 0; layer < kLayers; ++layer) {
      for (int32_t b = 0; b < pool_->num_blocks(); ++b) {
        std::memset(pool_->KeyBlock(layer, b), 0xff, block_bytes);
        std::memset(pool_->ValueBlock(layer, b), 0xff, block_bytes);
      }
    }
  }

  BlockPool* pool() { return pool_.get(); }
  int kv_dim() const { return shape_.n_kv_heads * shape_.head_dim; }

  // A new sequence of `len` random positions; returns its index.
  int Add(int64_t len) {
    tables_.emplace_back(pool_.get());
    k_.emplace_back();
    v_.emplace_back();
    Grow(static_cast<int>(tables_.size()) - 1, len);
    return static_cast<int>(tables_.size()) - 1;
  }

  // A sequence sharing the first `keep` positions of `src`, then `extra`
  // fresh ones.
  int Fork(int src, int64_t keep, int64_t extra) {
    tables_.push_back(tables_[src].Fork());
    tables_.back().Truncate(keep);
    k_.push_back(
        std::vector<float>(k_[src].begin(), k_[src].begin() + keep * kv_dim()));
    v_.push_back(
        std::vector<float>(v_[src].begin(), v_[src].begin() + keep * kv_dim()));
    const int idx = static_cast<int>(tables_.size()) - 1;
    Grow(idx, keep + extra);
    return idx;
  }

  // A new sequence of `len` positions whose every K element is `k` and
  // every V element `v`.
  int AddConstant(int64_t len, float k, float v) {
    tables_.emplace_back(pool_.get());
    k_.emplace_back();
    v_.emplace_back();
    Grow(static_cast<int>(tables_.size()) - 1, len, std::pair{k, v});
    return static_cast<int>(tables_.size()) - 1;
  }

  // Positions up to `len`: random, or all elements `constant` (K, V).
  void Grow(int seq, int64_t len,
            std::optional<std::pair<float, float>> constant = std::nullopt) {
    BlockTable& t = tables_[seq];
    const int64_t from = t.num_tokens();
    ASSERT_TRUE(t.Extend(len).ok());
    std::uniform_real_distribution<float> uniform(-1.7f, 1.7f);  // var ~1
    std::vector<float> k(kv_dim()), v(kv_dim());
    for (int64_t pos = from; pos < len; ++pos) {
      for (int layer = 0; layer < kLayers; ++layer) {
        for (int i = 0; i < kv_dim(); ++i) {
          k[i] = constant ? constant->first : uniform(rng_);
          v[i] = constant ? constant->second : uniform(rng_);
        }
        if (layer == kLayer) {
          Stored(k, &k_[seq]);
          Stored(v, &v_[seq]);
        } else {  // decoys far from the real values
          for (int i = 0; i < kv_dim(); ++i) v[i] += 1000.0f;
        }
        t.WriteKv(layer, pos, k.data(), v.data());
      }
    }
  }

  SeqKv View(int seq, int64_t n_ctx) const {
    return SeqKv{tables_[seq].blocks(), n_ctx};
  }

  std::vector<float> Random(int64_t n) {
    std::normal_distribution<float> normal;
    std::vector<float> x(n);
    for (float& f : x) f = normal(rng_);
    return x;
  }

  // Layer kLayer's K and V of the sequence's blocks wholly before `pos`
  // become NaN (the reference keeps its copy): reading them fails the test.
  void PoisonBefore(int seq, int64_t pos) {
    const int64_t block_bytes = int64_t{shape_.n_kv_heads} *
                                shape_.block_tokens *
                                DTypeRowBytes(shape_.dtype, shape_.head_dim);
    for (int64_t b = 0; b < pos / shape_.block_tokens; ++b) {
      const int32_t id = tables_[seq].blocks()[b];
      std::memset(pool_->KeyBlock(kLayer, id), 0xff, block_bytes);
      std::memset(pool_->ValueBlock(kLayer, id), 0xff, block_bytes);
    }
  }

  // softmax(q·K[first, n_ctx)ᵀ / sqrt(d)) · V for query head `head`, in
  // double; first = n_ctx - window with a window (> 0), else 0.
  std::vector<double> Reference(int seq, int64_t n_ctx, int head,
                                const float* q, int64_t window = 0) const {
    const int d_dim = shape_.head_dim;
    const int g = head / (shape_.n_heads / shape_.n_kv_heads);
    const int64_t first = window > 0 ? std::max<int64_t>(0, n_ctx - window) : 0;
    std::vector<double> s(n_ctx, -INFINITY);
    double m = -INFINITY;
    for (int64_t t = first; t < n_ctx; ++t) {
      const float* k = &k_[seq][t * kv_dim() + g * d_dim];
      double dot = 0;
      for (int d = 0; d < d_dim; ++d) dot += double{q[d]} * k[d];
      s[t] = dot / std::sqrt(double{1.0} * d_dim);
      m = std::max(m, s[t]);
    }
    double l = 0;
    std::vector<double> out(d_dim, 0.0);
    for (int64_t t = first; t < n_ctx; ++t) {
      const double p = std::exp(s[t] - m);
      l += p;
      const float* v = &v_[seq][t * kv_dim() + g * d_dim];
      for (int d = 0; d < d_dim; ++d) out[d] += p * v[d];
    }
    for (double& o : out) o /= l;
    return out;
  }

 private:
  // Appends a position's rows as the pool keeps them (bf16-rounded, or
  // quantized by blocks of 32 and read back).
  void Stored(const std::vector<float>& x, std::vector<float>* out) const {
    std::vector<char> row(DTypeRowBytes(shape_.dtype, shape_.head_dim));
    std::vector<float> back(shape_.head_dim);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      StoreKvRow(shape_.dtype, &x[h * shape_.head_dim], shape_.head_dim,
                 row.data());
      LoadKvRow(shape_.dtype, row.data(), shape_.head_dim, back.data());
      out->insert(out->end(), back.begin(), back.end());
    }
  }

  Shape shape_;
  std::mt19937 rng_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<BlockTable> tables_;
  std::vector<std::vector<float>> k_;  // [seq][pos][kv_head][head_dim]
  std::vector<std::vector<float>> v_;
};

// bf16 caches: the AVX512_BF16 kernel rounds q and p to bf16; q8_0 and
// q4_0: the AVX512_VNNI kernel quantizes q to blocks of 8 bits, as
// llama.cpp does (without VNNI they are widened to f32 exactly as stored,
// as tight as f32).
double Tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

// ‖out − ref‖ / ‖ref‖ accumulated over rows.
class ErrorNorm {
 public:
  void Add(const float* out, const std::vector<double>& ref) {
    for (size_t i = 0; i < ref.size(); ++i) {
      diff_ += (out[i] - ref[i]) * (out[i] - ref[i]);
      norm_ += ref[i] * ref[i];
    }
  }
  double Relative() const { return std::sqrt(diff_ / norm_); }

 private:
  double diff_ = 0;
  double norm_ = 0;
};

absl::StatusOr<std::unique_ptr<GqaAttention>> TryMakeAttention(
    const BlockPool* pool, const Shape& s, AttentionPath decode_path,
    AttentionPath prefill_path, int sliding_window = 0) {
  GqaAttentionOptions o;
  o.n_heads = s.n_heads;
  o.sliding_window = sliding_window;
  o.decode_path = decode_path;
  o.prefill_path = prefill_path;
  return GqaAttention::Create(pool, o);
}

// Declares `var`, the attention for (pool, shape, decode path, prefill
// path); skips the test when
// this CPU (under KVSERVE_MAX_ISA) has no kernels for the path.
#define MAKE_ATTENTION_OR_SKIP(var, ...)                              \
  auto var##_or = TryMakeAttention(__VA_ARGS__);                      \
  if (var##_or.status().code() == absl::StatusCode::kUnimplemented) { \
    GTEST_SKIP() << "not on this CPU (" << CpuSummary()               \
                 << "): " << var##_or.status();                       \
  }                                                                   \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                    \
  std::unique_ptr<GqaAttention> var = std::move(*var##_or)

// Runs GqaDecode on `seqs` (index, n_ctx) and checks every row (against
// the reference with `window`, which must be the attention's).
void CheckDecode(Cache& cache, GqaAttention& attention, const Shape& shape,
                 const std::vector<std::pair<int, int64_t>>& seqs,
                 int64_t window = 0) {
  const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
  std::vector<SeqKv> views;
  for (auto [seq, n_ctx] : seqs) views.push_back(cache.View(seq, n_ctx));
  std::vector<float> q = cache.Random(seqs.size() * row);
  std::vector<float> out(q.size(), kNaN);
  attention.GqaDecode(kLayer, views, q.data(), out.data());
  for (size_t b = 0; b < seqs.size(); ++b) {
    ErrorNorm err;
    for (int h = 0; h < shape.n_heads; ++h) {
      const int64_t at = b * row + int64_t{h} * shape.head_dim;
      err.Add(&out[at], cache.Reference(seqs[b].first, seqs[b].second, h,
                                        &q[at], window));
    }
    EXPECT_LT(err.Relative(), Tolerance(shape.dtype))
        << Name(shape) << " seq " << b << " n_ctx " << seqs[b].second
        << " window " << window;
  }
}

const char* PathName(AttentionPath p) {
  switch (p) {
    case AttentionPath::kAuto:
      return "auto";
    case AttentionPath::kFused:
      return "fused";
    case AttentionPath::kOneDnn:
      return "onednn";
    case AttentionPath::kLlamaOrder:
      return "llama";
  }
  return "?";
}

class DecodeTest
    : public ::testing::TestWithParam<
          std::tuple<int /*kv_mul*/, int /*head_dim*/, DType, AttentionPath>> {
 protected:
  Shape GetShape() const {
    auto [kv_mul, head_dim, dtype, path] = GetParam();
    return Shape{8, 8 / kv_mul, head_dim, 16, dtype};
  }
  AttentionPath Path() const { return std::get<3>(GetParam()); }
};

std::string ParamName(
    const ::testing::TestParamInfo<DecodeTest::ParamType>& info) {
  return absl::StrFormat(
      "kvmul%d_d%d_%s_%s", std::get<0>(info.param), std::get<1>(info.param),
      DTypeName(std::get<2>(info.param)), PathName(std::get<3>(info.param)));
}

TEST_P(DecodeTest, MixedBatchAndSingleSequences) {
  const Shape shape = GetShape();
  const int bt = shape.block_tokens;
  const std::vector<int64_t> lengths = {1, bt - 1, bt, bt + 1, kMid, kLong};
  Cache cache(shape, 2 * (kLong + kMid + 200),
              1234 + shape.head_dim + shape.n_kv_heads);
  MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape, Path(), Path());
  std::vector<std::pair<int, int64_t>> batch;
  for (int64_t len : lengths) batch.push_back({cache.Add(len), len});
  // A context shorter than the table: positions past n_ctx are ignored.
  batch.push_back({cache.Add(bt + 7), bt + 3});
  CheckDecode(cache, *attention, shape, batch);
  for (const auto& one : batch) CheckDecode(cache, *attention, shape, {one});
}

TEST_P(DecodeTest, SharedPrefixBlocks) {
  const Shape shape = GetShape();
  const int bt = shape.block_tokens;
  Cache cache(shape, 2000, 99 + shape.head_dim);
  MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape, Path(), Path());
  const int base = cache.Add(10 * bt + 5);
  const int a = cache.Fork(base, 10 * bt + 5, 40);  // copy-on-write
  const int b = cache.Fork(base, 4 * bt, 3);        // shares whole blocks
  const int c = cache.Fork(a, 7 * bt + 2, 300);
  EXPECT_GT(cache.pool()->num_shared_blocks(), 0);
  CheckDecode(cache, *attention, shape,
              {{base, 10 * bt + 5},
               {a, 10 * bt + 45},
               {b, 4 * bt + 3},
               {c, 7 * bt + 302}});
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, DecodeTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(8, 64, 128),
                       ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kOneDnn)),
    ParamName);
// llama.cpp's float order: f32 caches only.
INSTANTIATE_TEST_SUITE_P(
    LlamaOrder, DecodeTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(8, 64, 128),
                       ::testing::Values(DType::kF32),
                       ::testing::Values(AttentionPath::kLlamaOrder)),
    ParamName);

// q8_0 and q4_0 caches (head_dim a multiple of their 32-element blocks):
// the fused kernel reads them; oneDNN cannot (refused, below).
INSTANTIATE_TEST_SUITE_P(
    Quantized, DecodeTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(64, 128),
                       ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionPath::kFused)),
    ParamName);

class PrefillTest : public DecodeTest {};

TEST_P(PrefillTest, ChunksAtOffsets) {
  const Shape shape = GetShape();
  const int bt = shape.block_tokens;
  Cache cache(shape, 3000, 7 + shape.head_dim + shape.n_kv_heads);
  MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape, AttentionPath::kAuto,
                         Path());
  const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
  struct Chunk {
    int64_t start, n_new;
  };
  // Across oneDNN's 1024-token stretch and its 128-row prefill tile.
  const Chunk across_stretch =
      testing::kSanitizer ? Chunk{1020, 9} : Chunk{1000, 70};
  const Chunk across_tile = testing::kSanitizer ? Chunk{5, 130} : Chunk{5, 300};
  for (Chunk c : {Chunk{0, 1}, Chunk{0, 37}, Chunk{bt - 1, bt + 2},
                  across_stretch, across_tile}) {
    const int seq = cache.Add(c.start + c.n_new);
    std::vector<float> q = cache.Random(c.n_new * row);
    std::vector<float> out(q.size(), kNaN);
    attention->GqaPrefill(kLayer, cache.View(seq, c.start + c.n_new), c.start,
                          c.n_new, q.data(), out.data());
    ErrorNorm err;
    for (int64_t i = 0; i < c.n_new; ++i) {
      for (int h = 0; h < shape.n_heads; ++h) {
        const int64_t at = i * row + int64_t{h} * shape.head_dim;
        err.Add(&out[at], cache.Reference(seq, c.start + i + 1, h, &q[at]));
      }
    }
    EXPECT_LT(err.Relative(), Tolerance(shape.dtype))
        << Name(shape) << " start " << c.start << " n_new " << c.n_new;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, PrefillTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(8, 64, 128),
                       ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kOneDnn)),
    ParamName);
// oneDNN's prompt path reads quantized rows as floats, a group at a time.
INSTANTIATE_TEST_SUITE_P(
    Quantized, PrefillTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(64, 128),
                       ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kOneDnn)),
    ParamName);
INSTANTIATE_TEST_SUITE_P(
    LlamaOrder, PrefillTest,
    ::testing::Combine(::testing::Values(1, 2, 4, 8),
                       ::testing::Values(8, 64, 128),
                       ::testing::Values(DType::kF32),
                       ::testing::Values(AttentionPath::kLlamaOrder)),
    ParamName);

// Odd and large block sizes: tiles and stretches that straddle blocks.
class BlockSizesTest
    : public ::testing::TestWithParam<std::tuple<DType, AttentionPath>> {};

TEST_P(BlockSizesTest, DecodeAndPrefill) {
  const auto [dtype, path] = GetParam();
  for (int bt : {1, 7, 48, 128}) {
    const Shape shape{8, 2, 64, bt, dtype};
    Cache cache(shape, 4000, 5 + bt);
    MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape, path, path);
    std::vector<std::pair<int, int64_t>> batch;
    for (int64_t len : {int64_t{1}, int64_t{bt} + 1, int64_t{2} * bt, kMid}) {
      batch.push_back({cache.Add(len), len});
    }
    CheckDecode(cache, *attention, shape, batch);
    // Prefill of the last 37 positions of the longest sequence.
    const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
    std::vector<float> q = cache.Random(37 * row);
    std::vector<float> out(q.size(), kNaN);
    attention->GqaPrefill(kLayer, cache.View(batch.back().first, kMid),
                          kMid - 37, 37, q.data(), out.data());
    ErrorNorm err;
    for (int64_t i = 0; i < 37; ++i) {
      for (int h = 0; h < shape.n_heads; ++h) {
        const int64_t at = i * row + int64_t{h} * shape.head_dim;
        err.Add(&out[at],
                cache.Reference(batch.back().first, kMid - 36 + i, h, &q[at]));
      }
    }
    EXPECT_LT(err.Relative(), Tolerance(dtype)) << Name(shape);
  }
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndPaths, BlockSizesTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kOneDnn)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });
INSTANTIATE_TEST_SUITE_P(
    Quantized, BlockSizesTest,
    ::testing::Combine(::testing::Values(DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionPath::kFused)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });
INSTANTIATE_TEST_SUITE_P(
    LlamaOrder, BlockSizesTest,
    ::testing::Combine(::testing::Values(DType::kF32),
                       ::testing::Values(AttentionPath::kLlamaOrder)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });

// A sliding window W (the query at i attends to i - W < j <= i) in decode
// and prefill: windows shorter and longer than a block, starting inside a
// block or at its start, and longer than the context. The blocks wholly
// before a window hold NaN: they must not be read.
class WindowTest
    : public ::testing::TestWithParam<std::tuple<DType, AttentionPath>> {};

TEST_P(WindowTest, DecodeAndPrefillWithinTheWindow) {
  const auto [dtype, path] = GetParam();
  const int bt = 16;
  const Shape shape{8, 2, 64, bt, dtype};
  const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
  for (int64_t window : {int64_t{1}, int64_t{5}, int64_t{bt}, int64_t{bt} + 3,
                         int64_t{100}, kLong}) {
    Cache cache(shape, 2 * kMid + 1000, 17 + window);
    MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape, path, path,
                           static_cast<int>(window));
    std::vector<std::pair<int, int64_t>> batch;
    for (int64_t len :
         {int64_t{1}, int64_t{3}, int64_t{bt}, 2 * int64_t{bt} + 5, kMid}) {
      const int seq = cache.Add(len);
      cache.PoisonBefore(seq, len - window);
      batch.push_back({seq, len});
    }
    CheckDecode(cache, *attention, shape, batch, window);
    for (const auto& one : batch) {
      CheckDecode(cache, *attention, shape, {one}, window);
    }
    struct Chunk {
      int64_t start, n_new;
    };
    for (Chunk c : {Chunk{0, 37}, Chunk{bt - 1, bt + 2}, Chunk{200, 70},
                    Chunk{5, 7}, Chunk{300, 1}}) {
      const int seq = cache.Add(c.start + c.n_new);
      cache.PoisonBefore(seq, c.start - window + 1);
      std::vector<float> q = cache.Random(c.n_new * row);
      std::vector<float> out(q.size(), kNaN);
      attention->GqaPrefill(kLayer, cache.View(seq, c.start + c.n_new), c.start,
                            c.n_new, q.data(), out.data());
      ErrorNorm err;
      for (int64_t i = 0; i < c.n_new; ++i) {
        for (int h = 0; h < shape.n_heads; ++h) {
          const int64_t at = i * row + int64_t{h} * shape.head_dim;
          err.Add(&out[at],
                  cache.Reference(seq, c.start + i + 1, h, &q[at], window));
        }
      }
      EXPECT_LT(err.Relative(), Tolerance(dtype))
          << Name(shape) << " window " << window << " start " << c.start
          << " n_new " << c.n_new;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndPaths, WindowTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kOneDnn,
                                         AttentionPath::kAuto)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });
INSTANTIATE_TEST_SUITE_P(
    Quantized, WindowTest,
    ::testing::Combine(::testing::Values(DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionPath::kFused,
                                         AttentionPath::kAuto)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });
INSTANTIATE_TEST_SUITE_P(
    LlamaOrder, WindowTest,
    ::testing::Combine(::testing::Values(DType::kF32),
                       ::testing::Values(AttentionPath::kLlamaOrder)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             PathName(std::get<1>(info.param)));
    });

// Every position weighs the same and every V element is its type's
// largest code, over one block of 2048: p·v summed in integers (the VNNI
// kernel's 16-bit weights) must not overflow int32 (2048 · 32767 · 127 >
// 2^31), and the output is v itself.
TEST(GqaAttentionTest, LongBlocksOfExtremeValuesDecodeExactly) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    for (float v : {1.7f, -1.7f}) {
      const Shape shape{8, 2, 64, 2048, dtype};
      Cache cache(shape, 2 * 2048, 11);
      MAKE_ATTENTION_OR_SKIP(attention, cache.pool(), shape,
                             AttentionPath::kFused, AttentionPath::kFused);
      const int seq = cache.AddConstant(2048, 0.5f, v);
      CheckDecode(cache, *attention, shape, {{seq, 2048}, {seq, 2047}});
    }
  }
}

TEST(GqaAttentionTest, RejectsLlamaOrderOverABf16Cache) {
  Cache cache(Shape{8, 4, 8, 16, DType::kBF16}, 64, 1);
  GqaAttentionOptions o;
  o.n_heads = 8;
  o.decode_path = AttentionPath::kLlamaOrder;
  const absl::Status s = GqaAttention::Create(cache.pool(), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("f32 KV cache"), std::string::npos) << s;
}

TEST(GqaAttentionTest, RejectsOneDnnDecodeOverAQuantizedCache) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    Cache cache(Shape{8, 4, 64, 16, dtype}, 64, 1);
    GqaAttentionOptions o;
    o.n_heads = 8;
    o.decode_path = AttentionPath::kOneDnn;
    const absl::Status s = GqaAttention::Create(cache.pool(), o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(std::string(s.message()).find(DTypeName(dtype)),
              std::string::npos)
        << s;
    o.decode_path = AttentionPath::kLlamaOrder;
    EXPECT_EQ(GqaAttention::Create(cache.pool(), o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(GqaAttentionTest, RejectsANegativeWindow) {
  Cache cache(Shape{8, 4, 8, 16, DType::kF32}, 64, 1);
  GqaAttentionOptions o;
  o.n_heads = 8;
  o.sliding_window = -1;
  EXPECT_EQ(GqaAttention::Create(cache.pool(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GqaAttentionTest, RejectsHeadsNotAMultipleOfKvHeads) {
  Cache cache(Shape{8, 4, 8, 16, DType::kF32}, 64, 1);
  for (int n_heads : {0, -4, 6}) {
    GqaAttentionOptions o;
    o.n_heads = n_heads;
    EXPECT_EQ(GqaAttention::Create(cache.pool(), o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvserve
