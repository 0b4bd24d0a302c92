// The SIMD Gemv kernels of the legacy types, written once over a vector
// vocabulary that quant_legacy_x86.cc defines per ISA namespace before
// including this file (no include guard: it is included once per ISA, each
// time inside its own namespace and #pragma GCC target region):
//
//   kB          weight blocks per step (1 for 256-bit, 2 for 512-bit)
//   kW          f32 lanes of VF
//   kMaxTile    activation rows a weight block is reused for (4 or 8)
//   VI, VF      integer and f32 vectors
//   JoinW(lo, hi)   kB blocks' 32-byte quants into one VI
//   Abs8(w), SignOf(x, w)   |w| and x·sign(w), per int8 lane
//   kVnni       whether DotU8S8 is VNNI's (non-saturating) dpbusd
//   DotU8S8(init, u, s)   per int32 lane: init + Σ of 4 adjacent u8 × s8
//   ZeroI(), BlockInts(p, n)   p[j] in lane 0 of block j's lanes, j < n
//   ExpandScales(s)  a VF with s[j] on block j's lanes
//   ToF, ZeroF, Add, Fma, ReduceAdd, LoadF32, LoadF16, LoadBf16
//
//   LaneDot8(acc, u, s)   256-bit: acc + Σ of 4 adjacent u8 × s8 per int32
//   kLaneWeightRows   weight rows per pass of the lane kernels (2 or 4)
//
// For m >= kLaneMinRows q4_0, q5_0, q8_0 and iq4_nl use the lane kernels
// instead (q8_0 and iq4_nl with the sign trick without VNNI) (see LaneGemv):
// activation rows in the lanes of 256-bit dots, weight quants broadcast. m = 8,
// 4096 × 4096, 2 threads on the Zen 5 VM: q4_0 avx512_vnni ~780 -> ~600 us,
// avx2 ~1230
// -> ~820 us; q8_0 avx512_vnni ~1040 -> ~730 us (m = 1: ~230, ~340 us).
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

// n (1..kB) weight blocks from w; lanes past them are zero.
template <typename T>
inline VI LoadW(const typename T::WB* w, int n) {
  if constexpr (kB == 1) {
    return T::Decode(w[0]);
  } else {
    return JoinW(T::Decode(w[0]),
                 n > 1 ? T::Decode(w[1]) : _mm256_setzero_si256());
  }
}

template <typename XB>
inline __m256i LoadQs(const XB& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}

template <typename XB>
inline VI LoadX(const XB* x, int n) {
  if constexpr (kB == 1) {
    return LoadQs(x[0]);
  } else {
    return JoinW(LoadQs(x[0]), n > 1 ? LoadQs(x[1]) : _mm256_setzero_si256());
  }
}

// The scales of blocks [b, b + n) in the low lanes of an __m128 (the other
// lanes zero): fp16 fields of the weight blocks, or f32 values at p.
template <typename WB>
inline __m128 WeightScales(const WB* w, int n) {
  uint32_t bits = w[0].d;
  if (kB > 1 && n > 1) bits |= uint32_t{w[1].d} << 16;
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
}
template <typename WB>
inline __m128 WeightMins(const WB* w, int n) {
  uint32_t bits = w[0].m;
  if (kB > 1 && n > 1) bits |= uint32_t{w[1].m} << 16;
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
}
inline __m128 LoadScales(const float* p, int n) {
  if (kB > 1 && n > 1) {
    return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
  }
  return _mm_load_ss(p);
}

// One weight row against R activation rows. Of activation row r: its blocks
// at x[r], their f32 scales d at xd[r], their s (kMin) at xs[r], their
// −kOffset·Σq (kOffset) at xc[r].
template <typename T, int R>
struct RowTile {
  const typename T::WB* w;
  const typename T::XB* x[R];
  const float* xd[R];
  const float* xs[R];
  const int32_t* xc[R];
};

// Blocks [b, b + n) of the tile: acc[r] += (int dot) · d_w·d_x lane-wise,
// and mins[r] += m_w · s_x (kMin).
template <typename T, int R>
inline void Step(const RowTile<T, R>& t, int64_t b, int n, VF* acc,
                 __m128* mins) {
  PrefetchAhead(t.w + b);
  const VI wq = LoadW<T>(t.w + b, n);
  VI wu = wq;
  if constexpr (T::kSigned) wu = Abs8(wq);
  const __m128 dw = WeightScales(t.w + b, n);
  __m128 mw = _mm_setzero_ps();
  if constexpr (T::kMin) mw = WeightMins(t.w + b, n);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    VI xq = LoadX(t.x[r] + b, n);
    if constexpr (T::kSigned) xq = SignOf(xq, wq);
    VI init = ZeroI();
    if constexpr (T::kOffset != 0) init = BlockInts(t.xc[r] + b, n);
    const VF scale = ExpandScales(_mm_mul_ps(dw, LoadScales(t.xd[r] + b, n)));
    acc[r] = Fma(ToF(DotU8S8(init, wu, xq)), scale, acc[r]);
    if constexpr (T::kMin) {
      mins[r] = _mm_fmadd_ps(mw, LoadScales(t.xs[r] + b, n), mins[r]);
    }
  }
}

// out[r] = dot(weight row, activation row r) over nb blocks.
template <typename T, int R>
inline void DotRows(const RowTile<T, R>& t, int64_t nb, float* out) {
  constexpr int kU = R == 1 ? 2 : 1;  // independent FMA chains
  VF acc[kU][R];
  __m128 mins[kU][R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < kU; ++u) {
      acc[u][r] = ZeroF();
      mins[u][r] = _mm_setzero_ps();
    }
  }
  int64_t b = 0;
  for (; b + kU * kB <= nb; b += kU * kB) {
#pragma GCC unroll 2
    for (int u = 0; u < kU; ++u) {
      Step<T, R>(t, b + u * kB, kB, acc[u], mins[u]);
    }
  }
  for (; b < nb; b += kB) {
    Step<T, R>(t, b, static_cast<int>(std::min<int64_t>(kB, nb - b)), acc[0],
               mins[0]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    VF s = acc[0][r];
    __m128 ms = mins[0][r];
    if constexpr (kU > 1) {
      s = Add(s, acc[1][r]);
      ms = _mm_add_ps(ms, mins[1][r]);
    }
    float m = 0.0f;
    if constexpr (T::kMin) {
      m = _mm_cvtss_f32(_mm_add_ss(ms, _mm_movehdup_ps(ms)));
    }
    out[r] = ReduceAdd(s) + m;
  }
}

// The activation tile sizes: 1, 2, 4 and kMaxTile.
inline int TileRows(int left) {
  return left >= kMaxTile ? kMaxTile : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

// Per-call f32/int forms of the activations' block fields, [m][nb] each.
struct ActFields {
  const float* d;
  const float* s;
  const int32_t* c;
};

// Weight row i against activation rows [r0, r0 + R).
template <typename T, int R>
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
    t.xc[r] = f.c + (r0 + r) * nb;
  }
  float out[R];
  DotRows<T, R>(t, nb, out);
  for (int r = 0; r < R; ++r) a.y[(r0 + r) * a.ldy + i] = out[r];
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
  if constexpr (kLaneType<T>) {
    if (a.m >= kLaneMinRows) {
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
  ints.resize(a.m * nb);
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
        int32_t sum = 0;
        for (int j = 0; j < kBlockElems; ++j) sum += x[b].qs[j];
        xc[r * nb + b] = -T::kOffset * sum;
      }
    }
  }
  const ActFields f{xd, xs, xc};
  // Weight rows outermost: each is read from memory once, then from L1 for
  // the other activation tiles.
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    for (int r0 = 0; r0 < a.m;) {
      const int rows = TileRows(a.m - r0);
      if (rows == 1) {
        GemvTile<T, 1>(a, i, r0, f, nb);
      } else if (rows == 2) {
        GemvTile<T, 2>(a, i, r0, f, nb);
      } else if (rows == 4) {
        GemvTile<T, 4>(a, i, r0, f, nb);
      } else if constexpr (kMaxTile > 4) {
        GemvTile<T, kMaxTile>(a, i, r0, f, nb);
      }
      r0 += rows;
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
};
