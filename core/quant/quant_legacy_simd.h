// The SIMD Gemv kernels of the legacy types, written once over a vector
// vocabulary that quant_legacy_x86.cc defines per ISA namespace before
// including this file (no include guard: it is included once per ISA, each
// time inside its own namespace and #pragma GCC target region):
//
//   kB          weight blocks per integer dot (1 for 256-bit, 2 for 512-bit)
//   kW          f32 lanes of VF
//   kMaxTile    activation rows a weight block is reused for (4 or 8)
//   VI, VF      integer and f32 vectors
//   JoinW(lo, hi)   kB blocks' 32-byte quants into one VI
//   Abs8(w), SignOf(x, w)   |w| and x·sign(w), per int8 lane
//   kVnni       whether DotU8S8 is VNNI's (non-saturating) dpbusd
//   DotU8S8(init, u, s)   per int32 lane: init + Σ of 4 adjacent u8 × s8
//   ZeroI(), LoadCorrections(p)   kB blocks' per-lane offset corrections
//   LowHalf(f), HighHalf(f)   a VF's block 0 and block 1 lanes
//   ToF, ZeroF, Add, Fma, ReduceAdd, LoadF32, LoadF16, LoadBf16
//
//   LaneDot8(acc, u, s)   256-bit: acc + Σ of 4 adjacent u8 × s8 per int32
//   kLaneWeightRows   weight rows per pass of the lane kernels (2 or 4)
//
// The block types compute ggml's float order, the same bits at every level
// (see "ggml's float order" below). The lane kernels (LaneGemv: activation
// rows in the lanes of 256-bit dots, weight quants broadcast) compute one
// f32 chain per output: q4_0's sequential order, used from kLaneMinRows
// rows; for q8_0, q5_0, iq4_nl and q4_0's lanes order not ggml's, so they
// take over only from GemvArgs::lane_min_rows rows (prompts and batches:
// DotRows there takes 2-2.6x their time).
//
// Each weight row is read once per call: the kernels walk weight rows
// outermost and reuse each decoded block for up to kMaxTile activation rows
// (the row stays in L1 for the next tile).

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// Software prefetch distance along a weight row (the rows are one stream;
// the hardware prefetchers alone leave a thread short of its share).
constexpr int kPrefetchBytes = 1024;
inline void PrefetchAhead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// --- One block's 32 quants as int8 lanes, element order (256-bit). ---

// 16 bytes of nibbles: the low nibbles are elements 0..15, the high ones
// 16..31 (the bytes in both 128-bit lanes, the upper lane shifted by 4).
inline __m256i Nibbles(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)),
                          _mm256_set1_epi8(0x0f));
}

// 0xff in byte j where bit j of the little-endian u32 at qh is set.
inline __m256i HighBitMask(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof(h));
  // Byte j gets byte j / 8 of h (the u32 is in both 128-bit lanes), then
  // keeps only bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                       2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Weight types: their blocks, the activation blocks they pair with, and
// how a block's dot product is formed from an int8 dot of 32 lanes:
//   kSigned   signed quants w: the sign trick (|w| in the unsigned operand,
//             x·sign(w) in the signed one);
//   kOffset   unsigned quants q = w + kOffset: Σwx = Σqx − kOffset·Σx, the
//             second term made once per call per activation block and
//             loaded as the dot's initial value (no per-block sign work);
//   kMin      unsigned quants with x = d·q + m: + m_w·s_x per block.
// With VNNI (dpbusd does not saturate) the signed types use offset 128
// too; maddubs would saturate on q·x pairs above 32767, so without VNNI
// they keep the sign trick.
struct Q8_0W {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr bool kSigned = !kVnni, kMin = false;
  static constexpr int kOffset = kVnni ? 128 : 0;
  static __m256i Decode(const WB& b) {
    const __m256i q =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    if constexpr (kVnni) {
      return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
    } else {
      return q;
    }
  }
};
struct Q4_0W {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 8;
  static __m256i Decode(const WB& b) { return Nibbles(b.qs); }
};
struct Q4_1W {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  static __m256i Decode(const WB& b) { return Nibbles(b.qs); }
};
// The 5-bit quants (0..31) of a q5 block.
inline __m256i Q5Quants(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(
      Nibbles(qs), _mm256_and_si256(HighBitMask(qh), _mm256_set1_epi8(0x10)));
}
struct Q5_0W {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 16;
  static __m256i Decode(const WB& b) { return Q5Quants(b.qs, b.qh); }
};
struct Q5_1W {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  static __m256i Decode(const WB& b) { return Q5Quants(b.qs, b.qh); }
};
struct Iq4NlW {
  using WB = BlockIq4Nl;
  using XB = BlockQ8_0;
  static constexpr bool kSigned = !kVnni, kMin = false;
  static constexpr int kOffset = kVnni ? 128 : 0;
  static __m256i Decode(const WB& b) {
    // kIq4NlValues, + 128 with VNNI (all fit in a u8).
    alignas(16) static constexpr uint8_t kLevels[16] = {
        1,   24,  45,  63,  79,  93,  106, 118,
        129, 141, 153, 166, 181, 197, 217, 241};
    const __m128i levels =
        kVnni ? _mm_load_si128(reinterpret_cast<const __m128i*>(kLevels))
              : _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(levels),
                               Nibbles(b.qs));
  }
};

template <typename XB>
inline __m256i LoadQs(const XB& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}

// --- ggml's float order (every level computes the same bits). ---
//
// A block's int8 dot is formed in 8 int32 lanes, lane j holding the
// products of elements 4j..4j+3 (the offset types' −kOffset·Σx is split
// the same way, per lane). ggml's x86 kernels (the same at AVX2 and
// AVX-512) then sum the blocks in one of two orders, followed here exactly
// so that a model computes what llama.cpp computes on the same file:
//   lanes       f32 lanes acc_j = fma(d_w·d_x, lane_j, acc_j), block after
//               block, then hsum_float_8 (+ the min terms' fma chain of the
//               q4_1/q5_1 types): ggml_vec_dot_* and llamafile's tinyBLAS
//               (prompts); iq4_nl with one activation row keeps even and
//               odd blocks in two accumulators, added before the hsum, and
//               an odd last block after it;
//   sequential  one f32 per output, y = fma((float)Σ lanes, d_w·d_x, y):
//               q4_0 in matrices of a multiple of 8 rows, which ggml
//               repacks 8 rows interleaved (ggml_gemv/gemm_q4_0_8x8_q8_0).

// hsum_float_8's order: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
inline float Hsum8(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float FmaF(float a, float b, float c) {
  return _mm_cvtss_f32(
      _mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
inline int32_t HsumI8(__m256i v) {
  __m128i s =
      _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// One weight block's quants in the dot's unsigned operand (|w| with the
// sign trick), and the activation quants in its signed one.
template <typename T>
inline __m256i UnsignedW(__m256i wq) {
  if constexpr (T::kSigned) return _mm256_sign_epi8(wq, wq);
  return wq;
}
template <typename T>
inline __m256i SignedX(__m256i xq, __m256i wq) {
  if constexpr (T::kSigned) return _mm256_sign_epi8(xq, wq);
  return xq;
}

// Per-call f32/int forms of the activations' block fields: d and s
// [m][nb], the offset types' per-lane −kOffset·Σq [m][nb][8].
struct ActFields {
  const float* d;
  const float* s;
  const int32_t* c;
};

// One weight row against R activation rows in the lanes order.
template <typename T, int R>
struct RowTile {
  const typename T::WB* w;
  const typename T::XB* x[R];
  const float* xd[R];
  const float* xs[R];
  const int32_t* xc[R];
};

template <typename T, int R>
inline void LanesStep(const RowTile<T, R>& t, int64_t b, __m256* acc,
                      float* mins) {
  PrefetchAhead(t.w + b);
  const __m256i wq = T::Decode(t.w[b]);
  const __m256i wu = UnsignedW<T>(wq);
  const float dw = Half(t.w[b].d);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256i init = _mm256_setzero_si256();
    if constexpr (T::kOffset != 0) {
      init =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.xc[r] + 8 * b));
    }
    const __m256i dot = LaneDot8(init, wu, SignedX<T>(LoadQs(t.x[r][b]), wq));
    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * t.xd[r][b]),
                             _mm256_cvtepi32_ps(dot), acc[r]);
    if constexpr (T::kMin) {
      mins[r] = FmaF(Half(t.w[b].m), t.xs[r][b], mins[r]);
    }
  }
}

// Blocks b and b + 1 at the 512-bit levels (kB == 2): one 512-bit integer
// dot for both, then their lanes added to the 8-lane accumulators one
// block after the other (block b + 1 to acc1 in the two-accumulator form).
template <typename T, int R>
inline void LanesStep2(const RowTile<T, R>& t, int64_t b, __m256* acc0,
                       __m256* acc1, float* mins) {
  PrefetchAhead(t.w + b);
  const VI wq = JoinW(T::Decode(t.w[b]), T::Decode(t.w[b + 1]));
  VI wu = wq;
  if constexpr (T::kSigned) wu = Abs8(wq);
  const float dw0 = Half(t.w[b].d), dw1 = Half(t.w[b + 1].d);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    VI xq = JoinW(LoadQs(t.x[r][b]), LoadQs(t.x[r][b + 1]));
    if constexpr (T::kSigned) xq = SignOf(xq, wq);
    VI init = ZeroI();
    if constexpr (T::kOffset != 0) init = LoadCorrections(t.xc[r] + 8 * b);
    const VF f = ToF(DotU8S8(init, wu, xq));
    acc0[r] =
        _mm256_fmadd_ps(_mm256_set1_ps(dw0 * t.xd[r][b]), LowHalf(f), acc0[r]);
    acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * t.xd[r][b + 1]), HighHalf(f),
                              acc1[r]);
    if constexpr (T::kMin) {
      mins[r] = FmaF(Half(t.w[b].m), t.xs[r][b], mins[r]);
      mins[r] = FmaF(Half(t.w[b + 1].m), t.xs[r][b + 1], mins[r]);
    }
  }
}

// out[r] = dot(weight row, activation row r) over nb blocks; kPairs: the
// two-accumulator form (iq4_nl, one activation row).
template <typename T, int R, bool kPairs>
inline void DotRows(const RowTile<T, R>& t, int64_t nb, float* out) {
  __m256 acc[2][R];
  float mins[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    mins[r] = 0.0f;
  }
  int64_t b = 0;
  if constexpr (kB == 2) {
    // One accumulator: block b + 1 follows block b in it.
    for (; b + 2 <= nb; b += 2) {
      LanesStep2<T, R>(t, b, acc[0], kPairs ? acc[1] : acc[0], mins);
    }
    if (!kPairs && b < nb) LanesStep<T, R>(t, b++, acc[0], mins);
  } else if constexpr (kPairs) {
    for (; b + 2 <= nb; b += 2) {
      LanesStep<T, R>(t, b, acc[0], mins);
      LanesStep<T, R>(t, b + 1, acc[1], mins);
    }
  } else {
    for (; b < nb; ++b) LanesStep<T, R>(t, b, acc[0], mins);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float s = Hsum8(kPairs ? _mm256_add_ps(acc[0][r], acc[1][r]) : acc[0][r]);
    if (kPairs && b < nb) {
      const __m256i wq = T::Decode(t.w[b]);
      const int32_t dot =
          HsumI8(LaneDot8(_mm256_setzero_si256(), UnsignedW<T>(wq),
                          SignedX<T>(LoadQs(t.x[r][b]), wq)));
      const int32_t c =
          T::kOffset != 0
              ? HsumI8(_mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(t.xc[r] + 8 * b)))
              : 0;
      s = FmaF(Half(t.w[b].d) * t.xd[r][b], static_cast<float>(dot + c), s);
    }
    out[r] = T::kMin ? s + mins[r] : s;
  }
}

// The activation tile sizes: 1, 2, 4 and kMaxTile.
inline int TileRows(int left) {
  return left >= kMaxTile ? kMaxTile : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

// Weight row i against activation rows [r0, r0 + R).
template <typename T, int R, bool kPairs>
inline void GemvTile(const GemvArgs& a, int64_t i, int r0, const ActFields& f,
                     int64_t nb) {
  using WB = typename T::WB;
  using XB = typename T::XB;
  RowTile<T, R> t;
  t.w = reinterpret_cast<const WB*>(static_cast<const uint8_t*>(a.w) +
                                    i * a.w_row_bytes);
  for (int r = 0; r < R; ++r) {
    t.x[r] = reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) +
                                         (r0 + r) * a.x_row_bytes);
    t.xd[r] = f.d + (r0 + r) * nb;
    t.xs[r] = f.s + (r0 + r) * nb;
    t.xc[r] = f.c + (r0 + r) * nb * 8;
  }
  float out[R];
  DotRows<T, R, kPairs>(t, nb, out);
  for (int r = 0; r < R; ++r) a.y[(r0 + r) * a.ldy + i] = out[r];
}

// The sequential order for the rows SeqRows8 leaves (fewer than 8 at the
// end of a call): per weight row, the integer sums of 4 blocks reduced
// together (three hadds), then their 4 fmas in block order.
template <typename T, int kWeightRows, int R>
void SeqRows(const GemvArgs& a, int64_t i, int r0, const ActFields& f,
             int64_t nb) {
  using WB = typename T::WB;
  using XB = typename T::XB;
  const WB* w[kWeightRows];
  for (int j = 0; j < kWeightRows; ++j) {
    w[j] = reinterpret_cast<const WB*>(static_cast<const uint8_t*>(a.w) +
                                       (i + j) * a.w_row_bytes);
  }
  const XB* x[R];
  const float* xd[R];
  const int32_t* xc[R];
  __m128 y[kWeightRows][R];
  for (int r = 0; r < R; ++r) {
    x[r] = reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) +
                                       (r0 + r) * a.x_row_bytes);
    xd[r] = f.d + (r0 + r) * nb;
    xc[r] = f.c + (r0 + r) * nb * 8;
    for (int j = 0; j < kWeightRows; ++j) y[j][r] = _mm_setzero_ps();
  }
  auto init = [&](int r, int64_t b) {
    if constexpr (T::kOffset != 0) {
      return _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(xc[r] + 8 * b));
    }
    return _mm256_setzero_si256();
  };
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
#pragma GCC unroll 2
    for (int j = 0; j < kWeightRows; ++j) {
      PrefetchAhead(w[j] + b);
      __m256i wq[4];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) wq[q] = T::Decode(w[j][b + q]);
      const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(
          static_cast<int16_t>(w[j][b].d), static_cast<int16_t>(w[j][b + 1].d),
          static_cast<int16_t>(w[j][b + 2].d),
          static_cast<int16_t>(w[j][b + 3].d), 0, 0, 0, 0));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m256i v[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          v[q] = LaneDot8(init(r, b + q), UnsignedW<T>(wq[q]),
                          SignedX<T>(LoadQs(x[r][b + q]), wq[q]));
        }
        // [Σ v0, Σ v1, Σ v2, Σ v3].
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
                                            _mm256_hadd_epi32(v[2], v[3]));
        const __m128 fs = _mm_cvtepi32_ps(_mm_add_epi32(
            _mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
        const __m128 sc = _mm_mul_ps(dw, _mm_loadu_ps(xd[r] + b));
        __m128 acc = _mm_fmadd_ss(fs, sc, y[j][r]);
        acc = _mm_fmadd_ss(_mm_movehdup_ps(fs), _mm_movehdup_ps(sc), acc);
        acc =
            _mm_fmadd_ss(_mm_unpackhi_ps(fs, fs), _mm_unpackhi_ps(sc, sc), acc);
        y[j][r] = _mm_fmadd_ss(_mm_shuffle_ps(fs, fs, 3),
                               _mm_shuffle_ps(sc, sc, 3), acc);
      }
    }
  }
  for (; b < nb; ++b) {
    for (int j = 0; j < kWeightRows; ++j) {
      const __m256i wq = T::Decode(w[j][b]);
      const float dw = Half(w[j][b].d);
      for (int r = 0; r < R; ++r) {
        const int32_t dot = HsumI8(LaneDot8(init(r, b), UnsignedW<T>(wq),
                                            SignedX<T>(LoadQs(x[r][b]), wq)));
        y[j][r] = _mm_fmadd_ss(_mm_set_ss(static_cast<float>(dot)),
                               _mm_set_ss(dw * xd[r][b]), y[j][r]);
      }
    }
  }
  for (int j = 0; j < kWeightRows; ++j) {
    for (int r = 0; r < R; ++r) {
      a.y[(r0 + r) * a.ldy + i + j] = _mm_cvtss_f32(y[j][r]);
    }
  }
}

// [Σ v0, Σ v1, ..., Σ v7].
inline __m256i Sum8x8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
                                      _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]),
                                      _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// r[i][j] <-> r[j][i].
inline void Transpose8x8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// 8 weight rows [i, i + 8) in the sequential order, 8 blocks at a time:
// each row's 8 block sums and scales are formed from its own contiguous
// bytes, then transposed so that one 8-lane chain (a lane per row) takes
// the blocks in order, as ggml's interleaved layout computes them.
template <typename T, int R>
void SeqRows8(const GemvArgs& a, int64_t i, int r0, const ActFields& f,
              int64_t nb) {
  using WB = typename T::WB;
  using XB = typename T::XB;
  const WB* w[8];
  for (int j = 0; j < 8; ++j) {
    w[j] = reinterpret_cast<const WB*>(static_cast<const uint8_t*>(a.w) +
                                       (i + j) * a.w_row_bytes);
  }
  for (int r = 0; r < R; ++r) {
    const XB* x = reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) +
                                              (r0 + r) * a.x_row_bytes);
    const float* xd = f.d + (r0 + r) * nb;
    const int32_t* xc = f.c + (r0 + r) * nb * 8;
    __m256 acc = _mm256_setzero_ps();
    // The 8 rows are one contiguous region; the next 8 rows' region is
    // prefetched a slice per 8 blocks (8 scattered streams defeat the
    // hardware prefetchers).
    const char* next = reinterpret_cast<const char*>(w[0]) + 8 * a.w_row_bytes;
    const int64_t slice =
        (8 * a.w_row_bytes + nb / 8 - 1) / std::max<int64_t>(1, nb / 8);
    int64_t b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8) {
      if (r == 0 && i + 16 <= a.row_end) {
        const char* p = next + (b0 / 8) * slice;
        for (int64_t off = 0; off < slice; off += 64) {
          _mm_prefetch(p + off, _MM_HINT_T0);
        }
      }
      __m256 sums[8], scales[8];
      const __m256 dx = _mm256_loadu_ps(xd + b0);
#pragma GCC unroll 1
      for (int j = 0; j < 8; ++j) {
        const WB* wb = w[j] + b0;
        __m256i v[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) {
          const __m256i wq = T::Decode(wb[q]);
          __m256i init = _mm256_setzero_si256();
          if constexpr (T::kOffset != 0) {
            init = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(xc + 8 * (b0 + q)));
          }
          v[q] = LaneDot8(init, UnsignedW<T>(wq),
                          SignedX<T>(LoadQs(x[b0 + q]), wq));
        }
        sums[j] = _mm256_cvtepi32_ps(Sum8x8(v));
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(
            static_cast<int16_t>(wb[0].d), static_cast<int16_t>(wb[1].d),
            static_cast<int16_t>(wb[2].d), static_cast<int16_t>(wb[3].d),
            static_cast<int16_t>(wb[4].d), static_cast<int16_t>(wb[5].d),
            static_cast<int16_t>(wb[6].d), static_cast<int16_t>(wb[7].d)));
        scales[j] = _mm256_mul_ps(dw, dx);
      }
      Transpose8x8(sums);
      Transpose8x8(scales);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        acc = _mm256_fmadd_ps(sums[q], scales[q], acc);
    }
    alignas(32) float y[8];
    _mm256_store_ps(y, acc);
    for (; b0 < nb; ++b0) {
      for (int j = 0; j < 8; ++j) {
        const __m256i wq = T::Decode(w[j][b0]);
        __m256i init = _mm256_setzero_si256();
        if constexpr (T::kOffset != 0) {
          init =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 8 * b0));
        }
        const int32_t dot = HsumI8(
            LaneDot8(init, UnsignedW<T>(wq), SignedX<T>(LoadQs(x[b0]), wq)));
        y[j] = FmaF(static_cast<float>(dot), Half(w[j][b0].d) * xd[b0], y[j]);
      }
    }
    for (int j = 0; j < 8; ++j) a.y[(r0 + r) * a.ldy + i + j] = y[j];
  }
}

// --- Activation-lane kernels (m >= kLaneMinRows; offset types only). ---
//
// A tile of up to kLanes activation rows is repacked once per call so that
// 256-bit lane t holds activation row t: four quants of each row side by
// side per 4-element group. Weight blocks are decoded (kChunk at a time)
// into a small buffer, and each group of 4 weight quants is broadcast into
// all lanes, so one 8-lane dot step serves every row: the lanes are the
// outputs (no horizontal reductions), and each activation group is loaded
// once for kLaneWeightRows weight rows.
constexpr int kLanes = 8, kLaneMinRows = 4, kChunk = 8;
// Per tile and block: q [8][kLanes] int32 (quants 4g..4g+3 of row t at
// [g][t]), d [kLanes] (f32 x.d), c [kLanes] (int32 −kOffset·Σq).
constexpr int kLaneQ = 8 * kLanes, kLaneBlockWords = kLaneQ + 2 * kLanes;

// The offset and sign-trick types (not the min types). Their sums are
// one f32 chain per output: q4_0's sequential order, and for the others
// not ggml's (GemvArgs::lane_min_rows).
template <typename T>
constexpr bool kLaneType = !T::kMin && (T::kSigned || T::kOffset != 0);

inline __m256i LaneBcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}
inline __m256i LaneLoad(const int32_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

template <typename T>
void PackLaneTile(const GemvArgs& a, int r0, int rows, int64_t nb,
                  int32_t* out) {
  using XB = typename T::XB;
  for (int t = 0; t < kLanes; ++t) {
    const XB* x =
        t < rows
            ? reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) +
                                          (r0 + t) * a.x_row_bytes)
            : nullptr;
    for (int64_t ib = 0; ib < nb; ++ib) {
      int32_t* q = out + ib * kLaneBlockWords;
      float* d = reinterpret_cast<float*>(q + kLaneQ);
      int32_t* c = q + kLaneQ + kLanes;
      if (x == nullptr) {
        for (int g = 0; g < 8; ++g) q[g * kLanes + t] = 0;
        d[t] = 0.0f;
        c[t] = 0;
        continue;
      }
      int32_t sum = 0;
      for (int g = 0; g < 8; ++g) {
        int32_t v;
        std::memcpy(&v, x[ib].qs + 4 * g, sizeof(v));
        q[g * kLanes + t] = v;
      }
      for (int j = 0; j < kBlockElems; ++j) sum += x[ib].qs[j];
      d[t] = Half(x[ib].d);
      c[t] = -T::kOffset * sum;
    }
  }
}

// kWR weight rows w[r] against one packed tile: out[r * kLanes + t].
template <typename T, int kWR>
void LaneRows(const typename T::WB* const* w, int64_t nb, const int32_t* tile,
              float* out) {
  __m256 acc[kWR];
#pragma GCC unroll 4
  for (int r = 0; r < kWR; ++r) acc[r] = _mm256_setzero_ps();
  alignas(32) uint8_t u[kWR][kChunk * kBlockElems];
  // kSigned: u holds |w| and sw the signed quants (the sign trick).
  alignas(32) uint8_t sw[T::kSigned ? kWR : 1][kChunk * kBlockElems];
  alignas(32) float dw[kWR][kChunk];
  for (int64_t c0 = 0; c0 < nb; c0 += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, nb - c0));
#pragma GCC unroll 4
    for (int r = 0; r < kWR; ++r) {
      for (int off = 0; off < n * int{sizeof(typename T::WB)}; off += 64) {
        PrefetchAhead(reinterpret_cast<const uint8_t*>(w[r] + c0) + off);
      }
      for (int j = 0; j < n; ++j) {
        const __m256i q = T::Decode(w[r][c0 + j]);
        if constexpr (T::kSigned) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(sw[r] + 32 * j), q);
          _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 32 * j),
                             _mm256_sign_epi8(q, q));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 32 * j), q);
        }
        dw[r][j] = Half(w[r][c0 + j].d);
      }
    }
    // Broadcast the quants from memory (a load each) rather than let the
    // compiler extract them from registers (two shuffles each).
    asm volatile("" ::: "memory");
    for (int j = 0; j < n; ++j) {
      const int32_t* q = tile + (c0 + j) * kLaneBlockWords;
      __m256i xq[8];
#pragma GCC unroll 8
      for (int e = 0; e < 8; ++e) xq[e] = LaneLoad(q + e * kLanes);
      const __m256 xd =
          _mm256_load_ps(reinterpret_cast<const float*>(q + kLaneQ));
#pragma GCC unroll 4
      for (int r = 0; r < kWR; ++r) {
        __m256i dot = LaneLoad(q + kLaneQ + kLanes);
#pragma GCC unroll 8
        for (int e = 0; e < 8; ++e) {
          if constexpr (T::kSigned) {
            dot = LaneDot8(
                dot, LaneBcast32(u[r] + 32 * j + 4 * e),
                _mm256_sign_epi8(xq[e], LaneBcast32(sw[r] + 32 * j + 4 * e)));
          } else {
            dot = LaneDot8(dot, LaneBcast32(u[r] + 32 * j + 4 * e), xq[e]);
          }
        }
        acc[r] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(dot),
            _mm256_mul_ps(xd, _mm256_broadcast_ss(&dw[r][j])), acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kWR; ++r) _mm256_storeu_ps(out + r * kLanes, acc[r]);
}

template <typename T>
void LaneGemv(const GemvArgs& a) {
  using WB = typename T::WB;
  const int64_t nb = a.k / kBlockElems;
  const int tiles = (a.m + kLanes - 1) / kLanes;
  const int64_t tile_words = nb * kLaneBlockWords;
  thread_local std::vector<int32_t> packed;
  packed.resize(tiles * tile_words + 8);
  // 32-byte aligned base.
  int32_t* base = packed.data();
  base += (8 - (reinterpret_cast<uintptr_t>(base) / 4) % 8) % 8;
  for (int tt = 0; tt < tiles; ++tt) {
    const int r0 = tt * kLanes;
    PackLaneTile<T>(a, r0, std::min(kLanes, a.m - r0), nb,
                    base + tt * tile_words);
  }
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  for (int64_t i = a.row_begin; i < a.row_end;) {
    const int wr =
        static_cast<int>(std::min<int64_t>(kLaneWeightRows, a.row_end - i));
    const int done = wr == kLaneWeightRows ? wr : wr >= 2 ? 2 : 1;
    const WB* rows[kLaneWeightRows];
    for (int r = 0; r < done; ++r) {
      rows[r] = reinterpret_cast<const WB*>(w + (i + r) * a.w_row_bytes);
    }
    for (int tt = 0; tt < tiles; ++tt) {
      const int r0 = tt * kLanes;
      const int m = std::min(kLanes, a.m - r0);
      float out[kLaneWeightRows * kLanes];
      const int32_t* tile = base + tt * tile_words;
      if (done == kLaneWeightRows) {
        LaneRows<T, kLaneWeightRows>(rows, nb, tile, out);
      } else if (done == 2) {
        LaneRows<T, 2>(rows, nb, tile, out);
      } else {
        LaneRows<T, 1>(rows, nb, tile, out);
      }
      for (int r = 0; r < done; ++r) {
        for (int t = 0; t < m; ++t) {
          a.y[(r0 + t) * a.ldy + i + r] = out[r * kLanes + t];
        }
      }
    }
    i += done;
  }
}

template <typename T>
void GemvBlocks(const GemvArgs& a) {
  // q4_0 is the only type ggml repacks (interleaved 8 rows; the order of
  // every other matrix and type is the lanes one).
  constexpr bool kQ4_0 = std::is_same_v<T, Q4_0W>;
  const bool sequential = kQ4_0 && a.w_rows > 0 && a.w_rows % 8 == 0;
  if constexpr (kLaneType<T>) {
    if (a.m >= (sequential ? kLaneMinRows : a.lane_min_rows)) {
      LaneGemv<T>(a);
      return;
    }
  }
  using XB = typename T::XB;
  const int64_t nb = a.k / kBlockElems;
  // The activations' block fields in the forms the kernel reads, once per
  // call (thread_local: no allocation after a thread's first calls).
  thread_local std::vector<float> floats;
  thread_local std::vector<int32_t> ints;
  floats.resize(2 * a.m * nb);
  ints.resize(a.m * nb * 8);
  float* xd = floats.data();
  float* xs = xd + a.m * nb;
  int32_t* xc = ints.data();
  for (int r = 0; r < a.m; ++r) {
    const XB* x = reinterpret_cast<const XB*>(static_cast<const uint8_t*>(a.x) +
                                              r * a.x_row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      xd[r * nb + b] = Half(x[b].d);
      if constexpr (T::kMin) xs[r * nb + b] = Half(x[b].s);
      if constexpr (T::kOffset != 0) {
        for (int j = 0; j < 8; ++j) {
          const int8_t* q = x[b].qs + 4 * j;
          xc[(r * nb + b) * 8 + j] = -T::kOffset * (q[0] + q[1] + q[2] + q[3]);
        }
      }
    }
  }
  const ActFields f{xd, xs, xc};
  if (sequential) {
    int64_t i = a.row_begin;
    for (; i + 8 <= a.row_end; i += 8) {
      for (int r0 = 0; r0 < a.m;) {
        if (a.m - r0 >= 2) {
          SeqRows8<T, 2>(a, i, r0, f, nb);
          r0 += 2;
        } else {
          SeqRows8<T, 1>(a, i, r0, f, nb);
          r0 += 1;
        }
      }
    }
    for (; i < a.row_end; ++i) {
      for (int r0 = 0; r0 < a.m; ++r0) SeqRows<T, 1, 1>(a, i, r0, f, nb);
    }
    return;
  }
  // Weight rows outermost: each is read from memory once, then from L1 for
  // the other activation tiles.
  constexpr bool kIq4Nl = std::is_same_v<T, Iq4NlW>;
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    if (kIq4Nl && a.m == 1) {
      GemvTile<T, 1, true>(a, i, 0, f, nb);
      continue;
    }
    for (int r0 = 0; r0 < a.m;) {
      const int rows = TileRows(a.m - r0);
      if (rows == 1) {
        GemvTile<T, 1, false>(a, i, r0, f, nb);
      } else if (rows == 2) {
        GemvTile<T, 2, false>(a, i, r0, f, nb);
      } else if (rows == 4) {
        GemvTile<T, 4, false>(a, i, r0, f, nb);
      } else if constexpr (kMaxTile > 4) {
        GemvTile<T, kMaxTile, false>(a, i, r0, f, nb);
      }
      r0 += rows;
    }
  }
}

// --- q4_0x8: 8 rows interleaved (quant_legacy.h), sequential order. ---
//
// Per record (8 rows × one block) the 4 pieces' low and high nibbles are
// elements 0..7, 8..15, 16..23 and 24..31 of 4 rows each; the activation's
// 8 matching quants broadcast to every row, 4 dots per 4 rows leave each
// row's block sum in two int32 lanes, and one hadd of the two row sets
// puts the 8 rows' sums in row order: y = fma(Σ, d_w·d_x, y) in 8 lanes,
// block after block, the order SeqRows8 forms from plain rows.

// Σ over 4 (u, s) pairs of 4 adjacent u8 × s8 per int32 lane (u <= 15 and
// |s| <= 127 here: the int16 sums of the avx2 form stay below 15240).
inline __m256i X8Dot4(const __m256i* u, const __m256i* s) {
  if constexpr (kVnni) {
    __m256i acc = LaneDot8(_mm256_setzero_si256(), u[0], s[0]);
    acc = LaneDot8(acc, u[1], s[1]);
    acc = LaneDot8(acc, u[2], s[2]);
    return LaneDot8(acc, u[3], s[3]);
  } else {
    const __m256i p =
        _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u[0], s[0]),
                                          _mm256_maddubs_epi16(u[1], s[1])),
                         _mm256_add_epi16(_mm256_maddubs_epi16(u[2], s[2]),
                                          _mm256_maddubs_epi16(u[3], s[3])));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  }
}

inline __m256i Bcast64(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi64x(v);
}

// One group's nb records against activation rows x[0, R): out[r][row].
template <int R>
void X8Rows(const uint8_t* group, int64_t nb, const BlockQ8_0* const* x,
            const float* const* xd, const int32_t* const* xc, float (*out)[8]) {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = group + b * kQ4_0x8RecordBytes;
    PrefetchAhead(rec);
    __m256i q[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      q[j] = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(rec + 16 + 32 * j));
    }
    // Rows {0, 1, 4, 5} (pieces 0, 2) and {2, 3, 6, 7} (pieces 1, 3).
    const __m256i ua[4] = {_mm256_and_si256(q[0], low),
                           _mm256_and_si256(q[2], low),
                           _mm256_and_si256(_mm256_srli_epi16(q[0], 4), low),
                           _mm256_and_si256(_mm256_srli_epi16(q[2], 4), low)};
    const __m256i ub[4] = {_mm256_and_si256(q[1], low),
                           _mm256_and_si256(q[3], low),
                           _mm256_and_si256(_mm256_srli_epi16(q[1], 4), low),
                           _mm256_and_si256(_mm256_srli_epi16(q[3], 4), low)};
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = x[r][b].qs;
      const __m256i s[4] = {Bcast64(xq), Bcast64(xq + 8), Bcast64(xq + 16),
                            Bcast64(xq + 24)};
      const __m256i sum =
          _mm256_add_epi32(_mm256_hadd_epi32(X8Dot4(ua, s), X8Dot4(ub, s)),
                           _mm256_set1_epi32(xc[r][b]));
      acc[r] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                          _mm256_mul_ps(dw, _mm256_set1_ps(xd[r][b])), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r], acc[r]);
}

void GemvQ4_0x8(const GemvArgs& a) {
  const int64_t nb = a.k / kBlockElems;
  // Per activation row and block: d as f32 and −8·Σq (q4_0's offset).
  thread_local std::vector<float> floats;
  thread_local std::vector<int32_t> ints;
  floats.resize(a.m * nb);
  ints.resize(a.m * nb);
  for (int r = 0; r < a.m; ++r) {
    const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(
        static_cast<const uint8_t*>(a.x) + r * a.x_row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum = 0;
      for (int j = 0; j < kBlockElems; ++j) sum += x[b].qs[j];
      floats[r * nb + b] = Half(x[b].d);
      ints[r * nb + b] = -8 * sum;
    }
  }
  constexpr int kTile = 4;
  const int64_t group_bytes = 8 * a.w_row_bytes;
  for (int64_t g = a.row_begin / 8; 8 * g < a.row_end; ++g) {
    const uint8_t* group = static_cast<const uint8_t*>(a.w) + g * group_bytes;
    const int lo = static_cast<int>(std::max<int64_t>(a.row_begin - 8 * g, 0));
    const int hi = static_cast<int>(std::min<int64_t>(a.row_end - 8 * g, 8));
    for (int r0 = 0; r0 < a.m;) {
      const int left = a.m - r0;
      const int n = left >= kTile ? kTile : left >= 2 ? 2 : 1;
      const BlockQ8_0* x[kTile];
      const float* xd[kTile];
      const int32_t* xc[kTile];
      for (int r = 0; r < n; ++r) {
        x[r] = reinterpret_cast<const BlockQ8_0*>(
            static_cast<const uint8_t*>(a.x) + (r0 + r) * a.x_row_bytes);
        xd[r] = floats.data() + (r0 + r) * nb;
        xc[r] = ints.data() + (r0 + r) * nb;
      }
      float out[kTile][8];
      if (n == kTile) {
        X8Rows<kTile>(group, nb, x, xd, xc, out);
      } else if (n == 2) {
        X8Rows<2>(group, nb, x, xd, xc, out);
      } else {
        X8Rows<1>(group, nb, x, xd, xc, out);
      }
      for (int r = 0; r < n; ++r) {
        for (int j = lo; j < hi; ++j) {
          a.y[(r0 + r) * a.ldy + 8 * g + j] = out[r][j];
        }
      }
      r0 += n;
    }
  }
}

// --- Float weights × f32 activations (BlockLinear rounds them through
// f16/bf16 first for F16/BF16 weights, as ggml does). ---

struct F32W {
  using E = float;
  static VF Load(const float* p) { return LoadF32(p); }
  static float One(float v) { return v; }
};
struct F16W {
  using E = uint16_t;
  static VF Load(const uint16_t* p) { return LoadF16(p); }
  static float One(uint16_t v) { return Half(v); }
};
struct Bf16W {
  using E = uint16_t;
  static VF Load(const uint16_t* p) { return LoadBf16(p); }
  static float One(uint16_t v) { return Bf16ToFloat(v); }
};

template <typename L, int R>
inline void FloatRows(const typename L::E* w, const float* const* x, int64_t k,
                      float* out) {
  constexpr int kU = R == 1 ? 4 : R == 2 ? 2 : 1;  // independent FMA chains
  VF acc[kU][R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < kU; ++u) acc[u][r] = ZeroF();
  }
  int64_t j = 0;
  for (; j + kU * kW <= k; j += kU * kW) {
    PrefetchAhead(w + j);
#pragma GCC unroll 4
    for (int u = 0; u < kU; ++u) {
      const VF wv = L::Load(w + j + u * kW);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[u][r] = Fma(wv, LoadF32(x[r] + j + u * kW), acc[u][r]);
      }
    }
  }
  for (; j + kW <= k; j += kW) {
    const VF wv = L::Load(w + j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc[0][r] = Fma(wv, LoadF32(x[r] + j), acc[0][r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    VF s = acc[0][r];
    for (int u = 1; u < kU; ++u) s = Add(s, acc[u][r]);
    float sum = ReduceAdd(s);
    for (int64_t t = j; t < k; ++t) sum += L::One(w[t]) * x[r][t];
    out[r] = sum;
  }
}

template <typename L>
void GemvFloat(const GemvArgs& a) {
  using E = typename L::E;
  const uint8_t* w_base = static_cast<const uint8_t*>(a.w);
  const uint8_t* x_base = static_cast<const uint8_t*>(a.x);
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    const E* w = reinterpret_cast<const E*>(w_base + i * a.w_row_bytes);
    for (int r0 = 0; r0 < a.m;) {
      const int rows = TileRows(a.m - r0);
      const float* x[kMaxTile];
      float out[kMaxTile];
      for (int r = 0; r < rows; ++r) {
        x[r] =
            reinterpret_cast<const float*>(x_base + (r0 + r) * a.x_row_bytes);
      }
      if (rows == 1) {
        FloatRows<L, 1>(w, x, a.k, out);
      } else if (rows == 2) {
        FloatRows<L, 2>(w, x, a.k, out);
      } else if (rows == 4) {
        FloatRows<L, 4>(w, x, a.k, out);
      } else if constexpr (kMaxTile > 4) {
        FloatRows<L, kMaxTile>(w, x, a.k, out);
      }
      for (int r = 0; r < rows; ++r) a.y[(r0 + r) * a.ldy + i] = out[r];
      r0 += rows;
    }
  }
}

constexpr KernelSet kKernels = {
    .f32 = GemvFloat<F32W>,
    .f16 = GemvFloat<F16W>,
    .bf16 = GemvFloat<Bf16W>,
    .q4_0 = GemvBlocks<Q4_0W>,
    .q4_1 = GemvBlocks<Q4_1W>,
    .q5_0 = GemvBlocks<Q5_0W>,
    .q5_1 = GemvBlocks<Q5_1W>,
    .q8_0 = GemvBlocks<Q8_0W>,
    .iq4_nl = GemvBlocks<Iq4NlW>,
    .q4_0x8 = GemvQ4_0x8,
};
