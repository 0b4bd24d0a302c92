#include "core/dnnl/context.h"

#include "core/util/cpu_features.h"

namespace kvserve {
namespace {

dnnl::cpu_isa DnnlIsaFor(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return dnnl::cpu_isa::sse41;
    case IsaLevel::kAvx2:
      return dnnl::cpu_isa::avx2_vnni;  // VNNI only where the CPU has it
    case IsaLevel::kAvx512:
      return dnnl::cpu_isa::avx512_core_vnni;
    case IsaLevel::kAvx512Bf16:
      return dnnl::cpu_isa::avx512_core_bf16;
    case IsaLevel::kNative:
      break;
  }
  return dnnl::cpu_isa::all;
}

}  // namespace

const dnnl::engine& DnnlEngine() {
  static const dnnl::engine* engine = [] {
    // Must precede the first primitive; fails harmlessly (keeps the
    // environment's ONEDNN_MAX_CPU_ISA) if oneDNN already dispatched.
    dnnl::set_max_cpu_isa(DnnlIsaFor(IsaCap()));
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

bool DnnlHasBf16Matmul() {
  static const bool has = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      const dnnl::memory::desc src({1, 64}, dt::bf16, tag::ab);
      const dnnl::memory::desc wei({64, 64}, dt::bf16, tag::any);
      const dnnl::memory::desc dst({1, 64}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst),
                                   DnnlEngine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

std::string DnnlIsaName() {
  DnnlEngine();  // the cap first
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace kvserve
