// The legacy ggml types (core/quant/quant_legacy.cc): dequantization against
// plain references written here from ggml-common.h's block definitions
// (bit-exact), the reference quantizers (round-trip error bounds, exactly
// representable data reproduced), and every Gemv kernel at every ISA level
// against a double-precision dot product of the blocks' own values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/model/gguf_tensor.h"
#include "core/quant/activation.h"
#include "core/quant/quant.h"
#include "core/quant/quant_internal.h"
#include "core/util/cpu_features.h"
#include "core/util/fp16.h"

namespace kvserve::quant {
namespace {

constexpr Type kLegacyTypes[] = {
    Type::kF32,  Type::kF16,  Type::kBF16, Type::kQ4_0, Type::kQ4_1,
    Type::kQ5_0, Type::kQ5_1, Type::kQ8_0, Type::kQ8_1, Type::kIQ4_NL};
constexpr Type kWeightTypes[] = {Type::kF32,  Type::kF16,  Type::kBF16,
                                 Type::kQ4_0, Type::kQ4_1, Type::kQ5_0,
                                 Type::kQ5_1, Type::kQ8_0, Type::kIQ4_NL};

bool IsFloatType(Type t) {
  return t == Type::kF32 || t == Type::kF16 || t == Type::kBF16;
}

std::string TypeName(Type t) { return std::string(Info(t)->name); }

// ---------------------------------------------------------------------------
// The formats, from their definitions.

// IEEE half: (-1)^s · 2^(e-15) · 1.f, or 2^-14 · 0.f when e = 0.
float RefHalf(uint16_t h) {
  const int e = (h >> 10) & 0x1f, f = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return f ? NAN : static_cast<float>(sign * INFINITY);
  if (e == 0) return static_cast<float>(sign * std::ldexp(f, -24));
  return static_cast<float>(sign * std::ldexp(1024 + f, e - 25));
}

uint16_t Le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t Le32(const uint8_t* p) {
  return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
}

constexpr int kIq4Nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

// A block type's contents: per element its level (the integer the scale
// multiplies: q − 8 for q4_0, q for q4_1, kIq4Nl[q] for iq4_nl, ...), per
// block d, m (0 without a min) and s (q8_1).
struct RefBlocks {
  std::vector<int> level;
  std::vector<float> d, m, s;
  bool has_min = false;
};

RefBlocks ParseBlocks(Type t, const uint8_t* p, int64_t n) {
  RefBlocks r;
  const int bytes = Info(t)->block_bytes;
  for (int64_t b = 0; b < n / 32; ++b, p += bytes) {
    const float d = RefHalf(Le16(p));
    float m = 0, s = 0;
    for (int e = 0; e < 32; ++e) {
      // Nibble of element e in 16 bytes at qs: low nibbles 0..15, high
      // nibbles 16..31.
      auto nib = [e](const uint8_t* qs) {
        return e < 16 ? qs[e] & 0xf : qs[e - 16] >> 4;
      };
      int level = 0;
      switch (t) {
        case Type::kQ4_0:  // {d, qs[16]}
          level = nib(p + 2) - 8;
          break;
        case Type::kQ4_1:  // {d, m, qs[16]}
          level = nib(p + 4);
          break;
        case Type::kQ5_0:  // {d, qh[4], qs[16]}
          level = (nib(p + 6) | ((Le32(p + 2) >> e) & 1) << 4) - 16;
          break;
        case Type::kQ5_1:  // {d, m, qh[4], qs[16]}
          level = nib(p + 8) | ((Le32(p + 4) >> e) & 1) << 4;
          break;
        case Type::kQ8_0:  // {d, qs[32]}
          level = static_cast<int8_t>(p[2 + e]);
          break;
        case Type::kQ8_1:  // {d, s, qs[32]}
          level = static_cast<int8_t>(p[4 + e]);
          break;
        case Type::kIQ4_NL:  // {d, qs[16]}
          level = kIq4Nl[nib(p + 2)];
          break;
        default:
          ADD_FAILURE() << "not a block type";
      }
      r.level.push_back(level);
    }
    if (t == Type::kQ4_1 || t == Type::kQ5_1) {
      m = RefHalf(Le16(p + 2));
      r.has_min = true;
    }
    if (t == Type::kQ8_1) s = RefHalf(Le16(p + 2));
    r.d.push_back(d);
    r.m.push_back(m);
    r.s.push_back(s);
  }
  return r;
}

// The format's values as f32 (what dequantize must produce bit for bit).
std::vector<float> RefDequant(Type t, const std::vector<uint8_t>& bytes,
                              int64_t n) {
  std::vector<float> out(n);
  if (t == Type::kF32) {
    std::memcpy(out.data(), bytes.data(), n * 4);
  } else if (t == Type::kF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = RefHalf(Le16(&bytes[2 * i]));
  } else if (t == Type::kBF16) {  // the top half of an f32
    for (int64_t i = 0; i < n; ++i) {
      out[i] = std::bit_cast<float>(uint32_t{Le16(&bytes[2 * i])} << 16);
    }
  } else {
    const RefBlocks r = ParseBlocks(t, bytes.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(r.level[i]) * r.d[i / 32];
      if (r.has_min) out[i] += r.m[i / 32];
    }
  }
  return out;
}

bool SameBits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// ---------------------------------------------------------------------------
// Type table.

TEST(QuantLegacyTable, MatchesGgml) {
  struct Row {
    Type type;
    const char* name;
    int block_elems, block_bytes;
    Type act;
  };
  const Row rows[] = {
      {Type::kF32, "f32", 1, 4, Type::kF32},
      {Type::kF16, "f16", 1, 2, Type::kF32},
      {Type::kBF16, "bf16", 1, 2, Type::kF32},
      {Type::kQ4_0, "q4_0", 32, 18, Type::kQ8_0},
      {Type::kQ4_1, "q4_1", 32, 20, Type::kQ8_1},
      {Type::kQ5_0, "q5_0", 32, 22, Type::kQ8_0},
      {Type::kQ5_1, "q5_1", 32, 24, Type::kQ8_1},
      {Type::kQ8_0, "q8_0", 32, 34, Type::kQ8_0},
      {Type::kQ8_1, "q8_1", 32, 36, Type::kQ8_1},
      {Type::kIQ4_NL, "iq4_nl", 32, 18, Type::kQ8_0},
  };
  for (const Row& row : rows) {
    const TypeInfo* info = Info(row.type);
    ASSERT_NE(info, nullptr) << row.name;
    EXPECT_EQ(info->type, row.type);
    EXPECT_EQ(info->name, row.name);
    EXPECT_EQ(info->block_elems, row.block_elems) << row.name;
    EXPECT_EQ(info->block_bytes, row.block_bytes) << row.name;
    EXPECT_EQ(info->act_type, row.act) << row.name;
    EXPECT_NE(info->dequantize, nullptr) << row.name;
    EXPECT_NE(info->quantize, nullptr) << row.name;
    EXPECT_EQ(internal::LegacyInfo(row.type), info);
    EXPECT_EQ(IsWeightType(row.type), row.type != Type::kQ8_1) << row.name;
  }
  EXPECT_EQ(RowBytes(Type::kQ4_0, 4096), 4096 / 32 * 18);
  EXPECT_EQ(RowBytes(Type::kF16, 7), 14);
  EXPECT_EQ(SelectGemv(Type::kQ8_1, DetectedCpu()), nullptr);
  EXPECT_EQ(GemvName(Type::kQ8_1, DetectedCpu()), "none");
}

TEST(QuantLegacyTable, UnsupportedIdsAreNull) {
  for (uint32_t id : {4u, 5u, 16u, 17u, 18u, 19u, 21u, 22u, 23u, 24u, 25u, 26u,
                      27u, 28u, 29u, 31u, 39u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(Info(id), nullptr) << id;
  }
  // The K-quants are the other family's.
  for (uint32_t id = 10; id <= 15; ++id) {
    EXPECT_EQ(internal::LegacyInfo(static_cast<Type>(id)), nullptr) << id;
  }
}

// ---------------------------------------------------------------------------
// Dequantization of hand-built blocks.

// Scales: both signs, ±0, the largest half, the smallest subnormal, a
// subnormal, and ordinary values.
constexpr uint16_t kScales[] = {0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x0001, 0x8001,
                                0x03ff, 0x0000, 0x8000, 0x2e66, 0xc0a0, 0x1400,
                                0x5640, 0xd8f0, 0x3555, 0x0400};
constexpr uint32_t kHighBits[] = {0x00000000u, 0xffffffffu, 0xaaaaaaaau,
                                  0x12345678u, 0x80000001u, 0x0000ffffu};

// n_blocks blocks of t whose quant bytes run through every byte value and
// whose scales (and mins) run through kScales.
std::vector<uint8_t> HandBuiltBlocks(Type t, int n_blocks) {
  const int bytes = Info(t)->block_bytes;
  std::vector<uint8_t> out(static_cast<size_t>(n_blocks) * bytes);
  int next_byte = 0;
  for (int b = 0; b < n_blocks; ++b) {
    uint8_t* p = &out[static_cast<size_t>(b) * bytes];
    const uint16_t d = kScales[b % std::size(kScales)];
    const uint16_t m = kScales[(b * 7 + 3) % std::size(kScales)];
    const uint32_t qh = kHighBits[b % std::size(kHighBits)];
    auto put16 = [](uint8_t* q, uint16_t v) {
      q[0] = v & 0xff;
      q[1] = v >> 8;
    };
    put16(p, d);
    int quant_offset = 2;
    if (t == Type::kQ4_1 || t == Type::kQ5_1 || t == Type::kQ8_1) {
      put16(p + 2, m);
      quant_offset = 4;
    }
    if (t == Type::kQ5_0 || t == Type::kQ5_1) {
      for (int i = 0; i < 4; ++i) p[quant_offset + i] = (qh >> (8 * i)) & 0xff;
      quant_offset += 4;
    }
    for (int i = quant_offset; i < bytes; ++i) {
      p[i] = static_cast<uint8_t>(next_byte);
      next_byte = (next_byte + 1) % 256;
    }
  }
  return out;
}

class QuantLegacyTypeTest : public testing::TestWithParam<Type> {};

TEST_P(QuantLegacyTypeTest, DequantizeHandBuiltBlocksBitExact) {
  const Type t = GetParam();
  const TypeInfo* info = Info(t);
  ASSERT_NE(info, nullptr);
  std::vector<uint8_t> bytes;
  int64_t n = 0;
  if (IsFloatType(t) && t != Type::kF32) {  // every 16-bit pattern
    n = 65536;
    bytes.resize(2 * n);
    for (int64_t i = 0; i < n; ++i) {
      bytes[2 * i] = i & 0xff;
      bytes[2 * i + 1] = static_cast<uint8_t>(i >> 8);
    }
  } else if (t == Type::kF32) {
    const float values[] = {0.0f, -0.0f, 1.5f, -3e38f, 1e-45f, INFINITY};
    n = std::size(values);
    bytes.resize(sizeof(values));
    std::memcpy(bytes.data(), values, sizeof(values));
  } else {
    // 48 blocks: every byte value several times over in the quants, every
    // scale with every quant position.
    n = 48 * 32;
    bytes = HandBuiltBlocks(t, 48);
  }
  std::vector<float> got(n);
  info->dequantize(bytes.data(), got.data(), n);
  const std::vector<float> want = RefDequant(t, bytes, n);
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 10; ++i) {
    if (!SameBits(got[i], want[i])) {
      ++bad;
      ADD_FAILURE() << TypeName(t) << " element " << i << ": got " << got[i]
                    << " want " << want[i];
    }
  }
}

// Bounds on |x − dequant(quant(x))| for one block (or element) from its
// reference quantizer: half a step where it rounds (a whole step for the
// element q4_0/q5_0 cap at the top), plus the half rounding of d and m.
double ErrorBound(Type t, const float* x, int64_t n) {
  double amax = 0, min = x[0], max = x[0];
  for (int64_t j = 0; j < n; ++j) {
    amax = std::max(amax, std::fabs(double{x[j]}));
    min = std::min(min, double{x[j]});
    max = std::max(max, double{x[j]});
  }
  // Half an fp16 ulp at v: relative 2^-11, absolute 2^-25 for subnormals.
  auto half_ulp = [](double v) {
    return std::max(std::fabs(v) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
  };
  const double slack = 1.0001;  // f32 arithmetic in the quantizer
  switch (t) {
    case Type::kF32:
      return 0;
    case Type::kF16:
      return half_ulp(amax);
    case Type::kBF16:
      return amax * std::ldexp(1.0, -8);
    case Type::kQ4_0:
      return (amax / 8 + 8 * half_ulp(amax / 8)) * slack;
    case Type::kQ5_0:
      return (amax / 16 + 16 * half_ulp(amax / 16)) * slack;
    case Type::kQ4_1:
      return ((max - min) / 15 * 0.5 + 15 * half_ulp((max - min) / 15) +
              half_ulp(min)) *
             slack;
    case Type::kQ5_1:
      return ((max - min) / 31 * 0.5 + 31 * half_ulp((max - min) / 31) +
              half_ulp(min)) *
             slack;
    case Type::kQ8_0:
    case Type::kQ8_1:
      return (amax / 127 * 0.5 + 127 * half_ulp(amax / 127)) * slack;
    case Type::kIQ4_NL:
      // Levels are at most 24 apart at a scale near amax / 127 (the search
      // may pick a larger one), so no element is off by more than about
      // 12 / 127 of the block's largest; measured up to 0.1 on N(0, 1).
      return amax * 0.15;
    default:
      return 0;
  }
}

TEST_P(QuantLegacyTypeTest, RoundTripWithinBound) {
  const Type t = GetParam();
  const TypeInfo* info = Info(t);
  constexpr int64_t kN = 32 * 256;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(kN);
  for (int64_t i = 0; i < kN; ++i) {
    // Blocks spanning 1e-3 .. 1e3, one with an outlier, one all zero.
    const int64_t b = i / 32;
    x[i] = normal(rng) * std::pow(10.0f, static_cast<float>(b % 7) - 3);
    if (b % 11 == 5 && i % 32 == 17) x[i] *= 50;
    if (b == 9) x[i] = 0;
  }
  std::vector<uint8_t> q(RowBytes(t, kN));
  info->quantize(x.data(), q.data(), kN);
  std::vector<float> y(kN);
  info->dequantize(q.data(), y.data(), kN);
  const int64_t group = info->block_elems == 1 ? 1 : 32;
  double sq_err = 0, sq = 0;
  for (int64_t g = 0; g < kN; g += group) {
    const double bound = ErrorBound(t, &x[g], group);
    for (int64_t j = g; j < g + group; ++j) {
      if (t == Type::kF16 && std::fabs(x[j]) >= 65520) {  // beyond f16
        ASSERT_EQ(y[j], std::copysign(INFINITY, x[j])) << j;
        continue;
      }
      ASSERT_LE(std::fabs(double{x[j]} - y[j]), bound)
          << TypeName(t) << " element " << j << " x " << x[j] << " got "
          << y[j];
      if (g / 32 % 7 == 3 && g / 32 % 11 != 5) {  // N(0, 1) blocks
        sq_err += (double{x[j]} - y[j]) * (double{x[j]} - y[j]);
        sq += double{x[j]} * x[j];
      }
    }
  }
  // Q8_1 carries s = fp16(d·Σq) for the unrounded d: within half an ulp of
  // s and Σq half ulps of d of Σq times the stored d.
  if (t == Type::kQ8_1) {
    const RefBlocks r = ParseBlocks(t, q.data(), kN);
    for (size_t b = 0; b < r.d.size(); ++b) {
      double sum = 0;
      for (int j = 0; j < 32; ++j) sum += r.level[b * 32 + j];
      const double half_ulp_d =
          std::max(std::fabs(double{r.d[b]}) * 0x1p-11, 0x1p-25);
      const double half_ulp_s =
          std::max(std::fabs(double{r.s[b]}) * 0x1p-11, 0x1p-25);
      EXPECT_NEAR(r.s[b], sum * r.d[b],
                  (half_ulp_s + std::fabs(sum) * half_ulp_d) * 1.0001)
          << "block " << b;
    }
  }
  // The relative RMS error on N(0, 1) blocks, against each format's step.
  const double rel_rms = std::sqrt(sq_err / sq);
  // Uniform rounding error over a step of amax/8 (q4_0), range/15 (q4_1),
  // amax/16, range/31, amax/127 on N(0, 1) blocks (amax ≈ 2.1), ~15% over
  // the expected values; bf16/f16: 2^-9 and 2^-12 relative, likewise.
  const double rms_limit = t == Type::kQ4_0                       ? 0.095
                           : t == Type::kQ4_1                     ? 0.09
                           : t == Type::kIQ4_NL                   ? 0.085
                           : t == Type::kQ5_0                     ? 0.047
                           : t == Type::kQ5_1                     ? 0.045
                           : t == Type::kQ8_0 || t == Type::kQ8_1 ? 0.006
                           : t == Type::kBF16                     ? 2e-3
                                                                  : 2.6e-4;
  EXPECT_LE(rel_rms, rms_limit) << TypeName(t);
}

// x built from chosen quants and fp16-exact scales (the extreme quant
// present, so the quantizer finds the same scale) comes back unchanged.
TEST_P(QuantLegacyTypeTest, ExactlyRepresentableDataReproduced) {
  const Type t = GetParam();
  const TypeInfo* info = Info(t);
  std::mt19937 rng(5);
  std::vector<float> x;
  if (IsFloatType(t)) {
    for (int i = 0; i < 4096; ++i) {
      const uint16_t h = static_cast<uint16_t>(rng());
      float v = t == Type::kBF16 ? std::bit_cast<float>(uint32_t{h} << 16)
                                 : RefHalf(h);
      if (std::isnan(v)) v = 1.0f;
      x.push_back(
          t == Type::kF32
              ? std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0xbf7fffffu)
              : v);
    }
  } else {
    const float scales[] = {0.25f, -0.5f, 3.0f, 0.1875f, 0.0078125f, -6.0f};
    for (int b = 0; b < 24; ++b) {
      float d = scales[b % std::size(scales)];
      const float m = -static_cast<float>(b % 5) * 0.75f;
      int lo = 0, hi = 0;  // quant range
      switch (t) {
        case Type::kQ4_0:
        case Type::kQ4_1:
          hi = 15;
          break;
        case Type::kQ5_0:
        case Type::kQ5_1:
          hi = 31;
          break;
        case Type::kQ8_0:
        case Type::kQ8_1:
          lo = -127, hi = 127, d = std::fabs(d);
          break;
        default:  // iq4_nl: indices
          hi = 15;
      }
      std::uniform_int_distribution<int> pick(lo, hi);
      int q[32];
      for (int& v : q) v = pick(rng);
      const bool has_min = t == Type::kQ4_1 || t == Type::kQ5_1;
      q[b % 32] =
          t == Type::kQ8_0 || t == Type::kQ8_1 ? (b % 2 ? 127 : -127) : lo;
      if (has_min) q[(b + 7) % 32] = hi;
      for (int j = 0; j < 32; ++j) {
        float v = 0;
        switch (t) {
          case Type::kQ4_0:
            v = static_cast<float>(q[j] - 8) * d;
            break;
          case Type::kQ5_0:
            v = static_cast<float>(q[j] - 16) * d;
            break;
          case Type::kQ4_1:
          case Type::kQ5_1:
            v = static_cast<float>(q[j]) * std::fabs(d) + m;
            break;
          case Type::kIQ4_NL:
            v = static_cast<float>(kIq4Nl[q[j]]) * d;
            break;
          default:
            v = static_cast<float>(q[j]) * d;
        }
        x.push_back(v);
      }
    }
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(t, n));
  info->quantize(x.data(), q.data(), n);
  std::vector<float> y(n);
  info->dequantize(q.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(SameBits(x[i], y[i]))
        << TypeName(t) << " element " << i << ": " << x[i] << " -> " << y[i];
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantLegacyTypeTest,
                         testing::ValuesIn(kLegacyTypes),
                         [](const testing::TestParamInfo<Type>& p) {
                           return TypeName(p.param);
                         });

// ---------------------------------------------------------------------------
// fp16 / bf16 rounding.

TEST(QuantLegacyFloat, HalfRoundsToNearestEven) {
  const TypeInfo* f16 = Info(Type::kF16);
  const float in[] = {1.0f + 0x1p-11f,
                      1.0f + 3 * 0x1p-11f,
                      65519.99f,
                      65520.0f,
                      -1e9f,
                      0x1p-25f,
                      3 * 0x1p-25f,
                      0x1p-24f,
                      NAN,
                      -0.0f,
                      0x1p-14f - 0x1p-25f,
                      2049.0f};
  const uint16_t want[] = {0x3c00, 0x3c02, 0x7bff, 0x7c00, 0xfc00, 0x0000,
                           0x0002, 0x0001, 0x7e00, 0x8000, 0x0400, 0x6800};
  uint16_t got[std::size(in)];
  f16->quantize(in, got, std::size(in));
  for (size_t i = 0; i < std::size(in); ++i) {
    EXPECT_EQ(got[i], want[i]) << "input " << in[i];
  }
}

TEST(QuantLegacyFloat, HalfMatchesModelConversion) {
  std::mt19937 rng(3);
  for (int i = 0; i < 1 << 20; ++i) {
    // Exponents around the half range, where the cases are.
    uint32_t bits = static_cast<uint32_t>(rng());
    bits = (bits & 0x807fffffu) | ((100u + (bits >> 23) % 60u) << 23);
    if (i % 64 == 0) bits = static_cast<uint32_t>(rng());
    const float f = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToFp16(f), FloatToHalf(f)) << std::hex << bits;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(SameBits(Fp16ToFloat(static_cast<uint16_t>(h)),
                         HalfToFloat(static_cast<uint16_t>(h))))
        << h;
  }
}

TEST(QuantLegacyFloat, Bf16RoundsToNearestEvenAndKeepsNan) {
  const TypeInfo* bf16 = Info(Type::kBF16);
  const float in[] = {std::bit_cast<float>(0x3f808000u),  // tie, even below
                      std::bit_cast<float>(0x3f818000u),  // tie, odd below
                      std::bit_cast<float>(0x3f808001u), NAN,
                      std::bit_cast<float>(0x7f800001u), -INFINITY};
  uint16_t got[std::size(in)];
  bf16->quantize(in, got, std::size(in));
  EXPECT_EQ(got[0], 0x3f80);
  EXPECT_EQ(got[1], 0x3f82);
  EXPECT_EQ(got[2], 0x3f81);
  EXPECT_TRUE(std::isnan(std::bit_cast<float>(uint32_t{got[3]} << 16)));
  EXPECT_TRUE(std::isnan(std::bit_cast<float>(uint32_t{got[4]} << 16)));
  EXPECT_EQ(got[5], 0xff80);
}

// ---------------------------------------------------------------------------
// Gemv kernels at every level.

struct Level {
  const char* name;
  // The features this level turns on (all others off).
  bool avx2, avx_vnni, avx512, avx512_vnni;
};
constexpr Level kLevels[] = {
    {"scalar", false, false, false, false},
    {"avx2", true, false, false, false},
    {"avx_vnni", true, true, false, false},
    {"avx512", true, false, true, false},
    {"avx512_vnni", true, false, true, true},
};

// The level's features as a subset of the machine's; `missing` names the
// ones the machine lacks.
CpuFeatures LevelFeatures(const Level& level, std::string* missing) {
  const CpuFeatures& have = DetectedCpu();
  CpuFeatures f;
  auto take = [&](bool want, bool has, bool* dst, const char* name) {
    if (!want) return;
    if (!has) *missing += std::string(missing->empty() ? "" : ",") + name;
    *dst = has;
  };
  take(level.avx2, have.avx2, &f.avx2, "avx2");
  take(level.avx2, have.fma, &f.fma, "fma");
  take(level.avx2, have.f16c, &f.f16c, "f16c");
  take(level.avx_vnni, have.avx_vnni, &f.avx_vnni, "avx_vnni");
  take(level.avx512, have.avx512f, &f.avx512f, "avx512f");
  take(level.avx512, have.avx512bw, &f.avx512bw, "avx512bw");
  take(level.avx512, have.avx512vl, &f.avx512vl, "avx512vl");
  take(level.avx512, have.avx512dq, &f.avx512dq, "avx512dq");
  take(level.avx512_vnni, have.avx512_vnni, &f.avx512_vnni, "avx512_vnni");
  return f;
}

// The kernel name SelectGemv must report at `level` (float types have no
// VNNI kernels).
std::string ExpectedName(Type t, const Level& level) {
  std::string l = level.name;
  if (IsFloatType(t) && l == "avx_vnni") l = "avx2";
  if (IsFloatType(t) && l == "avx512_vnni") l = "avx512";
  return TypeName(t) + "/" + l;
}

// Random weight rows: random quant bytes with random finite scales (and
// mins) of varied magnitude, or random floats.
std::vector<uint8_t> RandomWeights(Type t, int64_t rows, int64_t k,
                                   std::mt19937& rng) {
  const TypeInfo* info = Info(t);
  const int64_t row_bytes = RowBytes(t, k);
  std::vector<uint8_t> w(rows * row_bytes);
  std::normal_distribution<float> normal;
  if (IsFloatType(t)) {
    std::vector<float> x(rows * k);
    for (float& v : x) v = normal(rng);
    info->quantize(x.data(), w.data(), rows * k);
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255), exp(-10, 4);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  auto scale = [&] { return FloatToFp16(std::ldexp(normal(rng), exp(rng))); };
  for (int64_t b = 0; b < rows * k / 32; ++b) {
    uint8_t* p = &w[b * info->block_bytes];
    const uint16_t d = scale(), m = scale();
    std::memcpy(p, &d, 2);
    if (t == Type::kQ4_1 || t == Type::kQ5_1) std::memcpy(p + 2, &m, 2);
  }
  return w;
}

// y = dot(row, x) in double, and Σ of the magnitudes of its terms (what the
// tolerance scales with). For the block types: Σ_blocks d_w·d_x·Σ q_w·q_x
// (+ m_w·s_x where the weight has a min), the formats' own dot product.
void RefDot(Type t, const uint8_t* w, const uint8_t* x, int64_t k, double* y,
            double* mag) {
  *y = *mag = 0;
  const Type act = Info(t)->act_type;
  if (IsFloatType(t)) {
    const std::vector<float> wv =
        RefDequant(t, std::vector<uint8_t>(w, w + RowBytes(t, k)), k);
    const std::vector<float> xv =
        RefDequant(act, std::vector<uint8_t>(x, x + RowBytes(act, k)), k);
    for (int64_t j = 0; j < k; ++j) {
      *y += double{wv[j]} * xv[j];
      *mag += std::fabs(double{wv[j]} * xv[j]);
    }
    return;
  }
  const RefBlocks rw = ParseBlocks(t, w, k);
  const RefBlocks rx = ParseBlocks(act, x, k);
  for (int64_t b = 0; b < k / 32; ++b) {
    double sum = 0, abs_sum = 0;
    for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
      sum += double{1.0} * rw.level[j] * rx.level[j];
      abs_sum += std::fabs(double{1.0} * rw.level[j] * rx.level[j]);
    }
    const double scale = double{rw.d[b]} * rx.d[b];
    *y += scale * sum;
    *mag += std::fabs(scale) * abs_sum;
    if (rw.has_min) {
      *y += double{rw.m[b]} * rx.s[b];
      *mag += std::fabs(double{rw.m[b]} * rx.s[b]);
    }
  }
}

class QuantLegacyGemvTest
    : public testing::TestWithParam<std::tuple<Type, int>> {};

TEST_P(QuantLegacyGemvTest, MatchesDoubleReference) {
  const auto [t, level_index] = GetParam();
  const Level& level = kLevels[level_index];
  std::string missing;
  const CpuFeatures cpu = LevelFeatures(level, &missing);
  if (!missing.empty()) {
    GTEST_SKIP() << "this machine lacks " << missing << " for level "
                 << level.name;
  }
  ASSERT_EQ(GemvName(t, cpu), ExpectedName(t, level));
  const GemvFn gemv = SelectGemv(t, cpu);
  ASSERT_NE(gemv, nullptr);
  const Type act = Info(t)->act_type;
  const std::vector<int64_t> ks =
      IsFloatType(t) ? std::vector<int64_t>{1, 7, 8, 33, 100, 1029, 4096}
                     : std::vector<int64_t>{32, 64, 96, 32 * 37, 4096};
  std::mt19937 rng(17 + level_index);
  std::normal_distribution<float> normal;
  constexpr int64_t kRows = 13;
  for (const int64_t k : ks) {
    const std::vector<uint8_t> w = RandomWeights(t, kRows, k, rng);
    for (const int m : {1, 3, 8, 13, 20}) {
      // Activation rows with blocks of varied magnitude, quantized as the
      // engine does.
      std::vector<float> xf(m * k);
      for (int64_t i = 0; i < m * k; ++i) {
        xf[i] = normal(rng) * std::pow(2.0f, static_cast<float>(i / 32 % 5));
      }
      const int64_t x_row_bytes = RowBytes(act, k);
      std::vector<uint8_t> x(m * x_row_bytes);
      for (int r = 0; r < m; ++r) {
        Info(act)->quantize(&xf[r * k], &x[r * x_row_bytes], k);
      }
      for (const auto& [begin, end] :
           {std::pair<int64_t, int64_t>{0, kRows}, {3, 10}, {5, 6}}) {
        const int64_t ldy = kRows + 3;
        std::vector<float> y(m * ldy, NAN);
        GemvArgs a;
        a.k = k;
        a.w = w.data();
        a.w_row_bytes = RowBytes(t, k);
        a.row_begin = begin;
        a.row_end = end;
        a.x = x.data();
        a.x_row_bytes = x_row_bytes;
        a.m = m;
        a.y = y.data();
        a.ldy = ldy;
        gemv(a);
        for (int r = 0; r < m; ++r) {
          for (int64_t i = 0; i < ldy; ++i) {
            const float got = y[r * ldy + i];
            if (i < begin || i >= end) {
              ASSERT_TRUE(std::isnan(got)) << "wrote row " << i;
              continue;
            }
            double want, mag;
            RefDot(t, &w[i * a.w_row_bytes], &x[r * x_row_bytes], k, &want,
                   &mag);
            ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30)
                << ExpectedName(t, level) << " k " << k << " m " << m << " row "
                << i << " act row " << r;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLevels, QuantLegacyGemvTest,
    testing::Combine(testing::ValuesIn(kWeightTypes),
                     testing::Range(0, static_cast<int>(std::size(kLevels)))),
    [](const testing::TestParamInfo<std::tuple<Type, int>>& p) {
      return TypeName(std::get<0>(p.param)) + "_" +
             kLevels[std::get<1>(p.param)].name;
    });

// ggml's float order (quant_legacy_simd.h), written plainly for Q4_0: the
// lanes order (8 f32 lanes, lane j taking elements 4j..4j+3 of each block,
// then hsum_float_8) and the sequential one (one fma chain of block sums:
// the order of matrices of a multiple of 8 rows, which ggml repacks).
float Q4_0Reference(const uint8_t* w_row, const uint8_t* x_row, int64_t k,
                    bool sequential) {
  float lanes[8] = {}, y = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* wb = w_row + 18 * b;
    const uint8_t* xb = x_row + 34 * b;
    uint16_t wd, xd;
    std::memcpy(&wd, wb, 2);
    std::memcpy(&xd, xb, 2);
    const float s = Fp16ToFloat(wd) * Fp16ToFloat(xd);
    int32_t lane[8] = {};
    for (int e = 0; e < 32; ++e) {
      const int q = (e < 16 ? wb[2 + e] & 0xf : wb[2 + e - 16] >> 4) - 8;
      lane[e / 4] += q * static_cast<int8_t>(xb[2 + e]);
    }
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) {
      lanes[j] = std::fma(s, static_cast<float>(lane[j]), lanes[j]);
      sum += lane[j];
    }
    y = std::fma(static_cast<float>(sum), s, y);
  }
  if (sequential) return y;
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// Every level computes the scalar kernel's bits (ggml's order), at every
// activation-row count, for odd block counts and both orders of q4_0; and
// Q4_0's two orders are the reference's.
TEST_P(QuantLegacyGemvTest, ComputesTheScalarKernelsBits) {
  const auto [t, level_index] = GetParam();
  if (IsFloatType(t))
    GTEST_SKIP() << "float types: oneDNN's order above 32 rows";
  const Level& level = kLevels[level_index];
  std::string missing;
  const CpuFeatures cpu = LevelFeatures(level, &missing);
  if (!missing.empty()) {
    GTEST_SKIP() << "this machine lacks " << missing << " for level "
                 << level.name;
  }
  const GemvFn gemv = SelectGemv(t, cpu);
  const GemvFn scalar = SelectGemv(t, CpuFeatures{});
  const Type act = Info(t)->act_type;
  std::mt19937 rng(29 + level_index);
  std::normal_distribution<float> normal;
  constexpr int64_t kRows = 19;
  for (const int64_t k : {32, 96, 32 * 33, 4096}) {
    const std::vector<uint8_t> w = RandomWeights(t, kRows, k, rng);
    for (const int m : {1, 2, 3, 4, 5, 8, 13, 20}) {
      std::vector<float> xf(m * k);
      for (float& v : xf) v = normal(rng);
      const int64_t x_row_bytes = RowBytes(act, k);
      std::vector<uint8_t> x(m * x_row_bytes);
      for (int r = 0; r < m; ++r) {
        quant::QuantizeActivation(act, &xf[r * k], k, &x[r * x_row_bytes]);
      }
      for (const int64_t w_rows : {int64_t{0}, int64_t{16}, kRows}) {
        std::vector<float> got(m * kRows), want(m * kRows);
        GemvArgs a;
        a.k = k;
        a.w = w.data();
        a.w_row_bytes = RowBytes(t, k);
        a.row_begin = 0;
        a.row_end = kRows;
        a.x = x.data();
        a.x_row_bytes = x_row_bytes;
        a.m = m;
        a.ldy = kRows;
        a.w_rows = w_rows;
        // ggml's order at every m (the lane kernels from 8 rows are not).
        a.lane_min_rows = std::numeric_limits<int>::max();
        a.y = got.data();
        gemv(a);
        a.y = want.data();
        scalar(a);
        for (int64_t i = 0; i < m * kRows; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
                    std::bit_cast<uint32_t>(want[i]))
              << ExpectedName(t, level) << " k " << k << " m " << m
              << " w_rows " << w_rows << " output " << i << ": " << got[i]
              << " vs the scalar kernel's " << want[i];
          if (t != Type::kQ4_0) continue;
          const float ref =
              Q4_0Reference(&w[(i % kRows) * a.w_row_bytes],
                            &x[(i / kRows) * x_row_bytes], k, w_rows == 16);
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
                    std::bit_cast<uint32_t>(ref))
              << "q4_0 w_rows " << w_rows << " output " << i;
        }
      }
    }
  }
}

// Every activation-row count 1..13 (the kernels tile the rows, with lanes
// past m padded) and weight-row ranges of 1, 2, 3, 5 and 13 rows (the
// kernels walk several weight rows per pass), on block counts around the
// kernels' chunk of 8 blocks.
class QuantLegacyGemvTileTest : public QuantLegacyGemvTest {};

TEST_P(QuantLegacyGemvTileTest, AllRowCountsAndRanges) {
  const auto [t, level_index] = GetParam();
  const Level& level = kLevels[level_index];
  std::string missing;
  const CpuFeatures cpu = LevelFeatures(level, &missing);
  if (!missing.empty()) {
    GTEST_SKIP() << "this machine lacks " << missing << " for level "
                 << level.name;
  }
  const GemvFn gemv = SelectGemv(t, cpu);
  ASSERT_NE(gemv, nullptr);
  const Type act = Info(t)->act_type;
  std::mt19937 rng(29 + level_index);
  std::normal_distribution<float> normal;
  constexpr int64_t kRows = 13;
  constexpr int kMaxM = 13;
  for (const int64_t k : {int64_t{32 * 7}, int64_t{32 * 9}}) {
    const std::vector<uint8_t> w = RandomWeights(t, kRows, k, rng);
    std::vector<float> xf(kMaxM * k);
    for (int64_t i = 0; i < kMaxM * k; ++i) {
      xf[i] = normal(rng) * std::pow(2.0f, static_cast<float>(i / 32 % 5));
    }
    const int64_t x_row_bytes = RowBytes(act, k);
    std::vector<uint8_t> x(kMaxM * x_row_bytes);
    for (int r = 0; r < kMaxM; ++r) {
      Info(act)->quantize(&xf[r * k], &x[r * x_row_bytes], k);
    }
    std::vector<double> want(kMaxM * kRows), mag(kMaxM * kRows);
    for (int r = 0; r < kMaxM; ++r) {
      for (int64_t i = 0; i < kRows; ++i) {
        RefDot(t, &w[i * RowBytes(t, k)], &x[r * x_row_bytes], k,
               &want[r * kRows + i], &mag[r * kRows + i]);
      }
    }
    for (int m = 1; m <= kMaxM; ++m) {
      for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, kRows},
                                       {4, 5},
                                       {1, 3},
                                       {6, 9},
                                       {2, 7}}) {
        const int64_t ldy = kRows + 3;
        std::vector<float> y(m * ldy, NAN);
        GemvArgs a;
        a.k = k;
        a.w = w.data();
        a.w_row_bytes = RowBytes(t, k);
        a.row_begin = begin;
        a.row_end = end;
        a.x = x.data();
        a.x_row_bytes = x_row_bytes;
        a.m = m;
        a.y = y.data();
        a.ldy = ldy;
        gemv(a);
        for (int r = 0; r < m; ++r) {
          for (int64_t i = 0; i < ldy; ++i) {
            const float got = y[r * ldy + i];
            if (i < begin || i >= end) {
              ASSERT_TRUE(std::isnan(got)) << "wrote row " << i;
              continue;
            }
            ASSERT_NEAR(got, want[r * kRows + i],
                        1e-5 * mag[r * kRows + i] + 1e-30)
                << ExpectedName(t, level) << " k " << k << " m " << m
                << " rows [" << begin << ", " << end << ") row " << i
                << " act row " << r;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLevels, QuantLegacyGemvTileTest,
    testing::Combine(testing::ValuesIn(kWeightTypes),
                     testing::Range(0, static_cast<int>(std::size(kLevels)))),
    [](const testing::TestParamInfo<std::tuple<Type, int>>& p) {
      return TypeName(std::get<0>(p.param)) + "_" +
             kLevels[std::get<1>(p.param)].name;
    });

// q4_0x8: the layout quant_legacy.h documents, byte for byte, on rows whose
// every byte names its row, block and position.
TEST(QuantQ4_0x8, RepackLayoutAndDequantization) {
  constexpr int64_t kRows = 16, kK = 96, kNb = kK / 32;
  const int64_t row_bytes = RowBytes(Type::kQ4_0, kK);
  std::vector<uint8_t> w(kRows * row_bytes);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < kRows * kNb; ++b) {  // finite scales
    const uint16_t d = FloatToFp16(0.01f * static_cast<float>(b + 1));
    std::memcpy(&w[18 * b], &d, 2);
  }
  std::vector<uint8_t> packed(w.size());
  RepackQ4_0x8(w.data(), kRows, kK, packed.data());
  // Rows of each piece: 0 and 2 {0, 1, 4, 5}, 1 and 3 {2, 3, 6, 7}.
  constexpr int kPieceRows[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
  for (int64_t g = 0; g < kRows / 8; ++g) {
    for (int64_t b = 0; b < kNb; ++b) {
      const uint8_t* rec = &packed[(g * kNb + b) * 144];
      for (int r = 0; r < 8; ++r) {
        const uint8_t* block = &w[((8 * g + r) * kNb + b) * 18];
        ASSERT_EQ(std::memcmp(rec + 2 * r, block, 2), 0)
            << "d of row " << r << " group " << g << " block " << b;
      }
      for (int piece = 0; piece < 4; ++piece) {
        for (int q = 0; q < 4; ++q) {
          const int r = kPieceRows[piece % 2][q];
          const uint8_t* block = &w[((8 * g + r) * kNb + b) * 18];
          ASSERT_EQ(std::memcmp(rec + 16 + 32 * piece + 8 * q,
                                block + 2 + 8 * (piece / 2), 8),
                    0)
              << "piece " << piece << " row " << r << " group " << g
              << " block " << b;
        }
      }
    }
  }
  for (int64_t i = 0; i < kRows; ++i) {
    std::vector<float> got(kK), want(kK);
    DequantizeQ4_0x8Row(packed.data(), kK, i, got.data());
    Info(Type::kQ4_0)->dequantize(&w[i * row_bytes], want.data(), kK);
    for (int64_t j = 0; j < kK; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[j]),
                std::bit_cast<uint32_t>(want[j]))
          << "row " << i << " element " << j;
    }
  }
}

// The q4_0x8 kernel of every level computes the bits of q4_0's plain-row
// kernels in the sequential order (and of the reference above), for every
// activation-row count and any row range, partial groups included.
class QuantQ4_0x8GemvTest : public testing::TestWithParam<int> {};

TEST_P(QuantQ4_0x8GemvTest, ComputesThePlainKernelsBits) {
  const Level& level = kLevels[GetParam()];
  std::string missing;
  const CpuFeatures cpu = LevelFeatures(level, &missing);
  if (!missing.empty()) {
    GTEST_SKIP() << "this machine lacks " << missing << " for level "
                 << level.name;
  }
  EXPECT_EQ(GemvNameQ4_0x8(cpu), std::string("q4_0x8/") + level.name);
  const GemvFn x8 = SelectGemvQ4_0x8(cpu);
  const GemvFn plain = SelectGemv(Type::kQ4_0, CpuFeatures{});
  std::mt19937 rng(41 + GetParam());
  std::normal_distribution<float> normal;
  constexpr int64_t kRows = 24;
  for (const int64_t k : {32, 96, 32 * 33, 4096}) {
    const std::vector<uint8_t> w = RandomWeights(Type::kQ4_0, kRows, k, rng);
    std::vector<uint8_t> packed(w.size());
    RepackQ4_0x8(w.data(), kRows, k, packed.data());
    for (const int m : {1, 2, 3, 4, 5, 8, 13}) {
      std::vector<float> xf(m * k);
      for (float& v : xf) v = normal(rng);
      const int64_t x_row_bytes = RowBytes(Type::kQ8_0, k);
      std::vector<uint8_t> x(m * x_row_bytes);
      for (int r = 0; r < m; ++r) {
        quant::QuantizeActivation(Type::kQ8_0, &xf[r * k], k,
                                  &x[r * x_row_bytes]);
      }
      for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, kRows},
                                       {8, 16},
                                       {3, 13},
                                       {5, 6},
                                       {16, 24}}) {
        const int64_t ldy = kRows + 1;
        std::vector<float> got(m * ldy, NAN), want(m * ldy, NAN);
        GemvArgs a;
        a.k = k;
        a.w_row_bytes = RowBytes(Type::kQ4_0, k);
        a.row_begin = begin;
        a.row_end = end;
        a.x = x.data();
        a.x_row_bytes = x_row_bytes;
        a.m = m;
        a.ldy = ldy;
        a.w_rows = kRows;
        a.w = packed.data();
        a.y = got.data();
        x8(a);
        a.w = w.data();
        a.y = want.data();
        plain(a);
        for (int r = 0; r < m; ++r) {
          for (int64_t i = 0; i < ldy; ++i) {
            const float g = got[r * ldy + i];
            if (i < begin || i >= end) {
              ASSERT_TRUE(std::isnan(g)) << "wrote row " << i;
              continue;
            }
            ASSERT_EQ(std::bit_cast<uint32_t>(g),
                      std::bit_cast<uint32_t>(want[r * ldy + i]))
                << level.name << " k " << k << " m " << m << " rows [" << begin
                << ", " << end << ") row " << i << " act row " << r;
            const float ref = Q4_0Reference(&w[i * a.w_row_bytes],
                                            &x[r * x_row_bytes], k, true);
            ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(ref))
                << level.name << " k " << k << " m " << m << " row " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, QuantQ4_0x8GemvTest,
                         testing::Range(0,
                                        static_cast<int>(std::size(kLevels))),
                         [](const testing::TestParamInfo<int>& p) {
                           return std::string(kLevels[p.param].name);
                         });

}  // namespace
}  // namespace kvserve::quant
