#include "core/dnnl/context.h"

namespace kvserve {

const dnnl::engine& DnnlEngine() {
  static const dnnl::engine* engine =
      new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

}  // namespace kvserve
