#include "core/quant/quant.h"

#include "core/quant/quant_internal.h"
#include "core/util/check.h"

namespace kvserve::quant {

const TypeInfo* Info(uint32_t ggml_type) {
  const Type t = static_cast<Type>(ggml_type);
  if (const TypeInfo* info = internal::LegacyInfo(t)) return info;
  return internal::KQuantInfo(t);
}

int64_t RowBytes(Type t, int64_t n) {
  const TypeInfo* info = Info(t);
  KVSERVE_CHECK(info != nullptr && n % info->block_elems == 0);
  return n / info->block_elems * info->block_bytes;
}

bool IsWeightType(Type t) {
  return Info(t) != nullptr && t != Type::kQ8_1 && t != Type::kQ8_K;
}

namespace {

GemvFn Select(Type t, const CpuFeatures& cpu, std::string_view* name) {
  if (GemvFn f = internal::LegacyGemv(t, cpu, name)) return f;
  return internal::KQuantGemv(t, cpu, name);
}

}  // namespace

GemvFn SelectGemv(Type t, const CpuFeatures& cpu) {
  std::string_view name;
  return Select(t, cpu, &name);
}

std::string_view GemvName(Type t, const CpuFeatures& cpu) {
  std::string_view name;
  return Select(t, cpu, &name) == nullptr ? "none" : name;
}

}  // namespace kvserve::quant
