// The two type families behind quant.h, each in its own file. Internal to
// core/quant.
#ifndef KVSERVE_CORE_QUANT_QUANT_INTERNAL_H_
#define KVSERVE_CORE_QUANT_QUANT_INTERNAL_H_

#include <string_view>

#include "core/quant/quant.h"

namespace kvserve::quant::internal {

// quant_legacy.cc: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// IQ4_NL. nullptr for a type of the other family.
const TypeInfo* LegacyInfo(Type t);
// The best kernel for `t` on `cpu`, and its name in *name; nullptr when
// `t` is not a weight type of this family.
GemvFn LegacyGemv(Type t, const CpuFeatures& cpu, std::string_view* name);
// The kernel for q4_0x8 weights (quant::SelectGemvQ4_0x8), and its name.
GemvFn LegacyGemvQ4_0x8(const CpuFeatures& cpu, std::string_view* name);

// quant_kquants.cc: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
const TypeInfo* KQuantInfo(Type t);
GemvFn KQuantGemv(Type t, const CpuFeatures& cpu, std::string_view* name);

}  // namespace kvserve::quant::internal

#endif  // KVSERVE_CORE_QUANT_QUANT_INTERNAL_H_
