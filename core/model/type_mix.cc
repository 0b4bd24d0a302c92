#include "core/model/type_mix.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/quant/quant.h"

namespace kvserve {
namespace {

struct Named {
  const char* name;
  GgmlType base, more_bits;
  uint32_t file_type;  // llama_ftype
};

constexpr Named kMixes[] = {
    {"f32", GgmlType::kF32, GgmlType::kF32, 0},
    {"f16", GgmlType::kF16, GgmlType::kF16, 1},
    {"bf16", GgmlType::kBF16, GgmlType::kBF16, 32},
    {"q4_0", GgmlType::kQ4_0, GgmlType::kQ4_0, 2},
    {"q4_1", GgmlType::kQ4_1, GgmlType::kQ4_1, 3},
    {"q5_0", GgmlType::kQ5_0, GgmlType::kQ5_0, 8},
    {"q5_1", GgmlType::kQ5_1, GgmlType::kQ5_1, 9},
    {"q8_0", GgmlType::kQ8_0, GgmlType::kQ8_0, 7},
    {"q2_k", GgmlType::kQ2_K, GgmlType::kQ2_K, 10},
    {"q3_k", GgmlType::kQ3_K, GgmlType::kQ3_K, 11},
    {"q4_k", GgmlType::kQ4_K, GgmlType::kQ4_K, 14},
    {"q5_k", GgmlType::kQ5_K, GgmlType::kQ5_K, 16},
    {"q6_k", GgmlType::kQ6_K, GgmlType::kQ6_K, 18},
    {"iq4_nl", GgmlType::kIQ4_NL, GgmlType::kIQ4_NL, 25},
    {"q4_k_m", GgmlType::kQ4_K, GgmlType::kQ6_K, 15},
    {"q5_k_m", GgmlType::kQ5_K, GgmlType::kQ6_K, 17},
};

// llama.cpp's choice of the layers whose attn_v and ffn_down get more bits.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 ||
         (layer - n_layers / 8) % 3 == 2;
}

bool Fits(GgmlType t, int64_t cols) {
  const quant::TypeInfo* info = quant::Info(static_cast<uint32_t>(t));
  return info != nullptr && cols % info->block_elems == 0;
}

GgmlType Fallback(GgmlType t) {
  switch (t) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
      return GgmlType::kIQ4_NL;
    case GgmlType::kQ4_K:
      return GgmlType::kQ5_0;
    case GgmlType::kQ5_K:
      return GgmlType::kQ5_1;
    case GgmlType::kQ6_K:
      return GgmlType::kQ8_0;
    default:
      return GgmlType::kF16;
  }
}

}  // namespace

GgmlType TypeMix::TypeFor(const std::string& name, int n_layers,
                          int64_t cols) const {
  GgmlType t = base;
  if (more_bits != base) {
    int layer = -1;
    if (absl::StartsWith(name, "blk.")) layer = std::atoi(name.c_str() + 4);
    const bool more =
        name == "output.weight" || ((absl::StrContains(name, ".attn_v.") ||
                                     absl::StrContains(name, ".ffn_down.")) &&
                                    layer >= 0 && UseMoreBits(layer, n_layers));
    if (more) t = more_bits;
  }
  while (!Fits(t, cols) && t != GgmlType::kF16) t = Fallback(t);
  return t;
}

absl::StatusOr<TypeMix> ParseTypeMix(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  for (const Named& m : kMixes) {
    if (lower == m.name) return TypeMix{m.base, m.more_bits, m.file_type};
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown type \"%s\" (expected one of %s)", name, TypeMixNames()));
}

std::string TypeMixNames() {
  std::string out;
  for (const Named& m : kMixes) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

}  // namespace kvserve
