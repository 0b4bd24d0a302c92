#include "core/model/weights.h"

namespace kvserve {

int64_t ModelWeights::TotalBytes() const {
  int64_t total = token_embd.bytes() + output_norm.bytes();
  if (output.data != token_embd.data) total += output.bytes();
  for (const LayerWeights& l : layers) {
    for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo,
                                  &l.ffn_norm, &l.w_gate, &l.w_down, &l.w_up}) {
      total += t->bytes();
    }
  }
  return total;
}

}  // namespace kvserve
