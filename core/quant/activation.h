// Activations quantized once per matrix call for the Gemv kernels, exactly
// as ggml's CPU backend quantizes them (so that a quantized model computes
// what llama.cpp computes on the same file): Q8_0 and Q8_1 as its x86
// path does (d = amax / 127 rounded to f16, q = x * (127 / amax) rounded
// half to even; Q8_1's s = f16(d * Σq)), Q8_K by the format's reference
// quantizer. These differ from the reference quantizers used for weights
// (quant.h TypeInfo::quantize) in rounding only.
#ifndef KVSERVE_CORE_QUANT_ACTIVATION_H_
#define KVSERVE_CORE_QUANT_ACTIVATION_H_

#include <cstdint>

#include "core/quant/quant.h"

namespace kvserve::quant {

// out: one row of `act` blocks for x[0, k). REQUIRES: act is kQ8_0, kQ8_1
// or kQ8_K and k a multiple of its block; for kF32 nothing is done.
void QuantizeActivation(Type act, const float* x, int64_t k, void* out);

// out[0, n) = x[0, n) rounded to `through` (kF16 or kBF16, to nearest,
// ties to even) and widened back: the activations F16 and BF16 weights
// multiply, as ggml's CPU backend converts them to the weights' type (and
// oneDNN's bf16 matmul reads bf16). f16 overflow gives ±inf, as there.
// out may be x.
void RoundActivation(Type through, const float* x, int64_t n, float* out);

}  // namespace kvserve::quant

#endif  // KVSERVE_CORE_QUANT_ACTIVATION_H_
