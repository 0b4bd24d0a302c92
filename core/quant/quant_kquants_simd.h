// The K-quant SIMD kernels, written once and compiled once per ISA level:
// quant_kquants_x86.cc includes this file inside each level's namespace,
// under that level's `#pragma GCC target`, so there is deliberately no
// include guard and no #include here. Before including, the namespace
// defines the wide-vector layer:
//   VI                    integer vectors of kVecBytes bytes
//   kVecBytes             32 (AVX2) or 64 (AVX-512)
//   VI LoadVI(p)          kVecBytes unaligned bytes
//   VI Widen(v, n)        vector n of 256-bit vectors v[], kVecBytes / 32 each
//   VI ZeroI(), VI SplatI8(v)
//   __m256i Fold8(VI)     the 8 int32 lanes of ggml's block sums
//   VI DotAcc(acc, u, q, s)  acc + Σ pairs s·(u·q), int16 pairs of u8·s8
//   VI DotAccOff(acc, u, q, s, off)  the same of (u − off)·q
//   Dot8(acc, u, s)       256-bit: acc + Σ of 4 adjacent u8 × s8 per int32
//   kLaneWeightRows       weight rows per pass of the lane kernels (2 or 4)
// Blocks decode (to the form described in quant_kquants.h) with AVX2
// code, joined into wide vectors at the AVX-512 levels, except Q4_K and
// Q6_K, which AVX-512 decodes in 512-bit vectors directly.
//
// RowTile computes ggml's float order: the same bits as llama.cpp's x86
// kernels at every level, at any number of activation rows (a weight
// super-block is decoded once and reused for up to 8 of them). From
// GemvArgs::lane_min_rows rows on, Q4_K, Q5_K and Q6_K use the
// activation-lane kernels below instead (8 activation rows in the lanes of
// one dot; ~1.6x faster at m = 8), which cannot form ggml's
// per-element-lane sums (1-ulp differences).

// One super-block decoded into 256-bit vectors.
struct Decoded256 {
  __m256i u[8];   // unsigned quants of elements [32g, 32g + 32)
  __m256i sc[8];  // int16 multipliers of maddubs' 16 pair sums over group g:
                  // s[2g] in the low 128 bits, s[2g + 1] in the high
  __m256i b16;    // b[0, 16) as int16
  __m128 d;       // lanes 0, 1: d_main, d_bias
};

inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// pshufb indices that zero-extend byte `lo` into every int16 lane of the
// low 128 bits and byte `hi` into those of the high 128 bits.
inline __m256i WidenBytes(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x8000 | hi)),
                          _mm_set1_epi16(static_cast<int16_t>(0x8000 | lo)));
}
// pshufb indices copying int16 lane `lo` of the low 128 bits and lane `hi`
// of the high 128 bits into all lanes of their half.
inline __m256i CopyWords(int lo, int hi) {
  return _mm256_set_m128i(
      _mm_set1_epi16(static_cast<int16_t>((2 * hi + 1) << 8 | 2 * hi)),
      _mm_set1_epi16(static_cast<int16_t>((2 * lo + 1) << 8 | 2 * lo)));
}
// pshufb indices for Q4_K/Q5_K's b[j] = min j / 2, from bytes 8..15 of
// ScaleMinBytes (zero-extended).
inline __m256i MinsPattern() {
  return _mm256_or_si256(_mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
                                           13, 13, 14, 14, 15, 15),
                         _mm256_set1_epi16(static_cast<int16_t>(0x8000)));
}
inline __m256i Splat8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// fp16 scales: lane 0 from p, lane 1 from q.
inline __m128 Halves(const uint8_t* p, const uint8_t* q) {
  uint16_t lo, hi;
  std::memcpy(&lo, p, sizeof(lo));
  std::memcpy(&hi, q, sizeof(hi));
  return _mm_cvtph_ps(_mm_cvtsi32_si128(lo | hi << 16));
}
inline __m256i Srl16(__m256i v, int n) {
  return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n));
}
inline __m256i Sll16(__m256i v, int n) {
  return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n));
}
// Bits `shift` and up of every byte, masked by `mask`. The 16-bit shift
// moves bits across bytes; the mask removes them.
inline __m256i Bits(__m256i v, int shift, int mask) {
  return _mm256_and_si256(Srl16(v, shift), Splat8(mask));
}
// 2-bit fields of Q2_K/Q3_K qs: element 128h + 32j + l at bits 2j of
// byte 32h + l.
inline void Unpack2Bit(const uint8_t* qs, __m256i* u) {
  for (int h = 0; h < 2; ++h) {
    const __m256i q = Load256(qs + 32 * h);
    for (int j = 0; j < 4; ++j) u[4 * h + j] = Bits(q, 2 * j, 0x03);
  }
}
// Q4_K/Q5_K: the 12 scale bytes (get_scale_min_k4) to bytes 0..7 = scales
// 0..7, bytes 8..15 = mins 0..7. Scales/mins 0..3 are the low 6 bits of
// bytes 0..7; 4..7 take their low 4 bits from the nibbles of bytes 8..11
// and their top 2 bits from the top of bytes 0..7.
inline __m128i ScaleMinBytes(const uint8_t* q) {
  uint32_t q8_11;
  std::memcpy(&q8_11, q + 8, sizeof(q8_11));
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(q8_11));
  const __m128i low6 = _mm_and_si128(a, _mm_set1_epi8(0x3f));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi16(a, 2), _mm_set1_epi8(0x30));
  const __m128i nibbles = _mm_and_si128(
      _mm_unpacklo_epi32(b, _mm_srli_epi16(b, 4)), _mm_set1_epi8(0x0f));
  return _mm_unpacklo_epi32(low6, _mm_or_si128(nibbles, top2));
}

// Q4_K/Q5_K: a group's multiplier is its scale in every lane, one pshufb
// each from the scale bytes.
inline void ScaleMinK4(const uint8_t* q, Decoded256* o) {
  const __m256i v = _mm256_broadcastsi128_si256(ScaleMinBytes(q));
  for (int g = 0; g < 8; ++g) {
    o->sc[g] = _mm256_shuffle_epi8(v, WidenBytes(g, g));
  }
  o->b16 = _mm256_shuffle_epi8(v, MinsPattern());
}

// Per-16 scales s16 (int16) to the multipliers sc[8].
inline void ExpandScales(__m256i s16, __m256i* sc) {
  const __m256i lo = _mm256_permute2x128_si256(s16, s16, 0x00);
  const __m256i hi = _mm256_permute2x128_si256(s16, s16, 0x11);
  for (int k = 0; k < 4; ++k) {
    const __m256i pattern = CopyWords(2 * k, 2 * k + 1);
    sc[k] = _mm256_shuffle_epi8(lo, pattern);
    sc[k + 4] = _mm256_shuffle_epi8(hi, pattern);
  }
}

inline void DecodeQ2K(const uint8_t* p, Decoded256* o) {
  const auto* b = reinterpret_cast<const BlockQ2K*>(p);
  const __m128i sc =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  ExpandScales(_mm256_cvtepu8_epi16(_mm_and_si128(sc, m4)), o->sc);
  o->b16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
  Unpack2Bit(b->qs, o->u);
  o->d = Halves(p + offsetof(BlockQ2K, d), p + offsetof(BlockQ2K, dmin));
}

inline void DecodeQ3K(const uint8_t* p, Decoded256* o) {
  const auto* b = reinterpret_cast<const BlockQ3K*>(p);
  // Scale j's low nibble: byte j % 8, nibble j / 8; top bits: byte
  // 8 + j % 4, bits 2·(j / 4).
  uint32_t a[3];
  std::memcpy(a, b->scales, sizeof(a));
  constexpr uint32_t k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const __m128i sc = _mm_setr_epi32(
      static_cast<int>((a[0] & k4) | (a[2] & k2) << 4),
      static_cast<int>((a[1] & k4) | ((a[2] >> 2) & k2) << 4),
      static_cast<int>(((a[0] >> 4) & k4) | ((a[2] >> 4) & k2) << 4),
      static_cast<int>(((a[1] >> 4) & k4) | ((a[2] >> 6) & k2) << 4));
  const __m256i s16 =
      _mm256_sub_epi16(_mm256_cvtepu8_epi16(sc), _mm256_set1_epi16(32));
  ExpandScales(s16, o->sc);
  o->b16 = _mm256_slli_epi16(s16, 2);
  Unpack2Bit(b->qs, o->u);
  // The third bit of element 32g + l is bit g of hmask[l].
  const __m256i hm = Load256(b->hmask);
  for (int g = 0; g < 8; ++g) {
    o->u[g] = _mm256_or_si256(o->u[g], _mm256_slli_epi16(Bits(hm, g, 0x01), 2));
  }
  o->d = Halves(p + offsetof(BlockQ3K, d), p + offsetof(BlockQ3K, d));
}

template <bool kFifthBit>
inline void DecodeScaleMin(const uint8_t* p, Decoded256* o) {
  // Q4_K and Q5_K share d, dmin and scales; Q5_K has qh before qs.
  constexpr int kQs =
      kFifthBit ? offsetof(BlockQ5K, qs) : offsetof(BlockQ4K, qs);
  ScaleMinK4(p + offsetof(BlockQ4K, scales), o);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load256(p + kQs + 32 * c);
    o->u[2 * c] = Bits(q, 0, 0x0f);
    o->u[2 * c + 1] = Bits(q, 4, 0x0f);
  }
  if constexpr (kFifthBit) {
    const __m256i qh = Load256(p + offsetof(BlockQ5K, qh));
    for (int g = 0; g < 8; ++g) {
      o->u[g] =
          _mm256_or_si256(o->u[g], _mm256_slli_epi16(Bits(qh, g, 0x01), 4));
    }
  }
  o->d = Halves(p + offsetof(BlockQ4K, d), p + offsetof(BlockQ4K, dmin));
}

inline void DecodeQ6K(const uint8_t* p, Decoded256* o) {
  const auto* b = reinterpret_cast<const BlockQ6K*>(p);
  const __m256i m4 = Splat8(0x0f), m30 = Splat8(0x30);
  for (int h = 0; h < 2; ++h) {
    // Element 128h + 32j + l: nibble j / 2 of ql[64h + 32(j % 2) + l],
    // bits 2j of qh[32h + l] as bits 4..5.
    const __m256i l0 = Load256(b->ql + 64 * h),
                  l1 = Load256(b->ql + 64 * h + 32);
    const __m256i qh = Load256(b->qh + 32 * h);
    for (int j = 0; j < 4; ++j) {
      const __m256i low =
          _mm256_and_si256(Srl16(j % 2 ? l1 : l0, 4 * (j / 2)), m4);
      const __m256i high = _mm256_and_si256(
          j < 2 ? Sll16(qh, 4 - 2 * j) : Srl16(qh, 2 * j - 4), m30);
      o->u[4 * h + j] = _mm256_or_si256(low, high);
    }
  }
  const __m256i s16 = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
  ExpandScales(s16, o->sc);
  o->b16 = _mm256_slli_epi16(s16, 5);
  o->d = Halves(p + offsetof(BlockQ6K, d), p + offsetof(BlockQ6K, d));
}

inline float Reduce256(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int kVecs = kQK / kVecBytes;  // wide vectors per super-block

// One super-block as the dot products read it: Decoded256 in wide vectors.
struct Decoded {
  VI u[kVecs];
  VI sc[kVecs];
  __m256i b16;
  __m128 d;
};

template <void (*kDecode)(const uint8_t*, Decoded256*)>
inline void Widened(const uint8_t* p, Decoded* o) {
  Decoded256 d;
  kDecode(p, &d);
  for (int n = 0; n < kVecs; ++n) {
    o->u[n] = Widen(d.u, n);
    o->sc[n] = Widen(d.sc, n);
  }
  o->b16 = d.b16;
  o->d = d.d;
}

// AVX-512 decoders for the Q4_K_M mix, built in 512-bit vectors directly
// (about half the instructions of Widened: no 256-bit halves to join).
// Vector n holds groups 2n, 2n + 1 (elements [64n, 64n + 64)).
//
// D is always Decoded: a template parameter only so that the bodies are
// dependent code. Clang checks a template's non-dependent code where it is
// defined, and these bodies (never instantiated there) do not type-check in
// the 256-bit namespaces, where VI is __m256i (the clang fuzz build).
template <int kW, typename D = Decoded>
inline void DecodeQ4KWide(const uint8_t* p, D* o) {
  static_assert(kW == 64);
  const __m128i v = ScaleMinBytes(p + offsetof(BlockQ4K, scales));
  const __m512i v4 = _mm512_broadcast_i32x4(v);
  // Both groups of vector n come from qs[32n, 32n + 32): low nibbles in
  // the low half, high nibbles in the high half.
  const __m512i shifts =
      _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int n = 0; n < 4; ++n) {
    const __m512i q =
        _mm512_broadcast_i64x4(Load256(p + offsetof(BlockQ4K, qs) + 32 * n));
    o->u[n] = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), m4);
    // Scale 2n zero-extended in the low half's lanes, 2n + 1 in the high.
    const __m512i pattern = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (2 * n)))),
        _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (2 * n + 1))), 1);
    o->sc[n] = _mm512_shuffle_epi8(v4, pattern);
  }
  o->b16 = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(v), MinsPattern());
  o->d = Halves(p + offsetof(BlockQ4K, d), p + offsetof(BlockQ4K, dmin));
}

template <int kW, typename D = Decoded>  // D: see DecodeQ4KWide
inline void DecodeQ6KWide(const uint8_t* p, D* o) {
  static_assert(kW == 64);
  const auto* b = reinterpret_cast<const BlockQ6K*>(p);
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  // Per-half shifts moving qh's bits 2j to bits 4..5: j = 0, 1 left by
  // 4, 2; j = 2, 3 right by 0, 2.
  const __m512i left = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
  const __m512i right =
      _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  for (int h = 0; h < 2; ++h) {
    // Groups 4h + j: j = 0, 1 the low nibbles of ql[64h, 64h + 64) (in
    // order), j = 2, 3 the high nibbles.
    const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(Load256(b->qh + 32 * h));
    o->u[2 * h] =
        _mm512_or_si512(_mm512_and_si512(ql, m4),
                        _mm512_and_si512(_mm512_sllv_epi16(qh, left), m30));
    o->u[2 * h + 1] =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                        _mm512_and_si512(_mm512_srlv_epi16(qh, right), m30));
  }
  const __m256i s16 = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
  // Vector n covers sub-blocks 4n .. 4n + 3, one per 128-bit lane.
  const __m512i s = _mm512_castsi256_si512(s16);
  for (int n = 0; n < 4; ++n) {
    const __m512i index = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * n + 1)),
                             _mm_set1_epi16(static_cast<int16_t>(4 * n)))),
        _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * n + 3)),
                         _mm_set1_epi16(static_cast<int16_t>(4 * n + 2))),
        1);
    o->sc[n] = _mm512_permutexvar_epi16(index, s);
  }
  o->b16 = _mm256_slli_epi16(s16, 5);
  o->d = Halves(p + offsetof(BlockQ6K, d), p + offsetof(BlockQ6K, d));
}

// ggml's float order (what llama.cpp's x86 CPU backend computes, bit for
// bit; every level here computes the same bits). A super-block's integer
// dot is formed in 8 int32 lanes, lane j holding the scaled products of
// elements with e % 32 in [4j, 4j + 4), Q3_K's and Q6_K's offsets (4, 32)
// included per lane; then with d = x.d·d_w and dmin = −x.d·dmin_w:
//   q2_K  acc = fma(dmin, Σmins·bsums (8 lanes), acc), then fma(d, lanes, acc)
//   q4_K  acc = fma(d, lanes, acc); acc_m = fma(dmin, Σmins·bsums (4 lanes),
//         acc_m); + the 4 lanes of acc_m summed (a0 + a2) + (a1 + a3)
//   q5_K  acc = fma(d, lanes, acc); summs = fma(dmin, ΣΣmins·bsums, summs)
//   q3_K, q6_K  acc = fma(d, lanes, acc)
// and the output is hsum_float_8(acc) (+ the min terms).
constexpr int KindOf(int block_bytes) {
  return block_bytes == sizeof(BlockQ2K)   ? 2
         : block_bytes == sizeof(BlockQ3K) ? 3
         : block_bytes == sizeof(BlockQ4K) ? 4
         : block_bytes == sizeof(BlockQ5K) ? 5
                                           : 6;
}

inline float FmaSS(float a, float b, float c) {
  return _mm_cvtss_f32(
      _mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// Weight row i against activation rows [r0, r0 + kT): each super-block is
// decoded once into registers and reused for the kT rows, whose
// accumulators are independent (one horizontal reduction per output).
template <void (*kDecode)(const uint8_t*, Decoded*), int kBlockBytes, int kT>
void RowTile(const GemvArgs& a, int64_t i, int r0) {
  constexpr int kKind = KindOf(kBlockBytes);
  constexpr int kOff = kKind == 3 ? 4 : kKind == 6 ? 32 : 0;
  const auto* w = static_cast<const uint8_t*>(a.w) + i * a.w_row_bytes;
  const auto* x = static_cast<const uint8_t*>(a.x) + r0 * a.x_row_bytes;
  const int64_t xs = a.x_row_bytes;
  const int64_t nb = a.k / kQK;
  __m256 acc[kT];
  __m128 acc_m[kT];
  float summs[kT];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_m[t] = _mm_setzero_ps();
    summs[t] = 0.0f;
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    const uint8_t* wb = w + ib * kBlockBytes;
    Decoded dec;
    kDecode(wb, &dec);
    const float dw = _mm_cvtss_f32(dec.d);
    const float dmw = _mm_cvtss_f32(_mm_movehdup_ps(dec.d));
    const uint8_t* xb0 = x + ib * int64_t{sizeof(BlockQ8K)};
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const uint8_t* xb = xb0 + t * xs;
      const uint8_t* xq = xb + offsetof(BlockQ8K, qs);
      float xd;
      std::memcpy(&xd, xb + offsetof(BlockQ8K, d), sizeof(xd));
      VI isum = ZeroI();
#pragma GCC unroll 8
      for (int n = 0; n < kVecs; ++n) {
        if constexpr (kOff != 0) {
          isum = DotAccOff(isum, dec.u[n], LoadVI(xq + n * kVecBytes),
                           dec.sc[n], SplatI8(kOff));
        } else {
          isum = DotAcc(isum, dec.u[n], LoadVI(xq + n * kVecBytes), dec.sc[n]);
        }
      }
      if constexpr (kKind == 2 || kKind == 4 || kKind == 5) {
        const __m256i mins =
            _mm256_madd_epi16(dec.b16, Load256(xb + offsetof(BlockQ8K, bsums)));
        const float dmin = -xd * dmw;
        if constexpr (kKind == 2) {
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dmin),
                                   _mm256_cvtepi32_ps(mins), acc[t]);
        } else if constexpr (kKind == 4) {
          const __m128i m4 = _mm_hadd_epi32(_mm256_castsi256_si128(mins),
                                            _mm256_extracti128_si256(mins, 1));
          acc_m[t] =
              _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(m4), acc_m[t]);
        } else {
          __m128i s = _mm_add_epi32(_mm256_castsi256_si128(mins),
                                    _mm256_extracti128_si256(mins, 1));
          s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
          summs[t] =
              FmaSS(dmin, static_cast<float>(_mm_cvtsi128_si32(s)), summs[t]);
        }
      }
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * dw),
                               _mm256_cvtepi32_ps(Fold8(isum)), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
    float y = Reduce256(acc[t]);
    if constexpr (kKind == 4) {
      __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
      m = _mm_add_ss(m, _mm_movehdup_ps(m));
      y += _mm_cvtss_f32(m);
    } else if constexpr (kKind == 5) {
      y += summs[t];
    }
    a.y[(r0 + t) * a.ldy + i] = y;
  }
}

// --- Activation-lane kernels (m >= kLaneMinRows): Q4_K and Q6_K. ---
//
// A tile of up to kLanes activation rows is repacked once per call so that
// 256-bit lane t holds activation row t: four quants of each row side by
// side per 4-element group. A weight block is decoded once (quants to a
// small buffer, scales to floats) and each group of 4 weight quants is
// broadcast into all lanes, so one 8-lane dot step serves every row with no
// horizontal reductions (the lanes are the outputs).
constexpr int kLanes = 8;

// Per tile and block: q [64][kLanes] int32 (quants 4g..4g+3 of row t at
// [g][t]), d [kLanes] (x.d), b [16][kLanes] (Q4_K: float Σx over the 32
// elements 32g.. at [g < 8]; Q6_K: int32 −32·bsums[j]).
struct LaneTileLayout {
  static constexpr int kQ = 64 * kLanes, kD = kLanes, kB = 16 * kLanes;
  static constexpr int kBlockWords = kQ + kD + kB;
};

template <int kKind>
void PackLaneTile(const GemvArgs& a, int r0, int rows, int64_t nb,
                  int32_t* out) {
  constexpr bool kIsQ6 = kKind == 6;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t* q = out + ib * LaneTileLayout::kBlockWords;
    float* d = reinterpret_cast<float*>(q + LaneTileLayout::kQ);
    int32_t* b = q + LaneTileLayout::kQ + LaneTileLayout::kD;
    for (int t = 0; t < kLanes; ++t) {
      if (t >= rows) {
        for (int g = 0; g < 64; ++g) q[g * kLanes + t] = 0;
        d[t] = 0.0f;
        for (int j = 0; j < 16; ++j) b[j * kLanes + t] = 0;
        continue;
      }
      const auto* xb =
          reinterpret_cast<const BlockQ8K*>(static_cast<const uint8_t*>(a.x) +
                                            (r0 + t) * a.x_row_bytes) +
          ib;
      for (int g = 0; g < 64; ++g) {
        int32_t v;
        std::memcpy(&v, xb->qs + 4 * g, sizeof(v));
        q[g * kLanes + t] = v;
      }
      d[t] = xb->d;
      if constexpr (kIsQ6) {
        for (int j = 0; j < 16; ++j) b[j * kLanes + t] = -32 * xb->bsums[j];
      } else {
        for (int g = 0; g < 8; ++g) {
          const float sum =
              static_cast<float>(xb->bsums[2 * g] + xb->bsums[2 * g + 1]);
          std::memcpy(&b[g * kLanes + t], &sum, sizeof(sum));
        }
      }
    }
  }
}

inline __m256i Bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}
inline __m256i LoadLane(const int32_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// One weight block decoded for the lane kernel: quants in element order
// (Q6_K: + 32), main scales · d (per 16 elements for Q6_K, 32 for Q4_K),
// Q4_K's mins · dmin.
struct LaneBlock {
  alignas(32) uint8_t u[kQK];
  alignas(32) float sd[16];
  alignas(32) float md[8];
};

template <int kKind>
__attribute__((always_inline)) inline void DecodeLane(const uint8_t* p,
                                                      LaneBlock* o) {
  constexpr bool kIsQ6 = kKind == 6;
  if constexpr (kIsQ6) {
    const auto* b = reinterpret_cast<const BlockQ6K*>(p);
    const __m256i m4 = Splat8(0x0f), m30 = Splat8(0x30);
    for (int h = 0; h < 2; ++h) {
      // As DecodeQ6K: element 128h + 32j + l.
      const __m256i l0 = Load256(b->ql + 64 * h),
                    l1 = Load256(b->ql + 64 * h + 32);
      const __m256i qh = Load256(b->qh + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i low =
            _mm256_and_si256(Srl16(j % 2 ? l1 : l0, 4 * (j / 2)), m4);
        const __m256i high = _mm256_and_si256(
            j < 2 ? Sll16(qh, 4 - 2 * j) : Srl16(qh, 2 * j - 4), m30);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o->u + 128 * h + 32 * j),
                           _mm256_or_si256(low, high));
      }
    }
    const __m128i s8 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
    const __m256 dm = _mm256_set1_ps(_cvtsh_ss(b->d));
    _mm256_store_ps(
        o->sd, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8))));
    _mm256_store_ps(o->sd + 8,
                    _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                          _mm_srli_si128(s8, 8)))));
  } else {
    // Q4_K and Q5_K share d, dmin and scales; Q5_K has qh before qs.
    constexpr int kQs =
        kKind == 5 ? offsetof(BlockQ5K, qs) : offsetof(BlockQ4K, qs);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load256(p + kQs + 32 * c);
      __m256i lo = Bits(q, 0, 0x0f), hi = Bits(q, 4, 0x0f);
      if constexpr (kKind == 5) {
        // The fifth bit of element 32g + l is bit g of qh[l].
        const __m256i qh = Load256(p + offsetof(BlockQ5K, qh));
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(Bits(qh, 2 * c, 0x01), 4));
        hi = _mm256_or_si256(hi,
                             _mm256_slli_epi16(Bits(qh, 2 * c + 1, 0x01), 4));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(o->u + 64 * c), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o->u + 64 * c + 32), hi);
    }
    const __m128 d =
        Halves(p + offsetof(BlockQ4K, d), p + offsetof(BlockQ4K, dmin));
    const __m128i sm = ScaleMinBytes(p + offsetof(BlockQ4K, scales));
    _mm256_store_ps(
        o->sd, _mm256_mul_ps(_mm256_broadcastss_ps(d),
                             _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm))));
    _mm256_store_ps(
        o->md, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(d)),
                             _mm256_cvtepi32_ps(
                                 _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)))));
  }
}

// kWR weight rows w[r] (nb blocks each) against one packed tile:
// out[r * kLanes + t]. Each 32-byte group of activations is loaded once for
// the kWR rows; each group of 4 weight quants is one broadcast load.
template <int kKind, int kWR>
void LaneRows(const uint8_t* const* w, int64_t nb, const int32_t* tile,
              float* out) {
  constexpr bool kIsQ6 = kKind == 6;
  constexpr int kBlockBytes = kKind == 6   ? sizeof(BlockQ6K)
                              : kKind == 5 ? sizeof(BlockQ5K)
                                           : sizeof(BlockQ4K);
  // Groups sharing one scale, and their 4-element steps.
  constexpr int kGroups = kIsQ6 ? 16 : 8, kSteps = 64 / kGroups;
  __m256 acc[kWR];
#pragma GCC unroll 4
  for (int r = 0; r < kWR; ++r) acc[r] = _mm256_setzero_ps();
  // Q6_K: block ib + 1 is decoded while block ib is used, so that the
  // broadcasts read stores that have left the store queue (measured
  // faster for Q6_K, slower for Q4_K).
  constexpr bool kAhead = kIsQ6;
  LaneBlock buf[kAhead ? 2 : 1][kWR];
  if constexpr (kAhead) {
#pragma GCC unroll 4
    for (int r = 0; r < kWR; ++r) DecodeLane<kKind>(w[r], &buf[0][r]);
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    if (!kAhead || ib + 1 < nb) {
      const int64_t next = kAhead ? ib + 1 : ib;
#pragma GCC unroll 4
      for (int r = 0; r < kWR; ++r) {
        // Prefetch (kWR streams are more than the hardware prefetchers
        // keep ahead of): measured faster for Q6_K, and for Q4_K/Q5_K at
        // 2 rows per pass, slower for them at 4.
        if constexpr (kIsQ6 || kLaneWeightRows <= 2) {
          for (int off = 0; off < kBlockBytes; off += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(w[r]) +
                             (next + 8) * kBlockBytes + off,
                         _MM_HINT_T0);
          }
        }
        DecodeLane<kKind>(w[r] + next * kBlockBytes,
                          &buf[kAhead ? next & 1 : 0][r]);
      }
    }
    // Broadcast the quants from memory (a load each) rather than let the
    // compiler extract them from registers (two shuffles each).
    asm volatile("" ::: "memory");
    const LaneBlock* lb = buf[kAhead ? ib & 1 : 0];
    const int32_t* q = tile + ib * LaneTileLayout::kBlockWords;
    const float* xd = reinterpret_cast<const float*>(q + LaneTileLayout::kQ);
    const int32_t* xb = q + LaneTileLayout::kQ + LaneTileLayout::kD;
    __m256 part[kWR];
#pragma GCC unroll 4
    for (int r = 0; r < kWR; ++r) part[r] = _mm256_setzero_ps();
#pragma GCC unroll 1
    for (int g = 0; g < kGroups; ++g) {
      __m256i xq[kSteps];
#pragma GCC unroll 8
      for (int e = 0; e < kSteps; ++e) {
        xq[e] = LoadLane(q + (kSteps * g + e) * kLanes);
      }
#pragma GCC unroll 4
      for (int r = 0; r < kWR; ++r) {
        const uint8_t* u = lb[r].u + 4 * kSteps * g;
        __m256i dot =
            kIsQ6 ? LoadLane(xb + g * kLanes) : _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int e = 0; e < kSteps; ++e) {
          dot = Dot8(dot, Bcast32(u + 4 * e), xq[e]);
        }
        part[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                  _mm256_broadcast_ss(lb[r].sd + g), part[r]);
        if constexpr (!kIsQ6) {
          part[r] = _mm256_fnmadd_ps(
              _mm256_load_ps(reinterpret_cast<const float*>(xb + g * kLanes)),
              _mm256_broadcast_ss(lb[r].md + g), part[r]);
        }
      }
    }
    const __m256 d = _mm256_load_ps(xd);
#pragma GCC unroll 4
    for (int r = 0; r < kWR; ++r) acc[r] = _mm256_fmadd_ps(part[r], d, acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < kWR; ++r) _mm256_storeu_ps(out + r * kLanes, acc[r]);
}

template <int kKind>
void LaneGemv(const GemvArgs& a) {
  const int64_t nb = a.k / kQK;
  const int tiles = (a.m + kLanes - 1) / kLanes;
  const int64_t tile_words = nb * LaneTileLayout::kBlockWords;
  thread_local std::vector<int32_t> packed;
  packed.resize(tiles * tile_words + 8);
  // 32-byte aligned base.
  int32_t* base = packed.data();
  base += (8 - (reinterpret_cast<uintptr_t>(base) / 4) % 8) % 8;
  for (int tt = 0; tt < tiles; ++tt) {
    const int r0 = tt * kLanes;
    PackLaneTile<kKind>(a, r0, std::min(kLanes, a.m - r0), nb,
                        base + tt * tile_words);
  }
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  for (int64_t i = a.row_begin; i < a.row_end;) {
    const int wr =
        static_cast<int>(std::min<int64_t>(kLaneWeightRows, a.row_end - i));
    const uint8_t* rows[kLaneWeightRows];
    for (int r = 0; r < wr; ++r) rows[r] = w + (i + r) * a.w_row_bytes;
    for (int tt = 0; tt < tiles; ++tt) {
      const int r0 = tt * kLanes;
      const int m = std::min(kLanes, a.m - r0);
      float out[kLaneWeightRows * kLanes];
      const int32_t* tile = base + tt * tile_words;
      if (wr == kLaneWeightRows) {
        LaneRows<kKind, kLaneWeightRows>(rows, nb, tile, out);
      } else if (kLaneWeightRows > 2 && wr >= 2) {
        LaneRows<kKind, 2>(rows, nb, tile, out);
      } else {
        LaneRows<kKind, 1>(rows, nb, tile, out);
      }
      const int done = wr == kLaneWeightRows ? wr : wr >= 2 ? 2 : 1;
      for (int r = 0; r < done; ++r) {
        for (int t = 0; t < m; ++t) {
          a.y[(r0 + t) * a.ldy + i + r] = out[r * kLanes + t];
        }
      }
      if (tt == tiles - 1) i += done;
    }
  }
}

// Rows outer, activations inner in tiles of up to 8: a weight row is
// read from memory once, and from L1 for the later tiles.
template <void (*kDecode)(const uint8_t*, Decoded*), int kBlockBytes>
void Gemv(const GemvArgs& a) {
  if constexpr (kBlockBytes == sizeof(BlockQ4K) ||
                kBlockBytes == sizeof(BlockQ5K) ||
                kBlockBytes == sizeof(BlockQ6K)) {
    // Q6_K rows of fewer than 8 blocks measured faster in RowTile (k =
    // 1024: 164 vs 210 us for 2816 rows at m = 8).
    if (a.m >= a.lane_min_rows &&
        (kBlockBytes != sizeof(BlockQ6K) || a.k >= 8 * kQK)) {
      LaneGemv<kBlockBytes == sizeof(BlockQ6K)   ? 6
               : kBlockBytes == sizeof(BlockQ5K) ? 5
                                                 : 4>(a);
      return;
    }
  }
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    for (int r = 0; r < a.m;) {
      const int left = a.m - r;
      switch (std::min(8, left)) {
        case 1:
          RowTile<kDecode, kBlockBytes, 1>(a, i, r);
          break;
        case 2:
          RowTile<kDecode, kBlockBytes, 2>(a, i, r);
          break;
        case 3:
          RowTile<kDecode, kBlockBytes, 3>(a, i, r);
          break;
        case 4:
          RowTile<kDecode, kBlockBytes, 4>(a, i, r);
          break;
        case 5:
          RowTile<kDecode, kBlockBytes, 5>(a, i, r);
          break;
        case 6:
          RowTile<kDecode, kBlockBytes, 6>(a, i, r);
          break;
        case 7:
          RowTile<kDecode, kBlockBytes, 7>(a, i, r);
          break;
        default:
          RowTile<kDecode, kBlockBytes, 8>(a, i, r);
          break;
      }
      r += std::min(8, left);
    }
  }
}

// The kernel table; AVX-512 decodes Q4_K and Q6_K natively.
template <int kW = kVecBytes>
constexpr GemvSet MakeGemvSet() {
  GemvSet set = {{
      &Gemv<&Widened<&DecodeQ2K>, sizeof(BlockQ2K)>,
      &Gemv<&Widened<&DecodeQ3K>, sizeof(BlockQ3K)>,
      &Gemv<&Widened<&DecodeScaleMin<false>>, sizeof(BlockQ4K)>,
      &Gemv<&Widened<&DecodeScaleMin<true>>, sizeof(BlockQ5K)>,
      &Gemv<&Widened<&DecodeQ6K>, sizeof(BlockQ6K)>,
  }};
  if constexpr (kW == 64) {
    set.fn[kQ4] = &Gemv<&DecodeQ4KWide<kW>, sizeof(BlockQ4K)>;
    set.fn[kQ6] = &Gemv<&DecodeQ6KWide<kW>, sizeof(BlockQ6K)>;
  }
  return set;
}
const GemvSet kGemv = MakeGemvSet();
