// The one place that knows the CPU: its features (cpuid, with the OS's
// consent to save the wider registers via xgetbv), detected once, and the
// cap KVSERVE_MAX_ISA=scalar|avx2|avx512|avx512_bf16|native (environment,
// read once) that every kernel of ours and oneDNN obey.
//
// Levels, each including the ones below it:
//   avx2         AVX2 + FMA + F16C (and AVX-VNNI where the CPU has it)
//   avx512       + AVX-512 F/BW/VL/DQ (and AVX512_VNNI where present)
//   avx512_bf16  + AVX512_BF16
//   native       + AMX (everything the CPU has)
// A cap above what the CPU has changes nothing. Kernels ask `Cpu()` (the
// features under the cap), never cpuid or __builtin_cpu_supports.
//
// Thread-safety: everything here is immutable after the first call.
#ifndef KVSERVE_CORE_UTIL_CPU_FEATURES_H_
#define KVSERVE_CORE_UTIL_CPU_FEATURES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx_vnni = false;  // VEX-encoded VNNI (Alder Lake, Zen 5)
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;

  // All of AVX-512 F/BW/VL/DQ: what our AVX-512 kernels need.
  bool avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  // AVX2 + FMA + F16C: what our AVX2 kernels need.
  bool avx2_fma() const { return avx2 && fma && f16c; }
};

enum class IsaLevel { kScalar, kAvx2, kAvx512, kAvx512Bf16, kNative };

// "scalar", "avx2", "avx512", "avx512_bf16", "native".
std::string_view IsaLevelName(IsaLevel level);
absl::StatusOr<IsaLevel> ParseIsaLevel(std::string_view name);

// What cpuid and the OS allow, ignoring the cap.
const CpuFeatures& DetectedCpu();
// The highest level the CPU reaches.
IsaLevel DetectedIsa();
// The KVSERVE_MAX_ISA cap (kNative when unset or invalid).
IsaLevel IsaCap();
// OK, or INVALID_ARGUMENT naming the bad KVSERVE_MAX_ISA value (the server
// refuses to start with it; kernels treat it as unset).
absl::Status IsaCapStatus();
// min(DetectedIsa(), IsaCap()).
IsaLevel EffectiveIsa();
// The detected features with everything above the cap cleared.
const CpuFeatures& Cpu();
// `f` with every feature above `level` cleared (tests run each kernel at
// every level the machine reaches).
CpuFeatures CappedAt(CpuFeatures f, IsaLevel level);

// Comma-separated feature names, e.g. "avx2,fma,f16c,avx512f,...".
std::string CpuFeatureString(const CpuFeatures& f);
// One line for logs: detected and effective levels and features.
std::string CpuSummary();

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_CPU_FEATURES_H_
