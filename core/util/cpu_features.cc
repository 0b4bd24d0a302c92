#include "core/util/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace kvserve {
namespace {

struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs CpuId(uint32_t leaf, uint32_t subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) {
    return Regs{};
  }
  return r;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// The register state the OS saves on context switches (XCR0).
uint64_t Xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

CpuFeatures Detect() {
  CpuFeatures f;
  const uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  const Regs l1 = CpuId(1, 0);
  if (!Bit(l1.ecx, 27)) return f;  // no OSXSAVE: no AVX state at all
  const uint64_t xcr0 = Xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM, YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  if (!os_avx || !Bit(l1.ecx, 28)) return f;
  f.fma = Bit(l1.ecx, 12);
  f.f16c = Bit(l1.ecx, 29);
  if (max_leaf < 7) return f;
  const Regs l7 = CpuId(7, 0);
  const Regs l7s1 = CpuId(7, 1);
  f.avx2 = Bit(l7.ebx, 5);
  f.avx_vnni = Bit(l7s1.eax, 4);
  if (os_avx512) {
    f.avx512f = Bit(l7.ebx, 16);
    f.avx512dq = Bit(l7.ebx, 17);
    f.avx512bw = Bit(l7.ebx, 30);
    f.avx512vl = Bit(l7.ebx, 31);
    f.avx512_vnni = Bit(l7.ecx, 11);
    f.avx512_bf16 = Bit(l7s1.eax, 5);
  }
  if (os_amx) {
    f.amx_bf16 = Bit(l7.edx, 22);
    f.amx_tile = Bit(l7.edx, 24);
    f.amx_int8 = Bit(l7.edx, 25);
  }
  return f;
}

IsaLevel LevelOf(const CpuFeatures& f) {
  if (!f.avx2_fma()) return IsaLevel::kScalar;
  if (!f.avx512()) return IsaLevel::kAvx2;
  if (!f.avx512_bf16) return IsaLevel::kAvx512;
  if (!f.amx_tile) return IsaLevel::kAvx512Bf16;
  return IsaLevel::kNative;
}

}  // namespace

CpuFeatures CappedAt(CpuFeatures f, IsaLevel cap) {
  if (cap < IsaLevel::kNative) f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
  if (cap < IsaLevel::kAvx512Bf16) f.avx512_bf16 = false;
  if (cap < IsaLevel::kAvx512) {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = false;
    f.avx512_vnni = false;
  }
  // An explicit AVX2 cap means the features every AVX2 CPU has (as
  // oneDNN's avx2 does): AVX-VNNI (Alder Lake, Zen 5) goes too, so that
  // capped replicas compute what an AVX2-only CPU (a Zen 3) computes, and
  // the /avx2 test copies prove its kernels. Uncapped, an AVX2 CPU with
  // AVX-VNNI keeps it.
  if (cap == IsaLevel::kAvx2) f.avx_vnni = false;
  if (cap < IsaLevel::kAvx2) f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  return f;
}

namespace {

struct CapSetting {
  IsaLevel level = IsaLevel::kNative;
  absl::Status status;
};

const CapSetting& Cap() {
  static const CapSetting* cap = [] {
    auto* c = new CapSetting;
    const char* env = std::getenv("KVSERVE_MAX_ISA");
    if (env == nullptr || *env == '\0') return c;
    absl::StatusOr<IsaLevel> level = ParseIsaLevel(env);
    if (level.ok()) {
      c->level = *level;
    } else {
      c->status = absl::InvalidArgumentError(
          absl::StrFormat("KVSERVE_MAX_ISA: %s", level.status().message()));
    }
    return c;
  }();
  return *cap;
}

}  // namespace

std::string_view IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kAvx512Bf16:
      return "avx512_bf16";
    case IsaLevel::kNative:
      break;
  }
  return "native";
}

absl::StatusOr<IsaLevel> ParseIsaLevel(std::string_view name) {
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512,
                     IsaLevel::kAvx512Bf16, IsaLevel::kNative}) {
    if (name == IsaLevelName(l)) return l;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown ISA level '%s' (expected scalar, avx2, avx512, avx512_bf16 or "
      "native)",
      name.substr(0, 64)));
}

const CpuFeatures& DetectedCpu() {
  static const CpuFeatures* f = new CpuFeatures(Detect());
  return *f;
}

IsaLevel DetectedIsa() { return LevelOf(DetectedCpu()); }

IsaLevel IsaCap() { return Cap().level; }

absl::Status IsaCapStatus() { return Cap().status; }

IsaLevel EffectiveIsa() { return std::min(DetectedIsa(), IsaCap()); }

const CpuFeatures& Cpu() {
  static const CpuFeatures* f =
      new CpuFeatures(CappedAt(DetectedCpu(), IsaCap()));
  return *f;
}

std::string CpuFeatureString(const CpuFeatures& f) {
  std::string names;
  const std::pair<bool, std::string_view> all[] = {
      {f.avx2, "avx2"},
      {f.fma, "fma"},
      {f.f16c, "f16c"},
      {f.avx_vnni, "avx_vnni"},
      {f.avx512f, "avx512f"},
      {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"},
      {f.avx512dq, "avx512dq"},
      {f.avx512_vnni, "avx512_vnni"},
      {f.avx512_bf16, "avx512_bf16"},
      {f.amx_tile, "amx_tile"},
      {f.amx_int8, "amx_int8"},
      {f.amx_bf16, "amx_bf16"},
  };
  for (const auto& [has, name] : all) {
    if (!has) continue;
    if (!names.empty()) names += ',';
    names += name;
  }
  return names.empty() ? "scalar" : names;
}

std::string CpuSummary() {
  return absl::StrFormat("cpu: detected %s (%s); effective %s (%s)%s",
                         IsaLevelName(DetectedIsa()),
                         CpuFeatureString(DetectedCpu()),
                         IsaLevelName(EffectiveIsa()), CpuFeatureString(Cpu()),
                         IsaCap() == IsaLevel::kNative
                             ? ""
                             : absl::StrFormat(", capped by KVSERVE_MAX_ISA=%s",
                                               IsaLevelName(IsaCap())));
}

}  // namespace kvserve
