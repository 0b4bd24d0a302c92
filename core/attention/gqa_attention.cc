#include "core/attention/gqa_attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/attention/decode_kernel.h"
#include "core/attention/llama_order.h"
#include "core/attention/onednn_attention.h"
#include "core/dnnl/context.h"
#include "core/util/check.h"
#include "core/util/cpu_features.h"

namespace kvserve {
namespace {

using attention_internal::DecodeArgs;
using attention_internal::DecodeKernel;
using attention_internal::PartialState;

// Split-K granularity: a (sequence, KV group) is cut into runs of blocks so
// that every thread gets several runs, but no run is shorter than this many
// positions (shorter runs cost more in combining than they gain).
// The fused path hands out a chunk of one sequence's blocks for all KV
// groups as one work item and walks it in memory order (block by block,
// group by group within a block, merging each block into the group's run
// state), so a thread reads K and V as two long sequential streams instead
// of one 32-64 KiB piece per group and block that the hardware prefetcher
// has to pick up again (f32 decode +4-8% GB/s measured back to back;
// KVSERVE_BLOCK_MAJOR=0 restores the per-group order for comparison).
constexpr int64_t kMinRunTokens = 256;
constexpr int kRunsPerThread = 8;
// Prefill chunks of at least this many queries go through oneDNN matmuls;
// shorter ones through the fused decode kernel, row by row.
constexpr int64_t kMinOneDnnPrefill = 16;

// One unit of decode work: a run of one sequence's blocks for one KV group.
struct Run {
  int32_t seq;
  int32_t group;
  int32_t first_block;
  int32_t n_blocks;
  int32_t last_block_tokens;
  int32_t first_block_skip;  // positions of the first block before the window
};

}  // namespace

struct GqaAttention::Impl {
  // Constant after construction.
  const BlockPool* pool;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int kv_mul;
  int block_tokens;
  int sliding_window;  // 0 = none
  DType dtype;
  AttentionPath decode_path;
  AttentionPath prefill_path;
  bool llama_decode = false, llama_prefill = false;  // kLlamaOrder chosen
  float q_scale;  // log2(e) / sqrt(head_dim): scores in log2 units
  DecodeKernel kernel;
  std::unique_ptr<attention_internal::OneDnnAttention> onednn;

  // Reused across calls (the instance is used by one thread at a time).
  std::vector<Run> runs;
  std::vector<int32_t> first_run;  // [seq * n_kv_heads + group], + end
  std::vector<float> partials;     // [run][kv_mul * (2 + head_dim)]
  std::vector<int32_t> chunk_seq;  // per chunk of blocks: its sequence
  std::vector<int32_t> chunk_idx;  // and its index among them
  std::vector<std::vector<float>> thread_scratch;

  int64_t PartialFloats() const { return int64_t{kv_mul} * (2 + head_dim); }
  PartialState Partial(int64_t run) {
    float* p = partials.data() + run * PartialFloats();
    return PartialState{p, p + kv_mul, p + 2 * kv_mul};
  }
  // Bytes of one KV head's rows in a block, and of a block (all heads).
  int64_t GroupBytes() const {
    return int64_t{block_tokens} * DTypeRowBytes(dtype, head_dim);
  }
  int64_t BlockStride() const { return n_kv_heads * GroupBytes(); }
  // The first position the query at n_ctx - 1 attends to.
  int64_t WindowStart(int64_t n_ctx) const {
    return sliding_window > 0 ? std::max<int64_t>(0, n_ctx - sliding_window)
                              : 0;
  }

  bool block_major = false;           // of the current decode
  std::atomic<int64_t> next_item{0};  // its next work item

  void PlanRuns(absl::Span<const SeqKv> seqs, int n_threads, bool block_major);
  // A decode call in three parts: the plan (one thread), the runs (every
  // thread, dynamically), the combination (every thread, its share).
  void PrepareDecode(absl::Span<const SeqKv> seqs, int n_threads, bool fused);
  void DecodeWork(int layer, absl::Span<const SeqKv> seqs, const float* q,
                  bool fused, int tid);
  void CombineRuns(absl::Span<const SeqKv> seqs, float* out, const Team& team);
  void RunDecode(int layer, absl::Span<const SeqKv> seqs, const float* q,
                 float* out, bool fused);
  // kLlamaOrder decode: the team's share of the (sequence, group) pairs.
  void LlamaDecode(int layer, absl::Span<const SeqKv> seqs, const float* q,
                   float* out, const Team& team) const;
  // Fused decode of kv_mul query rows q ([kv_mul][head_dim]) over the
  // group's positions [0, n_ctx) of `seq`, written normalised to out.
  void DecodeRows(int layer, const SeqKv& seq, int64_t n_ctx, int group,
                  const float* q, float* out, float* scratch) const;
};

void GqaAttention::Impl::PlanRuns(absl::Span<const SeqKv> seqs, int n_threads,
                                  bool block_major) {
  int64_t total_blocks = 0;
  for (const SeqKv& s : seqs) {
    KVSERVE_CHECK(s.n_ctx > 0);
    KVSERVE_CHECK(s.n_ctx <=
                  static_cast<int64_t>(s.blocks.size()) * block_tokens);
    total_blocks += (s.n_ctx + block_tokens - 1) / block_tokens -
                    WindowStart(s.n_ctx) / block_tokens;
  }
  if (!block_major) total_blocks *= n_kv_heads;
  const int64_t min_run = (kMinRunTokens + block_tokens - 1) / block_tokens;
  const int64_t target = std::max<int64_t>(
      min_run, (total_blocks + n_threads * kRunsPerThread - 1) /
                   (n_threads * kRunsPerThread));
  runs.clear();
  first_run.clear();
  for (size_t b = 0; b < seqs.size(); ++b) {
    // Blocks [b0, end) hold the window; block b0 from position `skip`.
    const int64_t start = WindowStart(seqs[b].n_ctx);
    const int64_t b0 = start / block_tokens;
    const int32_t skip = static_cast<int32_t>(start % block_tokens);
    const int64_t end = (seqs[b].n_ctx + block_tokens - 1) / block_tokens;
    const int64_t nb = end - b0;
    const int64_t pieces = (nb + target - 1) / target;
    const int64_t per = (nb + pieces - 1) / pieces;
    for (int g = 0; g < n_kv_heads; ++g) {
      first_run.push_back(static_cast<int32_t>(runs.size()));
      for (int64_t j = b0; j < end; j += per) {
        const int64_t n = std::min(per, end - j);
        const int64_t end_tok = std::min(seqs[b].n_ctx, (j + n) * block_tokens);
        runs.push_back(
            Run{static_cast<int32_t>(b), g, static_cast<int32_t>(j),
                static_cast<int32_t>(n),
                static_cast<int32_t>(end_tok - (j + n - 1) * block_tokens),
                j == b0 ? skip : 0});
      }
    }
  }
  first_run.push_back(static_cast<int32_t>(runs.size()));
}

void GqaAttention::Impl::PrepareDecode(absl::Span<const SeqKv> seqs,
                                       int n_threads, bool fused) {
  static const bool block_major_env = [] {
    const char* e = std::getenv("KVSERVE_BLOCK_MAJOR");
    return e == nullptr || e[0] != '0';
  }();
  block_major = fused && block_major_env;
  PlanRuns(seqs, n_threads, block_major);
  partials.resize(runs.size() * PartialFloats());
  const int64_t scratch_floats =
      attention_internal::DecodeScratchFloats(head_dim, kv_mul, block_tokens) +
      int64_t{n_heads} * head_dim;
  chunk_seq.clear();
  chunk_idx.clear();
  for (size_t b = 0; b < seqs.size(); ++b) {
    const int32_t n = first_run[b * n_kv_heads + 1] - first_run[b * n_kv_heads];
    for (int32_t i = 0; i < n; ++i) {
      chunk_seq.push_back(static_cast<int32_t>(b));
      chunk_idx.push_back(i);
    }
  }
  if (static_cast<int>(thread_scratch.size()) < n_threads) {
    thread_scratch.resize(n_threads);
  }
  for (auto& s : thread_scratch) s.resize(scratch_floats);
  next_item.store(0, std::memory_order_relaxed);
}

void GqaAttention::Impl::DecodeWork(int layer, absl::Span<const SeqKv> seqs,
                                    const float* q, bool fused, int tid) {
  const char* k_base = static_cast<const char*>(pool->KeyBlock(layer, 0));
  const char* v_base = static_cast<const char*>(pool->ValueBlock(layer, 0));
  const int64_t row = int64_t{n_heads} * head_dim;
  const int64_t group_floats = int64_t{kv_mul} * head_dim;
  float* scratch = thread_scratch[tid].data();
  float* qs = scratch;  // [n_heads][head_dim], scaled
  DecodeArgs args;
  args.head_dim = head_dim;
  args.kv_mul = kv_mul;
  args.block_tokens = block_tokens;
  args.q = qs;
  args.block_stride = BlockStride();
  args.scratch = scratch + row;
  // Items are taken one at a time from a shared counter (dynamic
  // scheduling: runs differ in length).
  auto next = [&] { return next_item.fetch_add(1, std::memory_order_relaxed); };
  if (block_major) {
    // One item = one chunk of one sequence's blocks, all KV groups, in
    // memory order: block by block, and within a block group by group,
    // so K and V are each read as one long sequential stream.
    const int64_t n_chunks = static_cast<int64_t>(chunk_seq.size());
    for (int64_t c = next(); c < n_chunks; c = next()) {
      const int32_t seq = chunk_seq[c];
      const int32_t idx = chunk_idx[c];
      const Run& run0 = runs[first_run[int64_t{seq} * n_kv_heads] + idx];
      // The sequence's queries, scaled once for all of the chunk's calls.
      const float* qseq = q + seq * row;
      for (int64_t i = 0; i < row; ++i) qs[i] = qseq[i] * q_scale;
      for (int32_t j = 0; j < run0.n_blocks; ++j) {
        args.blocks = seqs[seq].blocks.data() + run0.first_block + j;
        args.n_blocks = 1;
        args.last_block_tokens =
            j + 1 == run0.n_blocks ? run0.last_block_tokens : block_tokens;
        args.first_block_skip = j == 0 ? run0.first_block_skip : 0;
        for (int g = 0; g < n_kv_heads; ++g) {
          // What the loop reads next: the next group's K in this block,
          // else the first group's in the chunk's next block.
          int64_t next = -1;  // its offset from the layer's base
          if (g + 1 < n_kv_heads) {
            next = args.blocks[0] * BlockStride() + (g + 1) * GroupBytes();
          } else if (j + 1 < run0.n_blocks) {
            next = args.blocks[1] * BlockStride();
          }
          args.next_k = next < 0 ? nullptr : k_base + next;
          args.next_v = next < 0 ? nullptr : v_base + next;
          const int64_t r = first_run[int64_t{seq} * n_kv_heads + g] + idx;
          args.q = qs + g * group_floats;
          const int64_t group_offset = g * GroupBytes();
          args.k_base = k_base + group_offset;
          args.v_base = v_base + group_offset;
          // The chunk's later blocks continue its first one's state.
          args.continue_state = j > 0;
          kernel(args, Partial(r));
        }
      }
    }
    return;
  }
  const int64_t n_runs = static_cast<int64_t>(runs.size());
  for (int64_t r = next(); r < n_runs; r = next()) {
    const Run& run = runs[r];
    const float* qg = q + run.seq * row + run.group * group_floats;
    for (int64_t i = 0; i < group_floats; ++i) qs[i] = qg[i] * q_scale;
    const int64_t group_offset = run.group * GroupBytes();
    args.k_base = k_base + group_offset;
    args.v_base = v_base + group_offset;
    args.blocks = seqs[run.seq].blocks.data() + run.first_block;
    args.n_blocks = run.n_blocks;
    args.last_block_tokens = run.last_block_tokens;
    args.first_block_skip = run.first_block_skip;
    if (fused) {
      kernel(args, Partial(r));
    } else {
      onednn->DecodeRun(args, Partial(r));
    }
  }
}

void GqaAttention::Impl::CombineRuns(absl::Span<const SeqKv> seqs, float* out,
                                     const Team& team) {
  // Each (sequence, group)'s runs, rescaled to their common max.
  const int64_t n_pairs = static_cast<int64_t>(seqs.size()) * n_kv_heads;
  const int64_t row = int64_t{n_heads} * head_dim;
  const int64_t group_floats = int64_t{kv_mul} * head_dim;
  int64_t begin = 0, end = 0;
  team.Share(n_pairs, 1, &begin, &end);
  for (int64_t pair = begin; pair < end; ++pair) {
    const int32_t r0 = first_run[pair];
    const int32_t r1 = first_run[pair + 1];
    float* o =
        out + (pair / n_kv_heads) * row + (pair % n_kv_heads) * group_floats;
    for (int h = 0; h < kv_mul; ++h) {
      float m = -INFINITY;
      for (int32_t r = r0; r < r1; ++r) m = std::max(m, Partial(r).m[h]);
      float l = 0.0f;
      float* oh = o + h * head_dim;
      std::fill(oh, oh + head_dim, 0.0f);
      for (int32_t r = r0; r < r1; ++r) {
        const PartialState p = Partial(r);
        const float c = attention_internal::Exp2(p.m[h] - m);
        l += p.l[h] * c;
        const float* acc = p.acc + h * head_dim;
        for (int d = 0; d < head_dim; ++d) oh[d] += c * acc[d];
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < head_dim; ++d) oh[d] *= inv;
    }
  }
}

void GqaAttention::Impl::RunDecode(int layer, absl::Span<const SeqKv> seqs,
                                   const float* q, float* out, bool fused) {
  const int n_threads = omp_get_max_threads();
  PrepareDecode(seqs, n_threads, fused);
#pragma omp parallel num_threads(n_threads)
  {
    const Team team{omp_get_thread_num(), omp_get_num_threads(), nullptr};
    DecodeWork(layer, seqs, q, fused, team.tid);
#pragma omp barrier
    CombineRuns(seqs, out, team);
  }
}

void GqaAttention::Impl::DecodeRows(int layer, const SeqKv& seq, int64_t n_ctx,
                                    int group, const float* q, float* out,
                                    float* scratch) const {
  const int64_t group_floats = int64_t{kv_mul} * head_dim;
  float* qs = scratch;
  float* state = qs + group_floats;  // m, l, acc
  for (int64_t i = 0; i < group_floats; ++i) qs[i] = q[i] * q_scale;
  const int64_t group_offset = group * GroupBytes();
  DecodeArgs args;
  args.head_dim = head_dim;
  args.kv_mul = kv_mul;
  args.block_tokens = block_tokens;
  args.q = qs;
  args.k_base =
      static_cast<const char*>(pool->KeyBlock(layer, 0)) + group_offset;
  args.v_base =
      static_cast<const char*>(pool->ValueBlock(layer, 0)) + group_offset;
  args.block_stride = BlockStride();
  const int64_t start = WindowStart(n_ctx);
  const int64_t b0 = start / block_tokens;
  const int64_t end = (n_ctx + block_tokens - 1) / block_tokens;
  args.blocks = seq.blocks.data() + b0;
  args.n_blocks = static_cast<int>(end - b0);
  args.last_block_tokens =
      static_cast<int>(n_ctx - (end - 1) * int64_t{block_tokens});
  args.first_block_skip = static_cast<int>(start - b0 * block_tokens);
  args.scratch = state + kv_mul * (2 + head_dim);
  PartialState st{state, state + kv_mul, state + 2 * kv_mul};
  kernel(args, st);
  for (int h = 0; h < kv_mul; ++h) {
    const float inv = 1.0f / st.l[h];
    for (int d = 0; d < head_dim; ++d) {
      out[h * head_dim + d] = st.acc[h * head_dim + d] * inv;
    }
  }
}

void GqaAttention::Impl::LlamaDecode(int layer, absl::Span<const SeqKv> seqs,
                                     const float* q, float* out,
                                     const Team& team) const {
  const int64_t row = int64_t{n_heads} * head_dim;
  const int64_t group_floats = int64_t{kv_mul} * head_dim;
  const int64_t n_pairs = static_cast<int64_t>(seqs.size()) * n_kv_heads;
  int64_t begin = 0, end = 0;
  team.Share(n_pairs, 1, &begin, &end);
  thread_local std::vector<float> scratch;
  for (int64_t pair = begin; pair < end; ++pair) {
    const SeqKv& s = seqs[pair / n_kv_heads];
    attention_internal::LlamaOrderArgs a;
    a.pool = pool;
    a.layer = layer;
    a.blocks = s.blocks.data();
    a.group = static_cast<int>(pair % n_kv_heads);
    a.kv_mul = kv_mul;
    a.start = WindowStart(s.n_ctx);
    a.n_ctx = s.n_ctx;
    a.prompt = false;
    const int64_t off = (pair / n_kv_heads) * row + a.group * group_floats;
    attention_internal::LlamaOrderRows(a, q + off, out + off, &scratch);
  }
}

absl::StatusOr<std::unique_ptr<GqaAttention>> GqaAttention::Create(
    const BlockPool* pool, const GqaAttentionOptions& options) {
  const BlockPoolOptions& po = pool->options();
  if (options.n_heads <= 0 || options.n_heads % po.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GqaAttention: n_heads %d is not a positive multiple of n_kv_heads %d",
        options.n_heads, po.n_kv_heads));
  }
  if (options.sliding_window < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GqaAttention: sliding_window %d is negative", options.sliding_window));
  }
  if (po.dtype != DType::kF32 &&
      (options.decode_path == AttentionPath::kLlamaOrder ||
       options.prefill_path == AttentionPath::kLlamaOrder)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GqaAttention: llama.cpp's float order needs an f32 KV cache, not %s",
        DTypeName(po.dtype)));
  }
  if (IsBlockQuantized(po.dtype) &&
      options.decode_path == AttentionPath::kOneDnn) {
    return absl::UnimplementedError(absl::StrFormat(
        "GqaAttention: oneDNN's matmuls cannot read a %s KV cache's blocks; "
        "the fused path serves it",
        DTypeName(po.dtype)));
  }
  if (po.dtype == DType::kBF16 &&
      options.decode_path == AttentionPath::kOneDnn && !DnnlHasBf16Matmul()) {
    return absl::UnimplementedError(absl::StrFormat(
        "GqaAttention: the oneDNN decode path over a bf16 KV cache needs bf16 "
        "matmuls, which oneDNN has no kernel for at ISA %s (CPU level %s); "
        "the fused path serves it",
        DnnlIsaName(), IsaLevelName(EffectiveIsa())));
  }
  auto impl = std::make_unique<Impl>();
  impl->pool = pool;
  impl->n_heads = options.n_heads;
  impl->n_kv_heads = po.n_kv_heads;
  impl->head_dim = po.head_dim;
  impl->kv_mul = options.n_heads / po.n_kv_heads;
  impl->block_tokens = po.block_tokens;
  impl->sliding_window = options.sliding_window;
  impl->dtype = po.dtype;
  impl->decode_path = options.decode_path;
  impl->prefill_path = options.prefill_path;
  impl->llama_decode = options.decode_path == AttentionPath::kLlamaOrder;
  impl->llama_prefill = options.prefill_path == AttentionPath::kLlamaOrder;
  impl->q_scale = static_cast<float>(std::numbers::log2e /
                                     std::sqrt(double{1.0} * po.head_dim));
  impl->kernel = attention_internal::SelectDecodeKernel(
      attention_internal::BestIsa(), po.dtype, po.head_dim);
  impl->onednn = std::make_unique<attention_internal::OneDnnAttention>(
      pool, options.n_heads, options.sliding_window);
  return std::unique_ptr<GqaAttention>(new GqaAttention(std::move(impl)));
}

GqaAttention::GqaAttention(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
GqaAttention::~GqaAttention() = default;

void GqaAttention::GqaDecode(int layer, absl::Span<const SeqKv> seqs,
                             const float* q, float* out) {
  if (seqs.empty()) return;
  if (impl_->llama_decode) {
#pragma omp parallel
    {
      const Team team{omp_get_thread_num(), omp_get_num_threads(), nullptr};
      impl_->LlamaDecode(layer, seqs, q, out, team);
    }
    return;
  }
  impl_->RunDecode(layer, seqs, q, out,
                   impl_->decode_path != AttentionPath::kOneDnn);
}

bool GqaAttention::DecodeRunsInTeam() const {
  return impl_->decode_path != AttentionPath::kOneDnn;
}

void GqaAttention::GqaDecodeInTeam(int layer, absl::Span<const SeqKv> seqs,
                                   const float* q, float* out,
                                   const Team& team) {
  Impl& im = *impl_;
  if (seqs.empty()) return;
  if (im.llama_decode) {
    im.LlamaDecode(layer, seqs, q, out, team);
    return;
  }
  if (team.leader()) im.PrepareDecode(seqs, team.size, /*fused=*/true);
  team.Sync();
  im.DecodeWork(layer, seqs, q, /*fused=*/true, team.tid);
  team.Sync();
  im.CombineRuns(seqs, out, team);
}

void GqaAttention::GqaPrefill(int layer, const SeqKv& seq, int64_t start_pos,
                              int64_t n_new, const float* q, float* out) {
  Impl& im = *impl_;
  KVSERVE_CHECK(start_pos >= 0 && seq.n_ctx >= start_pos + n_new);
  if (n_new <= 0) return;
  if (im.llama_prefill) {
    const int64_t row = int64_t{im.n_heads} * im.head_dim;
    const int64_t group_floats = int64_t{im.kv_mul} * im.head_dim;
    const int64_t n_items = n_new * im.n_kv_heads;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; ++it) {
      thread_local std::vector<float> scratch;
      const int64_t i = it / im.n_kv_heads;
      attention_internal::LlamaOrderArgs a;
      a.pool = im.pool;
      a.layer = layer;
      a.blocks = seq.blocks.data();
      a.group = static_cast<int>(it % im.n_kv_heads);
      a.kv_mul = im.kv_mul;
      a.n_ctx = start_pos + i + 1;
      a.start = im.WindowStart(a.n_ctx);
      // One query alone is ggml's vec_dot (decode) case.
      a.prompt = n_new >= 2;
      const int64_t off = i * row + a.group * group_floats;
      attention_internal::LlamaOrderRows(a, q + off, out + off, &scratch);
    }
    return;
  }
  const bool onednn =
      im.prefill_path == AttentionPath::kOneDnn ||
      (im.prefill_path == AttentionPath::kAuto && n_new >= kMinOneDnnPrefill);
  if (onednn) {
    im.onednn->Prefill(layer, seq, start_pos, n_new, q, out);
    return;
  }
  const int64_t scratch_floats = attention_internal::DecodeScratchFloats(
                                     im.head_dim, im.kv_mul, im.block_tokens) +
                                 int64_t{im.kv_mul} * (3 + 2 * im.head_dim);
  const int64_t n_items = n_new * im.n_kv_heads;
  const int64_t row = int64_t{im.n_heads} * im.head_dim;
  const int64_t group_floats = int64_t{im.kv_mul} * im.head_dim;
#pragma omp parallel
  {
    std::vector<float> scratch(scratch_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; ++it) {
      const int64_t i = it / im.n_kv_heads;
      const int g = static_cast<int>(it % im.n_kv_heads);
      im.DecodeRows(layer, seq, start_pos + i + 1, g,
                    q + i * row + g * group_floats,
                    out + i * row + g * group_floats, scratch.data());
    }
  }
}

}  // namespace kvserve
