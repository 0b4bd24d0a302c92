// The oneDNN implementation of Linear (f32, or bf16 where oneDNN has bf16
// matmuls).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/dnnl/context.h"
#include "core/dnnl/linear.h"
#include "core/util/bf16.h"
#include "core/util/cpu_features.h"
#include "core/util/dtype.h"
#include "dnnl.hpp"

namespace kvserve {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dt DnnlType(DType t) { return t == DType::kF32 ? dt::f32 : dt::bf16; }

dnnl::matmul::primitive_desc MatmulDesc(int64_t m, int64_t k, int64_t n,
                                        DType dtype,
                                        const dnnl::memory::desc& weights) {
  const dnnl::memory::desc src({m, k}, DnnlType(dtype), tag::ab);
  const dnnl::memory::desc dst({m, n}, dt::f32, tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst),
                                      DnnlEngine());
}

// Memory for weights in `layout` (linear_internal::WeightBuffer for 2 MiB
// or more, oneDNN's own below); `owned` keeps the buffer alive.
dnnl::memory WeightMemory(const dnnl::memory::desc& layout,
                          std::shared_ptr<void>* owned) {
  const size_t bytes = layout.get_size();
  if (bytes < linear_internal::kHugePageBytes) {
    return dnnl::memory(layout, DnnlEngine());
  }
  *owned = linear_internal::WeightBuffer(bytes);
  if (*owned == nullptr) return dnnl::memory(layout, DnnlEngine());
  return dnnl::memory(layout, DnnlEngine(), owned->get());
}

dnnl::memory Reordered(dnnl::memory from, const dnnl::memory::desc& layout,
                       std::shared_ptr<void>* owned) {
  dnnl::memory to = WeightMemory(layout, owned);
  dnnl::stream& stream = DnnlStream();
  dnnl::reorder(from, to).execute(stream, from, to);
  stream.wait();
  return to;
}

// The weights reordered once into oneDNN's preferred layout; a primitive
// per row count (linear_internal::PrimitiveRows(m): a bounded set), created
// on first use and cached: fixed-m primitives beat one runtime-m primitive
// (which oneDNN 2.6 runs with its plain-layout gemm) by 1.4x at m = 1. A
// call whose m is not a primitive's row count runs through padded
// thread-local buffers. bf16 weights run bf16 x bf16 -> f32
// (x is converted to bf16 first, since oneDNN 2.6 has no f32 x bf16 matmul
// on CPU).
class DnnlLinear final : public Linear {
 public:
  DnnlLinear(int64_t n, int64_t k, DType dtype) : Linear(n, k), dtype_(dtype) {}

  // Both may throw dnnl::error; CreateDnnlLinear and Forward catch it.
  void Init(absl::Span<const WeightTensor> weights);
  struct Cached {
    dnnl::matmul primitive;
    dnnl::memory::desc src_md, dst_md;
    // The weights in the layout this primitive was created for.
    dnnl::memory weights;
  };
  // The primitive of `rows` rows (a PrimitiveRows value).
  Cached& PrimitiveFor(int64_t rows);

  absl::Status Forward(const float* x, int64_t m, float* y) override;
  std::string Describe() const override {
    return absl::StrFormat("onednn %s [%d x %d]", DTypeName(dtype_), n_, k_);
  }

 private:
  const DType dtype_;
  // The weights, in the layout oneDNN chose for m = 1 (plain "ba" when it
  // wants no other); its buffer is owned by this memory object.
  dnnl::memory weights_;
  std::shared_ptr<void> weights_buffer_;  // weights_'s bytes, when ours
  absl::flat_hash_map<int64_t, Cached> cache_;
  // The weights in other layouts, made on demand for a row count whose
  // primitive refuses weights_'s (none on AVX-512 CPUs).
  std::vector<dnnl::memory> other_layouts_;
  std::vector<std::shared_ptr<void>> other_buffers_;
  std::vector<uint16_t> x_bf16_;  // scratch for bf16 weights
};

void DnnlLinear::Init(absl::Span<const WeightTensor> weights) {
  // W [n][k] row-major is the matmul's weights [k][n] with strides {1, k};
  // several tensors are stacked along n into a temporary first.
  std::vector<uint8_t> stacked;
  const void* source = weights[0].data;
  if (weights.size() > 1) {
    stacked.resize(n_ * k_ * DTypeSize(dtype_));
    uint8_t* out = stacked.data();
    for (const WeightTensor& w : weights) {
      std::memcpy(out, w.data, w.bytes());
      out += w.bytes();
    }
    source = stacked.data();
  }
  const dnnl::memory::desc plain({k_, n_}, DnnlType(dtype_), tag::ba);
  dnnl::memory plain_mem(plain, DnnlEngine(), const_cast<void*>(source));

  // The layout oneDNN wants for m = 1 (decode, where the weights' read time
  // is the step time).
  dnnl::memory::desc wanted = plain;
  try {
    const dnnl::memory::desc any({k_, n_}, DnnlType(dtype_), tag::any);
    wanted = MatmulDesc(1, k_, n_, dtype_, any).weights_desc();
  } catch (const dnnl::error&) {
    // No implementation takes a free layout: keep the plain one.
  }
  if (wanted == plain && stacked.empty()) {
    weights_ = plain_mem;
    return;
  }
  weights_ = Reordered(plain_mem, wanted, &weights_buffer_);
  for (const WeightTensor& w : weights) {
    linear_internal::ReleasePages(w.data, w.bytes());
  }
}

DnnlLinear::Cached& DnnlLinear::PrimitiveFor(int64_t rows) {
  auto it = cache_.find(rows);
  if (it != cache_.end()) return it->second;
  dnnl::matmul::primitive_desc pd;
  dnnl::memory weights = weights_;
  try {
    pd = MatmulDesc(rows, k_, n_, dtype_, weights_.get_desc());
  } catch (const dnnl::error&) {
    // This row count wants another layout: keep one copy per such layout.
    const dnnl::memory::desc any({k_, n_}, DnnlType(dtype_), tag::any);
    pd = MatmulDesc(rows, k_, n_, dtype_, any);
    const dnnl::memory::desc layout = pd.weights_desc();
    auto found = std::find_if(
        other_layouts_.begin(), other_layouts_.end(),
        [&](const dnnl::memory& w) { return w.get_desc() == layout; });
    if (found != other_layouts_.end()) {
      weights = *found;
    } else {
      std::shared_ptr<void> buffer;
      weights = Reordered(weights_, layout, &buffer);
      other_layouts_.push_back(weights);
      other_buffers_.push_back(std::move(buffer));
    }
  }
  return cache_
      .emplace(rows, Cached{dnnl::matmul(pd), pd.src_desc(), pd.dst_desc(),
                            std::move(weights)})
      .first->second;
}

absl::Status DnnlLinear::Forward(const float* x, int64_t m, float* y) try {
  const int64_t rows = linear_internal::PrimitiveRows(m);
  Cached& c = PrimitiveFor(rows);
  // rows > m: x's rows and then zeros in, y's rows out of these (one pair
  // for every DnnlLinear of the thread: the model's run one at a time).
  thread_local std::vector<float> padded_x, padded_y;
  const void* src = x;
  float* const dst = linear_internal::PaddedOutput(y, m, rows, n_, &padded_y);
  if (dtype_ == DType::kBF16) {
    if (static_cast<int64_t>(x_bf16_.size()) < rows * k_) {
      x_bf16_.resize(rows * k_);
    }
    ConvertFloatToBf16(x, m * k_, x_bf16_.data());
    std::fill(x_bf16_.begin() + m * k_, x_bf16_.begin() + rows * k_, 0);
    src = x_bf16_.data();
  } else {
    src = linear_internal::PaddedInput(x, m, rows, k_, &padded_x);
  }
  dnnl::memory src_mem(c.src_md, DnnlEngine(), const_cast<void*>(src));
  dnnl::memory dst_mem(c.dst_md, DnnlEngine(), dst);
  dnnl::stream& stream = DnnlStream();
  c.primitive.execute(stream, {{DNNL_ARG_SRC, src_mem},
                               {DNNL_ARG_WEIGHTS, c.weights},
                               {DNNL_ARG_DST, dst_mem}});
  stream.wait();
  if (dst != y) std::copy(dst, dst + m * n_, y);
  return absl::OkStatus();
} catch (const dnnl::error& e) {
  return absl::InternalError(absl::StrFormat(
      "Linear %s with %d rows: oneDNN failed: %s", Describe(), m, e.what()));
}

}  // namespace

namespace linear_internal {

absl::StatusOr<std::unique_ptr<Linear>> CreateDnnlLinear(
    absl::Span<const WeightTensor> weights, const LinearOptions& options) {
  int64_t n = 0;
  for (const WeightTensor& w : weights) n += w.rows;
  const DType dtype =
      weights[0].type == quant::Type::kF32 ? DType::kF32 : DType::kBF16;
  auto linear = std::make_unique<DnnlLinear>(n, weights[0].cols, dtype);
  int64_t m = 0;
  try {
    linear->Init(weights);
    for (int64_t rows : {int64_t{1}, std::max<int64_t>(1, options.max_rows)}) {
      m = rows;
      linear->PrimitiveFor(PrimitiveRows(m));
    }
  } catch (const dnnl::error& e) {
    return absl::UnimplementedError(absl::StrFormat(
        "Linear %s: oneDNN has no matmul for it%s at ISA %s (CPU level %s): "
        "%s",
        linear->Describe(), m > 0 ? absl::StrFormat(" with %d rows", m) : "",
        DnnlIsaName(), IsaLevelName(EffectiveIsa()), e.what()));
  }
  return linear;
}

}  // namespace linear_internal

}  // namespace kvserve
