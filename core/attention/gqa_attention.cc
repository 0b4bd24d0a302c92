#include "core/attention/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/kv/bf16.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

inline float Load(const float* p, int64_t i) { return p[i]; }
inline float Load(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }

}  // namespace

struct GqaAttention::Impl {
  const BlockPool* pool;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int kv_mul;
  int block_tokens;
  DType dtype;

  // One query row attends to positions [0, n_ctx) of one KV group:
  // online softmax over the group's blocks. out: [head_dim].
  template <typename T>
  void AttendRow(int layer, const SeqKv& seq, int64_t n_ctx, int g,
                 const float* q, float* out) const {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    float m = -INFINITY;
    float l = 0.0f;
    std::fill(out, out + head_dim, 0.0f);
    for (int64_t pos = 0; pos < n_ctx; ++pos) {
      const int32_t block = seq.blocks[pos / block_tokens];
      const int64_t row =
          (int64_t{g} * block_tokens + pos % block_tokens) * head_dim;
      const T* k = static_cast<const T*>(pool->KeyBlock(layer, block)) + row;
      const T* v = static_cast<const T*>(pool->ValueBlock(layer, block)) + row;
      float s = 0.0f;
      for (int d = 0; d < head_dim; ++d) s += q[d] * Load(k, d);
      s *= scale;
      if (s > m) {
        const float c = std::exp(m - s);
        l *= c;
        for (int d = 0; d < head_dim; ++d) out[d] *= c;
        m = s;
      }
      const float p = std::exp(s - m);
      l += p;
      for (int d = 0; d < head_dim; ++d) out[d] += p * Load(v, d);
    }
    for (int d = 0; d < head_dim; ++d) out[d] /= l;
  }

  void Row(int layer, const SeqKv& seq, int64_t n_ctx, int head, const float* q,
           float* out) const {
    if (dtype == DType::kF32) {
      AttendRow<float>(layer, seq, n_ctx, head / kv_mul, q, out);
    } else {
      AttendRow<uint16_t>(layer, seq, n_ctx, head / kv_mul, q, out);
    }
  }
};

absl::StatusOr<std::unique_ptr<GqaAttention>> GqaAttention::Create(
    const BlockPool* pool, const GqaAttentionOptions& options) {
  const BlockPoolOptions& po = pool->options();
  if (options.n_heads <= 0 || options.n_heads % po.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GqaAttention: n_heads %d is not a positive multiple of n_kv_heads %d",
        options.n_heads, po.n_kv_heads));
  }
  auto impl = std::make_unique<Impl>();
  impl->pool = pool;
  impl->n_heads = options.n_heads;
  impl->n_kv_heads = po.n_kv_heads;
  impl->head_dim = po.head_dim;
  impl->kv_mul = options.n_heads / po.n_kv_heads;
  impl->block_tokens = po.block_tokens;
  impl->dtype = po.dtype;
  return std::unique_ptr<GqaAttention>(new GqaAttention(std::move(impl)));
}

GqaAttention::GqaAttention(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
GqaAttention::~GqaAttention() = default;

void GqaAttention::GqaDecode(int layer, absl::Span<const SeqKv> seqs,
                             const float* q, float* out) {
  const Impl& im = *impl_;
  const int64_t n_rows = static_cast<int64_t>(seqs.size()) * im.n_heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < n_rows; ++r) {
    const SeqKv& seq = seqs[r / im.n_heads];
    KVSERVE_CHECK(seq.n_ctx > 0);
    im.Row(layer, seq, seq.n_ctx, static_cast<int>(r % im.n_heads),
           q + r * im.head_dim, out + r * im.head_dim);
  }
}

void GqaAttention::GqaPrefill(int layer, const SeqKv& seq, int64_t start_pos,
                              int64_t n_new, const float* q, float* out) {
  const Impl& im = *impl_;
  KVSERVE_CHECK(start_pos >= 0 && seq.n_ctx >= start_pos + n_new);
  const int64_t n_rows = n_new * im.n_heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t i = r / im.n_heads;
    im.Row(layer, seq, start_pos + i + 1, static_cast<int>(r % im.n_heads),
           q + r * im.head_dim, out + r * im.head_dim);
  }
}

}  // namespace kvserve
