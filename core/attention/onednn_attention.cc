#include "core/attention/onednn_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/dnnl/context.h"
#include "core/kv/kv_rows.h"
#include "core/util/bf16.h"
#include "core/util/check.h"

namespace kvserve::attention_internal {
namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
constexpr int64_t kRt = DNNL_RUNTIME_DIM_VAL;

// Query rows per prefill tile: small enough that the causal waste above the
// diagonal stays low, large enough for an efficient gemm.
constexpr int64_t kPrefillTileRows = 128;
// Positions per batched decode matmul (bounds the per-thread buffers).
constexpr int64_t kStretchTokens = 1024;

dnnl::matmul MakeMatmul(const memory::desc& a, const memory::desc& b,
                        const memory::desc& c, int64_t* scratchpad_bytes) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr,
                                  DnnlEngine());
  *scratchpad_bytes =
      std::max<int64_t>(*scratchpad_bytes, pd.scratchpad_desc().get_size());
  return dnnl::matmul(pd);
}

// Per-thread buffers, grown on demand.
template <typename T>
T* ThreadBuffer(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

void Run(const dnnl::matmul& mm, const memory& a, const memory& b,
         const memory& c, int64_t scratchpad_bytes) {
  thread_local std::vector<char> scratchpad;
  memory sp(memory::desc({scratchpad_bytes}, dt::u8, {1}), DnnlEngine(),
            ThreadBuffer(scratchpad, std::max<int64_t>(1, scratchpad_bytes)));
  dnnl::stream& s = DnnlStream();
  mm.execute(s, {{DNNL_ARG_SRC, a},
                 {DNNL_ARG_WEIGHTS, b},
                 {DNNL_ARG_DST, c},
                 {DNNL_ARG_SCRATCHPAD, sp}});
  s.wait();
}

}  // namespace

OneDnnAttention::OneDnnAttention(const BlockPool* pool, int n_heads,
                                 int sliding_window)
    : pool_(pool),
      n_heads_(n_heads),
      sliding_window_(sliding_window),
      n_kv_heads_(pool->options().n_kv_heads),
      head_dim_(pool->options().head_dim),
      kv_mul_(n_heads / pool->options().n_kv_heads),
      block_tokens_(pool->options().block_tokens),
      dtype_(pool->options().dtype),
      max_stretch_blocks_(static_cast<int>(
          std::max<int64_t>(1, kStretchTokens / block_tokens_))),
      row_ops_(SelectRowOps(BestIsa())) {
  const int64_t d = head_dim_;
  const int64_t ldo = int64_t{n_heads_} * d;
  prefill_qk_ = MakeMatmul(memory::desc({kRt, d}, dt::f32, {d, 1}),
                           memory::desc({d, kRt}, dt::f32, {1, d}),
                           memory::desc({kRt, kRt}, dt::f32, {kRt, 1}),
                           &prefill_scratchpad_bytes_);
  prefill_pv_ = MakeMatmul(memory::desc({kRt, kRt}, dt::f32, {kRt, 1}),
                           memory::desc({kRt, d}, dt::f32, {d, 1}),
                           memory::desc({kRt, d}, dt::f32, {ldo, 1}),
                           &prefill_scratchpad_bytes_);
}

void OneDnnAttention::Prefill(int layer, const SeqKv& seq, int64_t start_pos,
                              int64_t n_new, const float* q, float* out) {
  const int64_t d = head_dim_;
  const int64_t n_ctx = start_pos + n_new;
  const int64_t bt = block_tokens_;
  const int64_t row = int64_t{n_heads_} * d;
  const int64_t ldo = row;
  const float q_scale =
      static_cast<float>(std::numbers::log2e / std::sqrt(double{1.0} * d));
  // The first position a query at `pos` attends to.
  const int64_t window = sliding_window_;
  auto window_start = [window](int64_t pos) {
    return window > 0 ? std::max<int64_t>(0, pos - window + 1) : int64_t{0};
  };
  // Positions [lo, n_ctx) are gathered, as rows pos - lo.
  const int64_t lo = window_start(start_pos);
  std::vector<float> kc((n_ctx - lo) * d), vc((n_ctx - lo) * d);
  const int64_t n_tiles = (n_new + kPrefillTileRows - 1) / kPrefillTileRows;
  const int64_t n_items = int64_t{kv_mul_} * n_tiles;
  const dnnl::engine& engine = DnnlEngine();

#pragma omp parallel
  {
    thread_local std::vector<float> qt_buf, s_buf, inv_buf;
    for (int g = 0; g < n_kv_heads_; ++g) {
#pragma omp for schedule(static)
      for (int64_t pos = lo; pos < n_ctx; ++pos) {
        const int32_t block = seq.blocks[pos / bt];
        const int64_t at = pool_->GroupOffset(g);
        LoadKvRowAt(
            dtype_,
            static_cast<const char*>(pool_->KeyBlock(layer, block)) + at, d, bt,
            pos % bt, &kc[(pos - lo) * d]);
        LoadKvRowAt(
            dtype_,
            static_cast<const char*>(pool_->ValueBlock(layer, block)) + at, d,
            bt, pos % bt, &vc[(pos - lo) * d]);
      }
      // (implicit barrier: the group's K and V are gathered)
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = n_items - 1; item >= 0; --item) {  // long first
        const int h = static_cast<int>(item % kv_mul_);
        const int64_t i0 = (item / kv_mul_) * kPrefillTileRows;
        const int64_t m = std::min(kPrefillTileRows, n_new - i0);
        // The tile's columns: positions [c0, c0 + n), from the first row's
        // window start to the last row (causal bound).
        const int64_t c0 = window_start(start_pos + i0);
        const int64_t n = start_pos + i0 + m - c0;
        const int64_t head = int64_t{g} * kv_mul_ + h;
        float* qt = ThreadBuffer(qt_buf, m * d);
        float* s = ThreadBuffer(s_buf, m * n);
        float* inv = ThreadBuffer(inv_buf, m);
        for (int64_t r = 0; r < m; ++r) {
          const float* src = q + (i0 + r) * row + head * d;
          for (int64_t i = 0; i < d; ++i) qt[r * d + i] = src[i] * q_scale;
        }
        float* k_cols = kc.data() + (c0 - lo) * d;
        float* v_cols = vc.data() + (c0 - lo) * d;
        Run(prefill_qk_,
            memory(memory::desc({m, d}, dt::f32, {d, 1}), engine, qt),
            memory(memory::desc({d, n}, dt::f32, {1, d}), engine, k_cols),
            memory(memory::desc({m, n}, dt::f32, {n, 1}), engine, s),
            prefill_scratchpad_bytes_);
        for (int64_t r = 0; r < m; ++r) {
          float* sr = s + r * n;
          const int64_t pos = start_pos + i0 + r;
          const int64_t first = window_start(pos) - c0, end = pos + 1 - c0;
          const int valid = static_cast<int>(end - first);
          const float mx = row_ops_.max(sr + first, valid);
          inv[r] = 1.0f / row_ops_.exp2_sum(sr + first, valid, mx);
          std::fill(sr, sr + first, 0.0f);
          std::fill(sr + end, sr + n, 0.0f);
        }
        float* o = out + i0 * row + head * d;
        Run(prefill_pv_,
            memory(memory::desc({m, n}, dt::f32, {n, 1}), engine, s),
            memory(memory::desc({n, d}, dt::f32, {d, 1}), engine, v_cols),
            memory(memory::desc({m, d}, dt::f32, {ldo, 1}), engine, o),
            prefill_scratchpad_bytes_);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t i = 0; i < d; ++i) o[r * row + i] *= inv[r];
        }
      }
      // (implicit barrier: kc and vc are reused by the next group)
    }
  }
}

const OneDnnAttention::DecodePrims& OneDnnAttention::Decode(int blocks) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<DecodePrims>& p = decode_[blocks];
  if (p != nullptr) return *p;
  p = std::make_unique<DecodePrims>();
  const int64_t r = blocks;
  const int64_t h = kv_mul_;
  const int64_t d = head_dim_;
  const int64_t bt = block_tokens_;
  const int64_t stride = int64_t{n_kv_heads_} * bt * d;
  const dt kv = dtype_ == DType::kF32 ? dt::f32 : dt::bf16;
  p->q_md = memory::desc({1, h, d}, kv, {h * d, d, 1});
  p->k_md = memory::desc({r, d, bt}, kv, {stride, 1, d});
  p->s_md = memory::desc({r, h, bt}, dt::f32, {h * bt, bt, 1});
  p->qk = MakeMatmul(p->q_md, p->k_md, p->s_md, &p->scratchpad_bytes);
  p->p_md = memory::desc({r, h, bt}, kv, {h * bt, bt, 1});
  p->v_md = memory::desc({r, bt, d}, kv, {stride, d, 1});
  p->o_md = memory::desc({r, h, d}, dt::f32, {h * d, d, 1});
  p->pv = MakeMatmul(p->p_md, p->v_md, p->o_md, &p->scratchpad_bytes);
  return *p;
}

void OneDnnAttention::DecodeRun(const DecodeArgs& a, PartialState st) {
  const int h_n = kv_mul_;
  const int64_t d = head_dim_;
  const int64_t bt = block_tokens_;
  const bool bf16 = dtype_ == DType::kBF16;
  const int64_t elem = DTypeSize(dtype_);
  const dnnl::engine& engine = DnnlEngine();
  thread_local std::vector<float> s_buf, o_buf;
  thread_local std::vector<uint16_t> q16_buf, p16_buf;
  thread_local std::vector<char> v_pad_buf;
  const int64_t max_r = max_stretch_blocks_;
  float* s = ThreadBuffer(s_buf, max_r * h_n * bt);
  float* o = ThreadBuffer(o_buf, max_r * h_n * d);
  void* q_in = const_cast<float*>(a.q);
  uint16_t* p16 = nullptr;
  if (bf16) {
    uint16_t* q16 = ThreadBuffer(q16_buf, h_n * d);
    for (int64_t i = 0; i < h_n * d; ++i) q16[i] = FloatToBf16(a.q[i]);
    q_in = q16;
    p16 = ThreadBuffer(p16_buf, max_r * h_n * bt);
  }
  StartState(a, st);

  // Positions past the last valid one hold garbage (maybe NaN bit patterns,
  // and 0 · NaN = NaN), so a partly filled last block is multiplied from a
  // zero-padded copy of its V rows; so is a first block with skipped
  // positions (a sliding window's start), which is a stretch of its own.
  const bool partial_last = a.last_block_tokens < bt;
  const int skip = a.first_block_skip;
  const int full_blocks = a.n_blocks - (partial_last ? 1 : 0);
  for (int j = 0; j < a.n_blocks;) {
    int r = 1;
    while (j + r < full_blocks && r < max_r &&
           a.blocks[j + r] == a.blocks[j] + r && !(j == 0 && skip > 0)) {
      ++r;
    }
    const bool has_last = j + r == a.n_blocks;
    const bool has_skip = j == 0 && skip > 0;  // then r == 1
    // Valid positions [from(b), to(b)) of block b of the stretch.
    auto from = [&](int b) { return has_skip && b == 0 ? skip : 0; };
    auto to = [&](int b) {
      return has_last && b == r - 1 ? a.last_block_tokens
                                    : static_cast<int>(bt);
    };
    const DecodePrims& p = Decode(r);
    const int64_t offset = a.blocks[j] * a.block_stride;
    Run(p.qk, memory(p.q_md, engine, q_in),
        memory(p.k_md, engine,
               const_cast<char*>(static_cast<const char*>(a.k_base) + offset)),
        memory(p.s_md, engine, s), p.scratchpad_bytes);
    for (int h = 0; h < h_n; ++h) {
      float m_new = st.m[h];
      for (int b = 0; b < r; ++b) {
        const float* sb = s + (b * h_n + h) * bt;
        m_new = std::max(m_new, row_ops_.max(sb + from(b), to(b) - from(b)));
      }
      const float alpha = Exp2(st.m[h] - m_new);
      float l = st.l[h] * alpha;
      for (int b = 0; b < r; ++b) {
        float* sb = s + (b * h_n + h) * bt;
        l += row_ops_.exp2_sum(sb + from(b), to(b) - from(b), m_new);
        std::fill(sb, sb + from(b), 0.0f);
        std::fill(sb + to(b), sb + bt, 0.0f);
      }
      st.l[h] = l;
      st.m[h] = m_new;
      float* acc = st.acc + h * d;
      for (int64_t i = 0; i < d; ++i) acc[i] *= alpha;
    }
    void* p_in = s;
    if (bf16) {
      for (int64_t i = 0; i < r * h_n * bt; ++i) p16[i] = FloatToBf16(s[i]);
      p_in = p16;
    }
    const char* v = static_cast<const char*>(a.v_base) + offset;
    if ((has_last && partial_last) || has_skip) {  // r == 1: one block
      char* padded = ThreadBuffer(v_pad_buf, bt * d * elem);
      const int64_t lo = from(0) * d * elem, hi = to(0) * d * elem;
      std::fill(padded, padded + lo, 0);
      std::copy(v + lo, v + hi, padded + lo);
      std::fill(padded + hi, padded + bt * d * elem, 0);
      v = padded;
    }
    Run(p.pv, memory(p.p_md, engine, p_in),
        memory(p.v_md, engine, const_cast<char*>(v)), memory(p.o_md, engine, o),
        p.scratchpad_bytes);
    for (int b = 0; b < r; ++b) {
      for (int64_t i = 0; i < h_n * d; ++i) st.acc[i] += o[b * h_n * d + i];
    }
    j += r;
  }
}

}  // namespace kvserve::attention_internal
