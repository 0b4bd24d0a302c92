// The K-quant family (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K) through the public
// quant.h API: dequantization of hand-built blocks against plain references
// written here from ggml's block definitions (bit-exact), quantize →
// dequantize round trips, and every Gemv kernel at every ISA level against
// a double-precision dot product of the dequantized operands.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/quant/quant.h"
#include "core/util/cpu_features.h"
#include "core/util/fp16.h"
#include "gtest/gtest.h"

namespace kvserve::quant {
namespace {

constexpr int kQK = 256;

// ---------------------------------------------------------------------------
// Reference dequantizers, one element at a time, from ggml-common.h's
// layouts (byte offsets) and ggml-quants.c's formulas (float order kept, so
// the results are bit-exact).

float HalfAt(const uint8_t* p) {
  return Fp16ToFloat(static_cast<uint16_t>(p[0] | p[1] << 8));
}

// block_q2_K {scales[16]; qs[64]; d; dmin}
float RefQ2K(const uint8_t* b, int e) {
  const float d = HalfAt(b + 80), dmin = HalfAt(b + 82);
  const uint8_t sc = b[e / 16];
  const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  return d * (sc & 15) * q - dmin * (sc >> 4);
}

// block_q3_K {hmask[32]; qs[64]; scales[12]; d}
float RefQ3K(const uint8_t* b, int e) {
  const float d = HalfAt(b + 108);
  const uint8_t* sc = b + 96;
  const int j = e / 16;
  const int low4 = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
  const int top2 = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  const int scale = (low4 | top2 << 4) - 32;
  const int q2 =
      (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  const bool high = (b[e % 32] >> (e / 32)) & 1;
  return d * scale * (q2 - (high ? 0 : 4));
}

// get_scale_min_k4 on the 12 scale bytes of Q4_K / Q5_K.
void RefScaleMin(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
    *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
  }
}

// block_q4_K {d; dmin; scales[12]; qs[128]}
float RefQ4K(const uint8_t* b, int e) {
  const float d = HalfAt(b), dmin = HalfAt(b + 2);
  int sc, m;
  RefScaleMin(b + 4, e / 32, &sc, &m);
  const uint8_t byte = b[16 + 32 * (e / 64) + e % 32];
  const int q = (e / 32) % 2 ? byte >> 4 : byte & 15;
  return d * sc * q - dmin * m;
}

// block_q5_K {d; dmin; scales[12]; qh[32]; qs[128]}
float RefQ5K(const uint8_t* b, int e) {
  const float d = HalfAt(b), dmin = HalfAt(b + 2);
  int sc, m;
  RefScaleMin(b + 4, e / 32, &sc, &m);
  const uint8_t byte = b[48 + 32 * (e / 64) + e % 32];
  const int low = (e / 32) % 2 ? byte >> 4 : byte & 15;
  const int high = (b[16 + e % 32] >> (e / 32)) & 1;
  return d * sc * (low + 16 * high) - dmin * m;
}

// block_q6_K {ql[128]; qh[64]; scales[16] (int8); d}
float RefQ6K(const uint8_t* b, int e) {
  const float d = HalfAt(b + 208);
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  const uint8_t lbyte = b[64 * h + 32 * (j % 2) + l];
  const int low = j < 2 ? lbyte & 15 : lbyte >> 4;
  const int high = (b[128 + 32 * h + l] >> (2 * j)) & 3;
  const auto scale = static_cast<int8_t>(b[192 + e / 16]);
  return d * scale * ((low | high << 4) - 32);
}

// block_q8_K {float d; int8 qs[256]; int16 bsums[16]}
float RefQ8K(const uint8_t* b, int e) {
  float d;
  std::memcpy(&d, b, 4);
  return d * static_cast<int8_t>(b[4 + e]);
}

struct KType {
  Type type;
  const char* name;
  int block_bytes;
  float (*ref)(const uint8_t* block, int e);
  // Byte offsets of the fp16 scales (the hand-built blocks keep them finite).
  std::vector<int> half_offsets;
  // The round trip's bound on RMS(error) / RMS(x) for N(0, 1) data.
  double max_rel_rms;
};

// Bounds: about 1.2x what the reference quantizers reach on N(0, 1) data
// (measured: Q2_K 0.296, Q3_K 0.151, Q4_K 0.071, Q5_K 0.036, Q6_K 0.0177,
// Q8_K 0.0069), each near the uniform-rounding estimate step / sqrt(12) of
// its format (e.g. Q8_K: max of 256 samples ≈ 3σ, step 3σ / 127, 0.0068).
const std::vector<KType>& KTypes() {
  static const auto* types = new std::vector<KType>{
      {Type::kQ2_K, "q2_K", 84, &RefQ2K, {80, 82}, 0.36},
      {Type::kQ3_K, "q3_K", 110, &RefQ3K, {108}, 0.18},
      {Type::kQ4_K, "q4_K", 144, &RefQ4K, {0, 2}, 0.085},
      {Type::kQ5_K, "q5_K", 176, &RefQ5K, {0, 2}, 0.043},
      {Type::kQ6_K, "q6_K", 210, &RefQ6K, {208}, 0.021},
      {Type::kQ8_K, "q8_K", 292, &RefQ8K, {}, 0.0082},
  };
  return *types;
}

const KType& Find(Type t) {
  for (const KType& k : KTypes()) {
    if (k.type == t) return k;
  }
  ADD_FAILURE() << "unknown type";
  return KTypes()[0];
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToFp16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// Blocks of random bytes with finite fp16 scales in [-2, 2] (Q8_K: an f32
// d and bsums left random, as dequantization ignores them).
std::vector<uint8_t> RandomBlocks(const KType& kt, int n_blocks,
                                  std::mt19937* rng) {
  std::vector<uint8_t> data(static_cast<size_t>(n_blocks) * kt.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  for (auto& v : data) v = static_cast<uint8_t>(byte(*rng));
  for (int i = 0; i < n_blocks; ++i) {
    uint8_t* b = data.data() + static_cast<size_t>(i) * kt.block_bytes;
    for (int off : kt.half_offsets) PutHalf(b + off, scale(*rng));
    if (kt.type == Type::kQ8_K) {
      const float d = scale(*rng) / 127;
      std::memcpy(b, &d, 4);
    }
  }
  return data;
}

// ---------------------------------------------------------------------------

TEST(KQuantInfoTest, Table) {
  const int act_bytes = 292;
  for (const KType& kt : KTypes()) {
    SCOPED_TRACE(kt.name);
    const TypeInfo* info = Info(kt.type);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->type, kt.type);
    EXPECT_EQ(info->name, kt.name);
    EXPECT_EQ(info->block_elems, kQK);
    EXPECT_EQ(info->block_bytes, kt.block_bytes);
    EXPECT_EQ(info->act_type, Type::kQ8_K);
    EXPECT_NE(info->dequantize, nullptr);
    EXPECT_NE(info->quantize, nullptr);
    EXPECT_EQ(RowBytes(kt.type, 4096), 16 * kt.block_bytes);
    EXPECT_EQ(IsWeightType(kt.type), kt.type != Type::kQ8_K);
  }
  EXPECT_EQ(Info(Type::kQ8_K)->block_bytes, act_bytes);
  EXPECT_EQ(SelectGemv(Type::kQ8_K, CpuFeatures{}), nullptr);
}

// Dequantize over hand-built blocks: all scale bytes 0x00, all 0xff (every
// 6-bit scale and min at 63; Q6_K's scales at -1), a block whose quant
// bytes run through all 256 values with scale bytes of alternating
// extremes, and random bytes; each against the reference, bit for bit.
TEST(KQuantDequantizeTest, HandBuiltBlocksMatchReference) {
  std::mt19937 rng(1);
  for (const KType& kt : KTypes()) {
    SCOPED_TRACE(kt.name);
    const int nb = 8;
    std::vector<uint8_t> blocks = RandomBlocks(kt, nb, &rng);
    uint8_t* b0 = blocks.data();
    uint8_t* b1 = b0 + kt.block_bytes;
    uint8_t* b2 = b1 + kt.block_bytes;
    std::memset(b0, 0x00, kt.block_bytes);
    std::memset(b1, 0xff, kt.block_bytes);
    for (int i = 0; i < kt.block_bytes; ++i) {
      b2[i] = static_cast<uint8_t>(i % 3 == 0   ? 0xff
                                   : i % 3 == 1 ? 0x00
                                                : i * 37);
    }
    const float halves[] = {0.5f, -0.75f};
    for (uint8_t* b : {b0, b1, b2}) {
      for (size_t h = 0; h < kt.half_offsets.size(); ++h) {
        PutHalf(b + kt.half_offsets[h], halves[h]);
      }
      if (kt.type == Type::kQ8_K) {
        const float d = -0.01f;
        std::memcpy(b, &d, 4);
      }
    }
    std::vector<float> out(nb * kQK);
    Info(kt.type)->dequantize(blocks.data(), out.data(), nb * kQK);
    for (int i = 0; i < nb; ++i) {
      for (int e = 0; e < kQK; ++e) {
        const float want = kt.ref(blocks.data() + i * kt.block_bytes, e);
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i * kQK + e]),
                  std::bit_cast<uint32_t>(want))
            << "block " << i << " element " << e << ": " << out[i * kQK + e]
            << " vs " << want;
      }
    }
  }
}

// A few values worked out by hand from the format definitions, so that a
// misreading shared by the reference above and the library would show.
TEST(KQuantDequantizeTest, HandComputedValues) {
  std::vector<float> y(kQK);
  {  // Q4_K: d = 1, dmin = 0.5; scale 4 (sub-block 4) = 0x3 | 0x2 << 4 = 35,
     // min 4 = 0x1 | 0x3 << 4 = 49; element 128 = low nibble of qs[64].
    std::vector<uint8_t> b(144, 0);
    PutHalf(&b[0], 1.0f);
    PutHalf(&b[2], 0.5f);
    b[4 + 8] = 0x13;      // scales[8]: scale 4 low nibble 3, min 4 low nibble 1
    b[4 + 0] = 0x2 << 6;  // scales[0] top bits: scale 4's bits 4..5
    b[4 + 4] = 0x3 << 6;  // scales[4] top bits: min 4's bits 4..5
    b[16 + 64] = 0xa7;    // element 128 = 7, element 160 = 10
    Info(Type::kQ4_K)->dequantize(b.data(), y.data(), kQK);
    EXPECT_EQ(y[128], 35.0f * 7 - 0.5f * 49);
    EXPECT_EQ(y[129], -0.5f * 49);
    // Sub-block 5 has scale 0 and min (scales[9] >> 4) | (scales[5] >> 6) << 4
    // = 0.
    EXPECT_EQ(y[160], 0.0f);
    EXPECT_EQ(y[0], 0.0f);
  }
  {  // Q6_K: d = 0.5, scales[2] = -3; element 32 = low nibble of ql[32] |
     // bits 2..3 of qh[0] << 4.
    std::vector<uint8_t> b(210, 0);
    PutHalf(&b[208], 0.5f);
    b[192 + 2] = static_cast<uint8_t>(-3);
    b[32] = 0x05;
    b[128] = 0x3 << 2;
    Info(Type::kQ6_K)->dequantize(b.data(), y.data(), kQK);
    EXPECT_EQ(y[32], 0.5f * -3 * ((5 | 3 << 4) - 32));
    EXPECT_EQ(y[33], 0.5f * -3 * -32);
  }
  {  // Q3_K: d = 1; scale 9 = (scales[1] >> 4) | ((scales[9] >> 4) & 3) << 4;
     // element 144 (sub-block 9) = bits 2j (j = 0, h = 1) of qs[32 + 16]
     // with hmask[16] bit 4.
    std::vector<uint8_t> b(110, 0);
    PutHalf(&b[108], 1.0f);
    b[96 + 1] = 0x70;      // scale 9 low nibble 7
    b[96 + 9] = 0x2 << 4;  // scale 9 top bits 2 → 39 - 32 = 7
    b[32 + 48] = 0x02;     // low 2 bits 2
    b[16] = 1 << 4;        // high bit set: q = 2
    Info(Type::kQ3_K)->dequantize(b.data(), y.data(), kQK);
    EXPECT_EQ(y[144], 7.0f * 2);
    EXPECT_EQ(y[145], 7.0f * -4);
  }
  {  // Q2_K: d = 1, dmin = 0.25; scales[3] = 5 | 9 << 4; element 48 = bits
     // 2..3 (j = 1) of qs[16].
    std::vector<uint8_t> b(84, 0);
    PutHalf(&b[80], 1.0f);
    PutHalf(&b[82], 0.25f);
    b[3] = 5 | 9 << 4;
    b[16 + 16] = 3 << 2;
    Info(Type::kQ2_K)->dequantize(b.data(), y.data(), kQK);
    EXPECT_EQ(y[48], 5.0f * 3 - 0.25f * 9);
    EXPECT_EQ(y[49], -0.25f * 9);
  }
  {  // Q5_K: d = 1, dmin = 0; scale 1 = scales[1] & 63 = 2; element 32 =
     // high nibble of qs[0] + 16 · bit 1 of qh[0].
    std::vector<uint8_t> b(176, 0);
    PutHalf(&b[0], 1.0f);
    b[4 + 1] = 2;
    b[48] = 0xf0;
    b[16] = 0x2;
    Info(Type::kQ5_K)->dequantize(b.data(), y.data(), kQK);
    EXPECT_EQ(y[32], 2.0f * 31);
    EXPECT_EQ(y[0], 0.0f);
  }
}

// ---------------------------------------------------------------------------

std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(KQuantQuantizeTest, RoundTripError) {
  const int64_t n = 64 * kQK;
  const std::vector<float> x = Gaussian(n, 7);
  for (const KType& kt : KTypes()) {
    SCOPED_TRACE(kt.name);
    const TypeInfo* info = Info(kt.type);
    std::vector<uint8_t> q(RowBytes(kt.type, n));
    info->quantize(x.data(), q.data(), n);
    std::vector<float> y(n);
    info->dequantize(q.data(), y.data(), n);
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      err2 += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
      x2 += double{x[i]} * x[i];
    }
    const double rel = std::sqrt(err2 / x2);
    EXPECT_LT(rel, kt.max_rel_rms);
    std::printf("%s round trip: RMS error / RMS x = %.4f\n", kt.name, rel);
  }
}

// 1024 bell-shaped values with outliers (every 97th ×6) and a block scaled
// by 2^-10, from exact integer arithmetic so that every platform gets the
// same floats.
std::vector<float> GoldenInput() {
  std::vector<float> x(1024);
  uint32_t s = 12345;
  for (size_t i = 0; i < x.size(); ++i) {
    int sum = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 1664525u + 1013904223u;
      sum += static_cast<int>(s >> 20) - 2048;
    }
    float v = static_cast<float>(sum) / 2048.0f;
    if (i % 97 == 0) v *= 6.0f;
    if (i / 256 == 2) v *= 1.0f / 1024;
    x[i] = v;
  }
  return x;
}

uint64_t Fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

// Golden: the quantizers' bytes equal ggml's quantize_row_*_ref on
// GoldenInput (FNV-1a 64 of the output of ggml-org/ggml at commit d99724f,
// computed with ggml's own code; byte-exact on other inputs too).
TEST(KQuantQuantizeTest, MatchesGgmlReferenceBytes) {
  const std::vector<float> x = GoldenInput();
  const struct {
    Type type;
    uint64_t fnv1a;
  } golden[] = {
      {Type::kQ2_K, 0xc930053652a36024ull},
      {Type::kQ3_K, 0x26f89b3314ea6d1dull},
      {Type::kQ4_K, 0x73676edd3c667af7ull},
      {Type::kQ5_K, 0x17d1f4a0b66dd783ull},
      {Type::kQ6_K, 0x61f439c73ba1b3faull},
      {Type::kQ8_K, 0x186749b29dd7cc86ull},
  };
  for (const auto& g : golden) {
    const TypeInfo* info = Info(g.type);
    SCOPED_TRACE(std::string(info->name));
    std::vector<uint8_t> q(RowBytes(g.type, x.size()), 0);
    info->quantize(x.data(), q.data(), x.size());
    EXPECT_EQ(Fnv1a(q), g.fnv1a);
  }
}

TEST(KQuantQuantizeTest, ZerosAndScaledInputs) {
  for (const KType& kt : KTypes()) {
    SCOPED_TRACE(kt.name);
    const TypeInfo* info = Info(kt.type);
    std::vector<float> x(2 * kQK, 0.0f);
    std::vector<uint8_t> q(RowBytes(kt.type, 2 * kQK), 0xaa);
    info->quantize(x.data(), q.data(), 2 * kQK);
    std::vector<float> y(2 * kQK, 1.0f);
    info->dequantize(q.data(), y.data(), 2 * kQK);
    for (float v : y) ASSERT_EQ(v, 0.0f);
    // Scale invariance: 1000x the data has 1000x the error (up to fp16).
    const std::vector<float> g = Gaussian(2 * kQK, 3);
    for (float s : {1e-3f, 1e3f}) {
      std::vector<float> xs(g.size());
      for (size_t i = 0; i < g.size(); ++i) xs[i] = s * g[i];
      info->quantize(xs.data(), q.data(), 2 * kQK);
      info->dequantize(q.data(), y.data(), 2 * kQK);
      double err2 = 0, x2 = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        err2 += (double{y[i]} - xs[i]) * (double{y[i]} - xs[i]);
        x2 += double{xs[i]} * xs[i];
      }
      EXPECT_LT(std::sqrt(err2 / x2), 1.5 * kt.max_rel_rms) << "scale " << s;
    }
  }
}

TEST(KQuantQuantizeTest, Q8KBsumsAndSign) {
  const int64_t n = 16 * kQK;
  std::vector<float> x = Gaussian(n, 11);
  x[5] = 9.0f;          // block 0's largest magnitude is positive
  x[kQK + 17] = -9.0f;  // block 1's is negative
  std::vector<uint8_t> q(RowBytes(Type::kQ8_K, n));
  Info(Type::kQ8_K)->quantize(x.data(), q.data(), n);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint8_t* b = q.data() + i * 292;
    float d;
    std::memcpy(&d, b, 4);
    const auto* qs = reinterpret_cast<const int8_t*>(b + 4);
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += qs[16 * j + l];
      int16_t bsum;
      std::memcpy(&bsum, b + 260 + 2 * j, 2);
      ASSERT_EQ(bsum, sum) << "block " << i << " group " << j;
    }
    for (int e = 0; e < kQK; ++e) ASSERT_GE(qs[e], -127);
    if (i == 0) {
      EXPECT_EQ(d, 1 / (-127.0f / 9.0f));  // d = −max / 127
      EXPECT_EQ(qs[5], -127);
    }
    if (i == 1) {
      EXPECT_EQ(d, 1 / (127.0f / 9.0f));
      EXPECT_EQ(qs[17], -127);
    }
  }
}

// ---------------------------------------------------------------------------
// Gemv at every ISA level.

struct Level {
  const char* name;
  CpuFeatures cpu;
};

std::vector<Level> Levels() {
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = avx2.f16c = true;
  CpuFeatures avx2_vnni = avx2;
  avx2_vnni.avx_vnni = true;
  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512vl = avx512.avx512dq = true;
  CpuFeatures avx512_vnni = avx512;
  avx512_vnni.avx512_vnni = true;
  return {{"scalar", CpuFeatures{}},
          {"avx2", avx2},
          {"avx2_vnni", avx2_vnni},
          {"avx512", avx512},
          {"avx512_vnni", avx512_vnni}};
}

// The features `want` has and `have` lacks, comma-separated ("" if none).
std::string Missing(const CpuFeatures& want, const CpuFeatures& have) {
  std::string out;
  auto check = [&](bool w, bool h, const char* name) {
    if (w && !h) out += std::string(out.empty() ? "" : ",") + name;
  };
  check(want.avx2, have.avx2, "avx2");
  check(want.fma, have.fma, "fma");
  check(want.f16c, have.f16c, "f16c");
  check(want.avx_vnni, have.avx_vnni, "avx_vnni");
  check(want.avx512f, have.avx512f, "avx512f");
  check(want.avx512bw, have.avx512bw, "avx512bw");
  check(want.avx512vl, have.avx512vl, "avx512vl");
  check(want.avx512dq, have.avx512dq, "avx512dq");
  check(want.avx512_vnni, have.avx512_vnni, "avx512_vnni");
  return out;
}

const Type kWeightTypes[] = {Type::kQ2_K, Type::kQ3_K, Type::kQ4_K, Type::kQ5_K,
                             Type::kQ6_K};

class KQuantGemvTest : public ::testing::TestWithParam<std::tuple<Type, int>> {
};

TEST_P(KQuantGemvTest, MatchesDoubleReference) {
  const KType& kt = Find(std::get<0>(GetParam()));
  const Level level = Levels()[std::get<1>(GetParam())];
  const std::string missing = Missing(level.cpu, DetectedCpu());
  if (!missing.empty()) {
    GTEST_SKIP() << "this CPU lacks " << missing << " for the " << level.name
                 << " level";
  }
  ASSERT_EQ(GemvName(kt.type, level.cpu),
            std::string(kt.name) + "/" + level.name);
  const GemvFn gemv = SelectGemv(kt.type, level.cpu);
  ASSERT_NE(gemv, nullptr);

  std::mt19937 rng(
      static_cast<uint32_t>(kt.block_bytes * 31 + std::get<1>(GetParam())));
  for (int64_t k : {int64_t{256}, int64_t{4096}}) {
    for (int m : {1, 3, 5, 8, 20}) {  // 20: three activation tiles
      SCOPED_TRACE("k " + std::to_string(k) + " m " + std::to_string(m));
      const int rows = 13, row_begin = 3, row_end = 12;
      const int64_t nb = k / kQK;
      // Weight rows of random bytes, with two blocks of padding between rows.
      const int64_t w_row_bytes = (nb + 2) * kt.block_bytes;
      std::vector<uint8_t> w =
          RandomBlocks(kt, static_cast<int>(rows * (nb + 2)), &rng);
      // Activations: Q8_K of N(0, 1) rows, one block of padding apart.
      const int64_t x_row_bytes = (nb + 1) * 292;
      std::vector<uint8_t> x(m * x_row_bytes);
      std::vector<float> xf = Gaussian(
          m * k, static_cast<uint32_t>(k + m + std::get<1>(GetParam())));
      for (int r = 0; r < m; ++r) {
        Info(Type::kQ8_K)
            ->quantize(xf.data() + r * k, x.data() + r * x_row_bytes, k);
      }
      const int64_t ldy = rows + 5;
      std::vector<float> y(m * ldy, -1234.5f);
      GemvArgs args;
      args.k = k;
      args.w = w.data();
      args.w_row_bytes = w_row_bytes;
      args.row_begin = row_begin;
      args.row_end = row_end;
      args.x = x.data();
      args.x_row_bytes = x_row_bytes;
      args.m = m;
      args.y = y.data();
      args.ldy = ldy;
      gemv(args);
      for (int r = 0; r < m; ++r) {
        for (int i = 0; i < ldy; ++i) {
          const float got = y[r * ldy + i];
          if (i < row_begin || i >= row_end) {
            ASSERT_EQ(got, -1234.5f)
                << "row " << i << " outside the range was written";
            continue;
          }
          double dot = 0, abs_dot = 0;
          for (int64_t e = 0; e < k; ++e) {
            const double we = kt.ref(
                w.data() + i * w_row_bytes + e / kQK * kt.block_bytes, e % kQK);
            const double xe =
                RefQ8K(x.data() + r * x_row_bytes + e / kQK * 292, e % kQK);
            dot += we * xe;
            abs_dot += std::fabs(we * xe);
          }
          ASSERT_NEAR(got, dot, 1e-5 * abs_dot + 1e-30)
              << "weight row " << i << " activation row " << r;
        }
      }
    }
  }
}

// Every level computes the scalar kernel's bits (ggml's float order,
// quant_kquants_simd.h), at every activation-row count.
TEST_P(KQuantGemvTest, ComputesTheScalarKernelsBits) {
  const KType& kt = Find(std::get<0>(GetParam()));
  const Level level = Levels()[std::get<1>(GetParam())];
  const std::string missing = Missing(level.cpu, DetectedCpu());
  if (!missing.empty()) {
    GTEST_SKIP() << "this CPU lacks " << missing << " for the " << level.name
                 << " level";
  }
  const GemvFn gemv = SelectGemv(kt.type, level.cpu);
  const GemvFn scalar = SelectGemv(kt.type, CpuFeatures{});
  std::mt19937 rng(
      static_cast<uint32_t>(kt.block_bytes * 37 + std::get<1>(GetParam())));
  for (int64_t k : {int64_t{256}, int64_t{768}, int64_t{4096}}) {
    for (int m : {1, 2, 3, 4, 5, 8, 9, 20}) {
      SCOPED_TRACE("k " + std::to_string(k) + " m " + std::to_string(m));
      const int rows = 11;
      const int64_t nb = k / kQK;
      const int64_t w_row_bytes = nb * kt.block_bytes;
      std::vector<uint8_t> w =
          RandomBlocks(kt, static_cast<int>(rows * nb), &rng);
      const int64_t x_row_bytes = nb * 292;
      std::vector<uint8_t> x(m * x_row_bytes);
      std::vector<float> xf = Gaussian(m * k, static_cast<uint32_t>(k * m));
      for (int r = 0; r < m; ++r) {
        Info(Type::kQ8_K)
            ->quantize(xf.data() + r * k, x.data() + r * x_row_bytes, k);
      }
      std::vector<float> got(m * rows), want(m * rows);
      GemvArgs args;
      args.k = k;
      args.w = w.data();
      args.w_row_bytes = w_row_bytes;
      args.row_begin = 0;
      args.row_end = rows;
      args.x = x.data();
      args.x_row_bytes = x_row_bytes;
      args.m = m;
      args.ldy = rows;
      // ggml's order at every m (the lane kernels from 8 rows are not).
      args.lane_min_rows = std::numeric_limits<int>::max();
      args.y = got.data();
      gemv(args);
      args.y = want.data();
      scalar(args);
      for (int i = 0; i < m * rows; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
                  std::bit_cast<uint32_t>(want[i]))
            << kt.name << "/" << level.name << " output " << i << ": " << got[i]
            << " vs the scalar kernel's " << want[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLevels, KQuantGemvTest,
    ::testing::Combine(::testing::ValuesIn(kWeightTypes),
                       ::testing::Range(0, 5)),
    [](const ::testing::TestParamInfo<KQuantGemvTest::ParamType>& info) {
      return std::string(Find(std::get<0>(info.param)).name) + "_" +
             Levels()[std::get<1>(info.param)].name;
    });

// Every activation-row count 1..13 (the kernels tile the rows, with lanes
// past m padded) and weight-row ranges of 1, 2, 3, 5 and 13 rows (the
// kernels walk several weight rows per pass), on an odd block count.
class KQuantGemvTileTest : public KQuantGemvTest {};

TEST_P(KQuantGemvTileTest, AllRowCountsAndRanges) {
  const KType& kt = Find(std::get<0>(GetParam()));
  const Level level = Levels()[std::get<1>(GetParam())];
  const std::string missing = Missing(level.cpu, DetectedCpu());
  if (!missing.empty()) {
    GTEST_SKIP() << "this CPU lacks " << missing << " for the " << level.name
                 << " level";
  }
  const GemvFn gemv = SelectGemv(kt.type, level.cpu);
  ASSERT_NE(gemv, nullptr);
  std::mt19937 rng(
      static_cast<uint32_t>(kt.block_bytes * 17 + std::get<1>(GetParam())));
  const int64_t k = 3 * kQK, nb = 3;
  const int rows = 13;
  const int64_t w_row_bytes = nb * kt.block_bytes;
  const std::vector<uint8_t> w =
      RandomBlocks(kt, static_cast<int>(rows * nb), &rng);
  // Reference per weight row and activation row, for the largest m.
  constexpr int kMaxM = 13;
  const int64_t x_row_bytes = nb * 292;
  std::vector<uint8_t> x(kMaxM * x_row_bytes);
  const std::vector<float> xf =
      Gaussian(kMaxM * k, static_cast<uint32_t>(99 + std::get<1>(GetParam())));
  for (int r = 0; r < kMaxM; ++r) {
    Info(Type::kQ8_K)
        ->quantize(xf.data() + r * k, x.data() + r * x_row_bytes, k);
  }
  std::vector<double> want(kMaxM * rows), mag(kMaxM * rows);
  for (int r = 0; r < kMaxM; ++r) {
    for (int i = 0; i < rows; ++i) {
      double dot = 0, abs_dot = 0;
      for (int64_t e = 0; e < k; ++e) {
        const double we = kt.ref(
            w.data() + i * w_row_bytes + e / kQK * kt.block_bytes, e % kQK);
        const double xe =
            RefQ8K(x.data() + r * x_row_bytes + e / kQK * 292, e % kQK);
        dot += we * xe;
        abs_dot += std::fabs(we * xe);
      }
      want[r * rows + i] = dot;
      mag[r * rows + i] = abs_dot;
    }
  }
  for (int m = 1; m <= kMaxM; ++m) {
    for (const auto& [begin, end] :
         {std::pair<int, int>{0, rows}, {4, 5}, {1, 3}, {6, 9}, {2, 7}}) {
      SCOPED_TRACE("m " + std::to_string(m) + " rows [" +
                   std::to_string(begin) + ", " + std::to_string(end) + ")");
      const int64_t ldy = rows + 2;
      std::vector<float> y(m * ldy, -1234.5f);
      GemvArgs args;
      args.k = k;
      args.w = w.data();
      args.w_row_bytes = w_row_bytes;
      args.row_begin = begin;
      args.row_end = end;
      args.x = x.data();
      args.x_row_bytes = x_row_bytes;
      args.m = m;
      args.y = y.data();
      args.ldy = ldy;
      gemv(args);
      for (int r = 0; r < m; ++r) {
        for (int i = 0; i < ldy; ++i) {
          const float got = y[r * ldy + i];
          if (i < begin || i >= end) {
            ASSERT_EQ(got, -1234.5f)
                << "row " << i << " outside the range was written";
            continue;
          }
          ASSERT_NEAR(got, want[r * rows + i], 1e-5 * mag[r * rows + i] + 1e-30)
              << "weight row " << i << " activation row " << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLevels, KQuantGemvTileTest,
    ::testing::Combine(::testing::ValuesIn(kWeightTypes),
                       ::testing::Range(0, 5)),
    [](const ::testing::TestParamInfo<KQuantGemvTileTest::ParamType>& info) {
      return std::string(Find(std::get<0>(info.param)).name) + "_" +
             Levels()[std::get<1>(info.param)].name;
    });

// The selection without a level's features falls back, never up.
TEST(KQuantGemvSelectTest, FallsBackByFeature) {
  const std::vector<Level> levels = Levels();
  CpuFeatures no_fma = levels[4].cpu;
  no_fma.fma = false;
  EXPECT_EQ(GemvName(Type::kQ4_K, no_fma), "q4_K/scalar");
  CpuFeatures no_bw = levels[4].cpu;
  no_bw.avx512bw = false;
  EXPECT_EQ(GemvName(Type::kQ6_K, no_bw), "q6_K/avx2");
  no_bw.avx_vnni = true;
  EXPECT_EQ(GemvName(Type::kQ6_K, no_bw), "q6_K/avx2_vnni");
  EXPECT_EQ(GemvName(Type::kQ8_K, levels[4].cpu), "none");
}

}  // namespace
}  // namespace kvserve::quant
