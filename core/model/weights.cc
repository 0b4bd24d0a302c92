#include "core/model/weights.h"

#include <map>

#include "absl/strings/str_format.h"
#include "core/quant/quant.h"

namespace kvserve {
namespace {

template <typename Fn>
void ForEachDistinct(const ModelWeights& w, Fn fn) {
  fn(w.token_embd);
  fn(w.output_norm);
  if (w.output.data != w.token_embd.data) fn(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const WeightTensor* t :
         {&l.attn_norm, &l.wo, &l.ffn_norm, &l.w_down, &l.bq, &l.bk, &l.bv}) {
      if (t->data != nullptr) fn(*t);
    }
    if (l.wqkv.data != nullptr) {
      fn(l.wqkv);
    } else {
      fn(l.wq);
      fn(l.wk);
      fn(l.wv);
    }
    if (l.w_gate_up.data != nullptr) {
      fn(l.w_gate_up);
    } else {
      fn(l.w_gate);
      fn(l.w_up);
    }
  }
}

}  // namespace

int64_t ModelWeights::TotalBytes() const {
  int64_t total = 0;
  ForEachDistinct(*this, [&](const WeightTensor& t) { total += t.bytes(); });
  return total;
}

std::string ModelWeights::TypeSummary() const {
  std::map<std::string, int> counts;
  ForEachDistinct(*this, [&](const WeightTensor& t) {
    const quant::TypeInfo* info = quant::Info(t.type);
    ++counts[info != nullptr ? std::string(info->name) : "?"];
  });
  std::string out;
  for (const auto& [name, n] : counts) {
    if (!out.empty()) out += ", ";
    out += absl::StrFormat("%s x %d", name, n);
  }
  return out;
}

}  // namespace kvserve
