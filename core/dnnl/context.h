// The process's oneDNN CPU engine and a stream for the calling thread.
// oneDNN on Debian runs on OpenMP: the thread count is the calling thread's
// omp_get_max_threads().
#ifndef KVSERVE_CORE_DNNL_CONTEXT_H_
#define KVSERVE_CORE_DNNL_CONTEXT_H_

#include "dnnl.hpp"

namespace kvserve {

// Created once, shared by every primitive.
const dnnl::engine& DnnlEngine();
// One in-order stream per thread.
dnnl::stream& DnnlStream();

}  // namespace kvserve

#endif  // KVSERVE_CORE_DNNL_CONTEXT_H_
