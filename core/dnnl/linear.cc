#include "core/dnnl/linear.h"

#include <cstring>

#include "core/dnnl/context.h"

namespace kvserve {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dt DnnlType(DType t) { return t == DType::kF32 ? dt::f32 : dt::bf16; }

}  // namespace

uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void ConvertF32ToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

Linear::Linear(const WeightTensor& weight) : weight_(weight) {
  // W [n][k] row-major is the matmul's weights [k][n] with strides {1, k}.
  dnnl::memory::desc md({weight_.cols, weight_.rows}, DnnlType(weight_.dtype),
                        tag::ba);
  weight_mem_ = dnnl::memory(md, DnnlEngine(), const_cast<void*>(weight_.data));
}

Linear::Cached& Linear::PrimitiveFor(int64_t m) {
  auto it = cache_.find(m);
  if (it != cache_.end()) return it->second;
  dnnl::memory::desc src_md({m, weight_.cols}, DnnlType(weight_.dtype),
                            tag::ab);
  dnnl::memory::desc dst_md({m, weight_.rows}, dt::f32, tag::ab);
  dnnl::matmul::desc desc(src_md, weight_mem_.get_desc(), dst_md);
  dnnl::matmul::primitive_desc pd(desc, DnnlEngine());
  return cache_.emplace(m, Cached{dnnl::matmul(pd), src_md, dst_md})
      .first->second;
}

void Linear::Forward(const float* x, int64_t m, float* y) {
  Cached& c = PrimitiveFor(m);
  const void* src = x;
  if (weight_.dtype == DType::kBF16) {
    const int64_t n = m * weight_.cols;
    if (static_cast<int64_t>(x_bf16_.size()) < n) x_bf16_.resize(n);
    ConvertF32ToBf16(x, n, x_bf16_.data());
    src = x_bf16_.data();
  }
  dnnl::memory src_mem(c.src_md, DnnlEngine(), const_cast<void*>(src));
  dnnl::memory dst_mem(c.dst_md, DnnlEngine(), y);
  dnnl::stream& stream = DnnlStream();
  c.primitive.execute(stream, {{DNNL_ARG_SRC, src_mem},
                               {DNNL_ARG_WEIGHTS, weight_mem_},
                               {DNNL_ARG_DST, dst_mem}});
  stream.wait();
}

}  // namespace kvserve
