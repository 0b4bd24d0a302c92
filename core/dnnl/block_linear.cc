// The block-format implementation of Linear: weights stay in their GGUF
// bytes (F16, BF16, Q8_0, Q4_K, ... and mixes of them).
//
// Few rows (decode, and for most quantized types every row count:
// DefaultGemvMaxRows): the activations are quantized once per call into each
// weight type's activation format (for F16 and BF16 weights: f32 rounded
// through that type, as ggml computes them), and one OpenMP region runs the
// matrix-vector kernels of core/quant over the rows of all the stacked
// matrices, split evenly across threads. Many rows (prefill, for the types
// whose kernels lose to an sgemm there): panels of
// weight rows are dequantized into an f32 buffer and multiplied by a oneDNN
// sgemm (x rounded the same way for F16 and BF16 weights) whose output is
// written in place into y's columns (or into a padded copy of y:
// linear_internal::PrimitiveRows).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/dnnl/context.h"
#include "core/dnnl/linear.h"
#include "core/quant/activation.h"
#include "core/quant/quant.h"
#include "core/util/check.h"
#include "core/util/cpu_features.h"
#include "dnnl.hpp"

namespace kvserve {
namespace {

using dt = dnnl::memory::data_type;

// Up to how many rows a weight type's int8 (or float) kernels beat
// dequantized panels + oneDNN sgemm: `decode_bench --prefill_paths`, 91 M
// model, 2 threads, Zen 5 (native / AVX2 cap), speed of the kernels over
// the panels at 16, 64 and 512 rows:
//   q8_0 6.9 2.6 1.05 / 2.2 2.1 1.14    q4_0 7.7 3.3 1.19 / 3.5 1.9 1.38
//   q5_0 7.9 3.2 1.23 / 3.3 2.1 1.28    iq4_nl 7.2 3.0 1.32 / 3.1 1.8 1.26
//   q4_K 6.3 2.9 1.19 / 2.5 1.7 1.23    q5_K 6.2 2.4 1.11 / 2.9 1.6 1.15
//   q6_K 6.4 2.4 1.02 / 2.6 1.5 0.99    (the activation-lane kernels)
//   q4_1 5.4 1.8 0.65 / 2.3 1.4 0.81    q5_1 5.6 2.1 0.77 / 2.6 1.0 0.76
//   q2_K 8.9 2.7 0.93 / 3.5 1.7 1.08    q3_K 7.0 2.5 0.87 / 3.3 1.3 0.83
//   f16  3.8 1.2 0.32 / 2.5 1.1 0.46    bf16 (AVX2) - / 1.2 0.88 0.41
// (the panels dequantize every weight per call: ~90 ms for this model at
// any row count, so they only pay off where the sgemm's speed does).
int64_t DefaultGemvMaxRows(quant::Type t) {
  switch (t) {
    case quant::Type::kQ8_0:
    case quant::Type::kQ4_0:
    case quant::Type::kQ5_0:
    case quant::Type::kIQ4_NL:
    case quant::Type::kQ4_K:
    case quant::Type::kQ5_K:
    case quant::Type::kQ6_K:
      return std::numeric_limits<int64_t>::max();
    case quant::Type::kQ4_1:
    case quant::Type::kQ5_1:
    case quant::Type::kQ2_K:
    case quant::Type::kQ3_K:
      return 64;
    case quant::Type::kF16:
    case quant::Type::kBF16:
      return 32;
    default:
      return 8;  // f32 beside block types (oneDNN's own path otherwise)
  }
}
// Activation rows per kernel call: bounds the lane kernels' packed copy of
// the activations (4 bytes per int8) whatever the batch; the weights are
// read once per chunk.
constexpr int kGemvChunkRows = 64;
// Dequantized panels hold at most this many bytes of f32 weights.
constexpr int64_t kPanelBytes = int64_t{8} << 20;

class BlockLinear final : public Linear {
 public:
  struct Part {
    WeightTensor w;
    int64_t row0 = 0;  // first output column
    const quant::TypeInfo* info = nullptr;
    quant::GemvFn gemv = nullptr;
    int act = 0;  // index into acts_
    // Set for q4_0 of a multiple of 8 rows: the copy repacked 8 rows
    // interleaved (quant::RepackQ4_0x8) that w.data points to.
    std::shared_ptr<void> repacked;
  };
  struct Act {
    quant::Type type;
    // f32 activations only: the type x is rounded through first (kF16 for
    // F16 weights, kBF16 for BF16: quant::RoundActivation), or kF32.
    quant::Type round = quant::Type::kF32;
    int64_t row_bytes = 0;
    std::vector<uint8_t> buf;  // [m][row_bytes], unused for plain f32
  };

  BlockLinear(int64_t n, int64_t k, std::vector<Part> parts,
              std::vector<Act> acts, int64_t gemv_max_rows, int lane_min_rows)
      : Linear(n, k),
        parts_(std::move(parts)),
        acts_(std::move(acts)),
        gemv_max_rows_(gemv_max_rows),
        lane_min_rows_(lane_min_rows) {
    panel_rows_ = std::max<int64_t>(16, kPanelBytes / (4 * k_));
  }

  absl::Status Forward(const float* x, int64_t m, float* y) override {
    if (m <= gemv_max_rows_) {
      Gemv(x, m, y);
      return absl::OkStatus();
    }
    try {
      Panels(x, m, y);
    } catch (const dnnl::error& e) {
      return absl::InternalError(
          absl::StrFormat("Linear %s with %d rows: oneDNN failed: %s",
                          Describe(), m, e.what()));
    }
    return absl::OkStatus();
  }

  std::string Describe() const override {
    std::string types;
    for (const Part& p : parts_) {
      if (types.find(p.info->name) != std::string::npos) continue;
      if (!types.empty()) types += '+';
      types += p.info->name;
    }
    return absl::StrFormat("blocks %s [%d x %d]", types, n_, k_);
  }

  // The sgemm primitive for (rows, columns), rows a PrimitiveRows value;
  // throws dnnl::error.
  dnnl::matmul& Sgemm(int64_t rows, int64_t nc) {
    auto it = sgemm_.find({rows, nc});
    if (it != sgemm_.end()) return it->second;
    const dnnl::memory::desc src({rows, k_}, dt::f32, {k_, 1});
    const dnnl::memory::desc wei({k_, nc}, dt::f32, {1, k_});
    const dnnl::memory::desc dst({rows, nc}, dt::f32, {n_, 1});
    dnnl::matmul mm(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(src, wei, dst), DnnlEngine()));
    return sgemm_.emplace(std::make_pair(rows, nc), std::move(mm))
        .first->second;
  }

  int64_t panel_rows() const { return panel_rows_; }

 private:
  bool RunsInTeam(int64_t m) const override { return m <= gemv_max_rows_; }

  void ForwardInTeam(const float* x, int64_t m, float* y,
                     const Team& team) override {
    // Every member quantizes the activations into its own buffers (a few
    // microseconds), so no barrier separates that from the products.
    std::vector<std::vector<uint8_t>>& bufs = MemberBuffers(team.tid);
    const void* acts[kMaxActs];
    for (size_t i = 0; i < acts_.size(); ++i) {
      acts[i] = Quantize(acts_[i], x, m, bufs[i]);
    }
    Products(m, y, acts, team);
  }

  // f32 (as is, through f16, through bf16), q8_0, q8_1, q8_K.
  static constexpr size_t kMaxActs = 6;
  static constexpr int kMaxMembers = 256;

  std::vector<std::vector<uint8_t>>& MemberBuffers(int tid) {
    KVSERVE_CHECK(tid < kMaxMembers);
    std::vector<std::vector<uint8_t>>& b = member_acts_[tid];
    if (b.size() < acts_.size()) b.resize(acts_.size());
    return b;
  }

  // x's m rows in `a`'s format (x itself for plain f32).
  const void* Quantize(const Act& a, const float* x, int64_t m,
                       std::vector<uint8_t>& buf) const {
    if (a.type == quant::Type::kF32 && a.round == quant::Type::kF32) return x;
    if (static_cast<int64_t>(buf.size()) < m * a.row_bytes) {
      buf.resize(m * a.row_bytes);
    }
    if (a.type == quant::Type::kF32) {
      float* out = reinterpret_cast<float*>(buf.data());
      quant::RoundActivation(a.round, x, m * k_, out);
      return out;
    }
    for (int64_t r = 0; r < m; ++r) {
      quant::QuantizeActivation(a.type, x + r * k_, k_,
                                buf.data() + r * a.row_bytes);
    }
    return buf.data();
  }

  // This member's rows of every stacked matrix: an even split of all n
  // rows, in multiples of 8; the activations in chunks of kGemvChunkRows.
  void Products(int64_t m, float* y, const void* const* acts,
                const Team& team) const {
    int64_t lo = 0, hi = 0;
    team.Share(n_, 8, &lo, &hi);  // whole q4_0x8 groups
    for (int64_t r0 = 0; r0 < m;) {
      // No 1-row chunk of a longer call: ggml sums iq4_nl's one-row
      // products in another order (quant_legacy_simd.h).
      int64_t rows = std::min<int64_t>(kGemvChunkRows, m - r0);
      if (m - r0 - rows == 1) --rows;
      for (const Part& p : parts_) {
        const int64_t b = std::max(lo, p.row0) - p.row0;
        const int64_t e = std::min(hi, p.row0 + p.w.rows) - p.row0;
        if (b >= e) continue;
        quant::GemvArgs args;
        args.k = k_;
        args.w = p.w.data;
        args.w_row_bytes = p.w.row_bytes();
        args.row_begin = b;
        args.row_end = e;
        args.x_row_bytes = acts_[p.act].row_bytes;
        args.x =
            static_cast<const uint8_t*>(acts[p.act]) + r0 * args.x_row_bytes;
        args.m = static_cast<int>(rows);
        args.y = y + r0 * n_ + p.row0;
        args.ldy = n_;
        args.w_rows = p.w.rows;
        args.lane_min_rows = lane_min_rows_;
        p.gemv(args);
      }
      r0 += rows;
    }
  }

  void Gemv(const float* x, int64_t m, float* y) {
    const void* acts[kMaxActs];
    for (size_t i = 0; i < acts_.size(); ++i) {
      acts[i] = Quantize(acts_[i], x, m, acts_[i].buf);
    }
#pragma omp parallel
    {
      const Team team{omp_get_thread_num(), omp_get_num_threads(), nullptr};
      Products(m, y, acts, team);
    }
  }

  void Panels(const float* x, int64_t m, float* y) {
    // One set of buffers for every BlockLinear of the thread (the
    // engine's): the model's matrices run one after another.
    thread_local std::vector<float> panel_buffer, padded_x, padded_y;
    const int64_t floats = std::min(panel_rows_, n_) * k_;
    if (static_cast<int64_t>(panel_buffer.size()) < floats) {
      panel_buffer.resize(floats);
    }
    // The sgemms run on a bounded set of row counts (PrimitiveRows): x's
    // rows, then zeros, in; y's rows out.
    const int64_t rows = linear_internal::PrimitiveRows(m);
    const float* in = linear_internal::PaddedInput(x, m, rows, k_, &padded_x);
    float* out = linear_internal::PaddedOutput(y, m, rows, n_, &padded_y);
    // Each part's input: `in`, or `in` rounded through its weights' type.
    thread_local std::vector<float> rounded[kMaxActs];
    const float* inputs[kMaxActs];
    for (size_t i = 0; i < acts_.size(); ++i) {
      inputs[i] = in;
      if (acts_[i].type == quant::Type::kF32 &&
          acts_[i].round != quant::Type::kF32) {
        if (static_cast<int64_t>(rounded[i].size()) < rows * k_) {
          rounded[i].resize(rows * k_);
        }
        quant::RoundActivation(acts_[i].round, in, rows * k_,
                               rounded[i].data());
        inputs[i] = rounded[i].data();
      }
    }
    dnnl::stream& stream = DnnlStream();
    const dnnl::engine& engine = DnnlEngine();
    for (const Part& p : parts_) {
      for (int64_t c0 = 0; c0 < p.w.rows; c0 += panel_rows_) {
        const int64_t nc = std::min(panel_rows_, p.w.rows - c0);
        float* panel = panel_buffer.data();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < nc; ++r) {
          if (p.repacked != nullptr) {
            quant::DequantizeQ4_0x8Row(p.w.data, k_, c0 + r, panel + r * k_);
          } else {
            p.info->dequantize(p.w.row(c0 + r), panel + r * k_, k_);
          }
        }
        dnnl::matmul& mm = Sgemm(rows, nc);
        const dnnl::memory::desc src({rows, k_}, dt::f32, {k_, 1});
        const dnnl::memory::desc wei({k_, nc}, dt::f32, {1, k_});
        const dnnl::memory::desc dst({rows, nc}, dt::f32, {n_, 1});
        mm.execute(
            stream,
            {{DNNL_ARG_SRC,
              dnnl::memory(src, engine, const_cast<float*>(inputs[p.act]))},
             {DNNL_ARG_WEIGHTS, dnnl::memory(wei, engine, panel)},
             {DNNL_ARG_DST, dnnl::memory(dst, engine, out + p.row0 + c0)}});
        stream.wait();
      }
    }
    if (out != y) std::copy(out, out + m * n_, y);
  }

  std::vector<Part> parts_;
  std::vector<Act> acts_;
  // Per team member (by tid): its quantized activations, one per acts_;
  // each member touches only its own slot.
  std::vector<std::vector<std::vector<uint8_t>>> member_acts_ =
      std::vector<std::vector<std::vector<uint8_t>>>(kMaxMembers);
  const int64_t gemv_max_rows_;
  const int lane_min_rows_;  // GemvArgs::lane_min_rows
  int64_t panel_rows_ = 0;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, dnnl::matmul> sgemm_;
};

}  // namespace

namespace linear_internal {

absl::StatusOr<std::unique_ptr<Linear>> CreateBlockLinear(
    absl::Span<const WeightTensor> weights, const LinearOptions& options) {
  const int64_t k = weights[0].cols;
  std::vector<BlockLinear::Part> parts;
  std::vector<BlockLinear::Act> acts;
  int64_t n = 0;
  for (const WeightTensor& w : weights) {
    BlockLinear::Part p;
    p.w = w;
    p.row0 = n;
    p.info = quant::Info(w.type);
    if (p.info == nullptr || !quant::IsWeightType(w.type) ||
        k % p.info->block_elems != 0) {
      return absl::UnimplementedError(absl::StrFormat(
          "Linear: a [%d x %d] matrix of ggml type %d cannot be computed",
          w.rows, w.cols, static_cast<int>(w.type)));
    }
    p.gemv = quant::SelectGemv(w.type, Cpu());
    if (w.type == quant::Type::kQ4_0 && w.rows % 8 == 0) {
      p.repacked = WeightBuffer(w.bytes());
      if (p.repacked == nullptr) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "Linear: no memory for a repacked copy of a [%d x %d] q4_0 "
            "matrix (%d bytes)",
            w.rows, w.cols, w.bytes()));
      }
      quant::RepackQ4_0x8(w.data, w.rows, w.cols, p.repacked.get());
      ReleasePages(w.data, w.bytes());
      p.w.data = p.repacked.get();
      p.gemv = quant::SelectGemvQ4_0x8(Cpu());
    }
    // F16 and BF16 weights multiply x rounded to their own type, as ggml's
    // CPU backend computes them (and oneDNN's bf16 matmul, DnnlLinear).
    const quant::Type act = p.info->act_type;
    const quant::Type round =
        w.type == quant::Type::kF16 || w.type == quant::Type::kBF16
            ? w.type
            : quant::Type::kF32;
    auto found = std::find_if(acts.begin(), acts.end(), [&](const auto& a) {
      return a.type == act && a.round == round;
    });
    p.act = found - acts.begin();
    if (found == acts.end()) {
      acts.push_back({act, round, quant::RowBytes(act, k), {}});
    }
    parts.push_back(p);
    n += w.rows;
  }
  int64_t gemv_max_rows = options.gemv_max_rows;
  if (gemv_max_rows < 0) {
    gemv_max_rows = std::numeric_limits<int64_t>::max();
    for (const WeightTensor& w : weights) {
      // llama_order: the block formats' kernels at every row count (the
      // float formats' kernels are not in ggml's order anyway).
      const bool block = quant::Info(w.type)->act_type != quant::Type::kF32;
      if (options.llama_order && block) continue;
      gemv_max_rows = std::min(gemv_max_rows, DefaultGemvMaxRows(w.type));
    }
  }
  auto linear = std::make_unique<BlockLinear>(
      n, k, std::move(parts), std::move(acts), gemv_max_rows,
      options.llama_order ? std::numeric_limits<int>::max()
                          : quant::GemvArgs().lane_min_rows);
  // Probe the sgemm shapes the largest call will use.
  if (options.max_rows > gemv_max_rows) {
    try {
      linear->Sgemm(PrimitiveRows(options.max_rows),
                    std::min<int64_t>(linear->panel_rows(), weights[0].rows));
    } catch (const dnnl::error& e) {
      return absl::UnimplementedError(absl::StrFormat(
          "Linear %s: oneDNN has no f32 matmul with %d rows at ISA %s: %s",
          linear->Describe(), options.max_rows, DnnlIsaName(), e.what()));
    }
  }
  return linear;
}

}  // namespace linear_internal
}  // namespace kvserve
