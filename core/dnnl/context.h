// The process's oneDNN CPU engine and a stream for the calling thread.
// oneDNN on Debian runs on OpenMP: the thread count is the calling thread's
// omp_get_max_threads().
//
// The engine is created after oneDNN's ISA is capped to EffectiveIsa()
// (core/util/cpu_features.h), so oneDNN's kernels and ours run at the same
// level: KVSERVE_MAX_ISA=avx2 on an AVX-512 machine runs what an AVX2-only
// machine runs.
#ifndef KVSERVE_CORE_DNNL_CONTEXT_H_
#define KVSERVE_CORE_DNNL_CONTEXT_H_

#include <string>

#include "dnnl.hpp"

namespace kvserve {

// Created once, shared by every primitive.
const dnnl::engine& DnnlEngine();
// One in-order stream per thread.
dnnl::stream& DnnlStream();

// Whether oneDNN can run bf16 x bf16 -> f32 matmuls here (oneDNN 2.6 has
// none below AVX-512). Probed once.
bool DnnlHasBf16Matmul();
// The ISA oneDNN's kernels use after the cap (e.g. "avx2", "avx512_core").
std::string DnnlIsaName();

}  // namespace kvserve

#endif  // KVSERVE_CORE_DNNL_CONTEXT_H_
