// KVSERVE_MAX_ISA's levels as feature sets (CappedAt): each cap keeps what
// every CPU of that level has, so capped replicas and the /avx2 test copies
// compute what such a CPU computes.
#include "core/util/cpu_features.h"

#include "gtest/gtest.h"

namespace kvserve {
namespace {

CpuFeatures Everything() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.avx_vnni = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  f.avx512_vnni = f.avx512_bf16 = true;
  f.amx_tile = f.amx_int8 = f.amx_bf16 = true;
  return f;
}

TEST(CappedAtTest, Avx2IsWhatEveryAvx2CpuHasWithoutAvxVnni) {
  const CpuFeatures f = CappedAt(Everything(), IsaLevel::kAvx2);
  EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  // A Zen 3 has no AVX-VNNI: its kernels are what the cap must select.
  EXPECT_FALSE(f.avx_vnni);
  EXPECT_FALSE(f.avx512f || f.avx512bw || f.avx512vl || f.avx512dq ||
               f.avx512_vnni || f.avx512_bf16 || f.amx_tile);
}

TEST(CappedAtTest, UncappedAvx2CpuKeepsAvxVnni) {
  CpuFeatures alder_lake;
  alder_lake.avx2 = alder_lake.fma = alder_lake.f16c = true;
  alder_lake.avx_vnni = true;
  EXPECT_TRUE(CappedAt(alder_lake, IsaLevel::kNative).avx_vnni);
}

TEST(CappedAtTest, HigherLevelsKeepTheirFeatures) {
  const CpuFeatures avx512 = CappedAt(Everything(), IsaLevel::kAvx512);
  EXPECT_TRUE(avx512.avx512f && avx512.avx512bw && avx512.avx512vl &&
              avx512.avx512dq && avx512.avx512_vnni);
  EXPECT_FALSE(avx512.avx512_bf16 || avx512.amx_tile);
  const CpuFeatures bf16 = CappedAt(Everything(), IsaLevel::kAvx512Bf16);
  EXPECT_TRUE(bf16.avx512_bf16);
  EXPECT_FALSE(bf16.amx_tile || bf16.amx_int8 || bf16.amx_bf16);
  const CpuFeatures scalar = CappedAt(Everything(), IsaLevel::kScalar);
  EXPECT_FALSE(scalar.avx2 || scalar.fma || scalar.f16c || scalar.avx_vnni);
}

}  // namespace
}  // namespace kvserve
