// The tensor types of a model file, as the model maker and the quantizer
// choose them: one type for every matrix ("q8_0", "q4_K", ...) or one of
// llama.cpp's mixes ("q4_k_m", "q5_k_m": Q6_K for output.weight and for
// attn_v and ffn_down of the layers that get more bits, the base type
// elsewhere). A matrix whose rows are not whole blocks of its type falls
// back as llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K and
// Q3_K -> IQ4_NL), and to F16 when even that does not fit. Norms stay F32.
#ifndef KVSERVE_CORE_MODEL_TYPE_MIX_H_
#define KVSERVE_CORE_MODEL_TYPE_MIX_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"

namespace kvserve {

struct TypeMix {
  GgmlType base = GgmlType::kF32;
  GgmlType more_bits = GgmlType::kF32;  // == base for a single type
  uint32_t file_type = 0;               // general.file_type (llama_ftype)

  // The type of the matrix `name` (llama.cpp's tensor names) with rows of
  // `cols` elements in a model of n_layers layers.
  GgmlType TypeFor(const std::string& name, int n_layers, int64_t cols) const;
};

// "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
// "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl" (any case), "q4_k_m", "q5_k_m".
absl::StatusOr<TypeMix> ParseTypeMix(std::string_view name);
// The names ParseTypeMix accepts, for help texts.
std::string TypeMixNames();

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_TYPE_MIX_H_
