// Skinny products with quantized weights for decoding on x86 CPUs: y[M,N] = x[M,K] @ W[N,K]^T for M = 1..32
// float32 rows, W stored as qweight.py's blocks (float16 scales, GGUF nibble order):
//   int8  q int8 [N, K],    one scale per row            value q * d
//   q8_0  q int8 [N, K],    one scale per block of 32    value q * d
//   q4_0  q uint8 [N, K/2], one scale per block          value (nib - 8) * d
//   q4_1  q uint8 [N, K/2], a scale and a minimum each   value nib * d + m
//
// Each row of W is read from memory once per call, front to back, kPrefetchRows behind a software prefetch; ranges
// of rows go to this library's spinning helper threads (parallel.h);
// nothing of W is ever written as floats beyond L1.
//
// Up to kMaxRegRows rows of x ("register path"): a tile of R rows of W (4, or 2 for 3-4 rows of x) is walked one
// block of 32 at a time; each block's 32 values become four float vectors (zero/sign-extend, convert), and for each
// row of x the block's dot product with the raw integers, t = sum_i q_i x_i, is folded into the row's accumulator
// with the block's scale, acc += d * t (one multiply-add per block instead of one per value). The 4-bit offsets
// never enter the inner loop:
//   q4_1: sum_i (nib_i d + m) x_i = d sum_i nib_i x_i + m sum_i x_i
//   q4_0: sum_i (nib_i - 8) d x_i = d sum_i nib_i x_i - 8 d sum_i x_i
// with the per-block sums of x computed once per call, the m * sum terms added eight blocks at a time at the end.
// More rows of x ("tile path"): a tile of 4 rows of W is dequantized once into an L1 buffer of floats, then every
// pair of x rows runs the fp32 kernel's inner product over it, so the unpacking is paid once for all M rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

enum Scheme : int64_t { kInt8 = 0, kQ8_0 = 1, kQ4_0 = 2, kQ4_1 = 3 };
enum Activations : int64_t { kFloatX = 0, kInt8X = 1, kInt8Avx2 = 2 };  // the int8_activations attribute

constexpr int64_t kMaxRows = 32;
constexpr int64_t kBlock = 32;
constexpr int64_t kMaxRegRows = 4;      // rows of x taken by the register path; more go through the tile path
constexpr int64_t kPrefetchRows = 16;   // rows of W between the one being read and the one being prefetched
constexpr int64_t kMinChunkWork = 65536;  // weights (times (M + 1) / 2) per chunk of the work

constexpr bool IsQ4(Scheme s) { return s == kQ4_0 || s == kQ4_1; }
constexpr int64_t BlockBytes(Scheme s) { return IsQ4(s) ? kBlock / 2 : kBlock; }

struct Int8Activations;

struct Call {
  const float* x;            // [M, K]
  const uint8_t* q;          // [N, row_bytes]
  const uint16_t* scale;     // [N, n_scales] float16
  const uint16_t* minimum;   // [N, nb] float16 (q4_1)
  float* y;                  // [M, N]
  const float* xsum;         // [M, nbp]: per-block sums of x (q4_0: times -8), zero past nb
  const Int8Activations* int8_x;  // the int8-activation path's x (M <= kMaxRegRows), else null
  bool int8_vnni;                 // that path through VNNI (asked for, and the CPU has it), else AVX2
  Scheme scheme;
  int64_t m_rows, k_dim, n_dim, nb, nbp, row_bytes, n_scales;
};

inline void Prefetch(const Call& c, const uint8_t* p) {
  if (p < c.q + c.n_dim * c.row_bytes) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// Block b of a row of W as four float vectors of its integers (values 0-7, 8-15, 16-23, 24-31), before any scale
// or offset. GGUF 4-bit order: byte j holds value j in its low nibble and value j + 16 in its high nibble, so bytes
// 0-7 zero-extended to eight lanes give values 0-7 (low nibbles) and 16-23 (high nibbles).
template <Scheme S>
inline void LoadBlock(const uint8_t* p, __m256 v[4]) {
  if constexpr (IsQ4(S)) {
    const __m256i mask = _mm256_set1_epi32(0xF);
    const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
    v[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, mask));
    v[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, mask));
    v[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
    v[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
  } else {
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i))));
    }
  }
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The four horizontal sums of a[0..3], in order.
inline __m128 HorizontalSum4(const __m256 a[4]) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// y[g, r] = the sum of acc[g][r]'s lanes (times row_scales[r] for int8), for the R rows of W of a tile.
template <int G, int R, bool kScaled>
inline void Store(const __m256 (&acc)[G][R], const float* row_scales, float* y, int64_t n_dim) {
  for (int g = 0; g < G; ++g) {
    if constexpr (R == 4) {
      __m128 s = HorizontalSum4(acc[g]);
      if constexpr (kScaled) s = _mm_mul_ps(s, _mm_loadu_ps(row_scales));
      _mm_storeu_ps(y + g * n_dim, s);
    } else {
      for (int r = 0; r < R; ++r) y[g * n_dim + r] = HorizontalSum(acc[g][r]) * (kScaled ? row_scales[r] : 1.f);
    }
  }
}

// Per-tile scratch: the tile's scales (and minimums) as floats, [R, nbp], zero past nb; the tile path's
// dequantized rows [4, K].
struct Scratch {
  std::unique_ptr<float[]> memory;
  float *d, *m, *rows, *row_scales;
  Scratch(const Call& c) : memory(new float[8 * c.nbp + 4 * c.k_dim + 4]) {
    d = memory.get();
    m = d + 4 * c.nbp;
    rows = m + 4 * c.nbp;
    row_scales = rows + 4 * c.k_dim;
  }

  // dst[0:nbp] = float(src[0:count]), zero past count.
  static void HalfToFloat(const uint16_t* src, int64_t count, float* dst, int64_t nbp) {
    int64_t b = 0;
    for (; b + 8 <= count; b += 8) {
      _mm256_storeu_ps(dst + b, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b))));
    }
    for (; b < count; ++b) dst[b] = _cvtsh_ss(src[b]);
    for (; b < nbp; ++b) dst[b] = 0.f;
  }

  // Scales of rows n..n+R-1 (and the scales and minimums of the rows kPrefetchRows on, into cache).
  template <Scheme S>
  void Load(const Call& c, int64_t n, int rows_in_tile) {
    for (int r = 0; r < rows_in_tile; ++r) {
      const int64_t ahead = n + r + kPrefetchRows;
      if (ahead < c.n_dim) {  // a row's scales may straddle two lines
        _mm_prefetch(reinterpret_cast<const char*>(c.scale + ahead * c.n_scales), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(c.scale + (ahead + 1) * c.n_scales - 1), _MM_HINT_T0);
        if (S == kQ4_1) {
          _mm_prefetch(reinterpret_cast<const char*>(c.minimum + ahead * c.nb), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(c.minimum + (ahead + 1) * c.nb - 1), _MM_HINT_T0);
        }
      }
      if constexpr (S == kInt8) {
        row_scales[r] = _cvtsh_ss(c.scale[n + r]);
      } else {
        HalfToFloat(c.scale + (n + r) * c.n_scales, c.nb, d + r * c.nbp, c.nbp);
        if constexpr (S == kQ4_1) HalfToFloat(c.minimum + (n + r) * c.nb, c.nb, m + r * c.nbp, c.nbp);
      }
    }
  }

  const float* Offsets(Scheme s) const { return s == kQ4_0 ? d : m; }
};

// A register tile's end: the 4-bit offsets (m [R, nbp] times x's block sums) added, then y[0:G, n:n+R] stored.
template <Scheme S, int G, int R>
inline void Finish(const Call& c, __m256 (&acc)[G][R], int64_t n, const float* m, const float* row_scales) {
  if constexpr (IsQ4(S)) {
    for (int64_t b = 0; b < c.nbp; b += 8) {
      for (int r = 0; r < R; ++r) {
        const __m256 mv = _mm256_loadu_ps(m + r * c.nbp + b);
        for (int g = 0; g < G; ++g) acc[g][r] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(c.xsum + g * c.nbp + b), acc[g][r]);
      }
    }
  }
  Store<G, R, S == kInt8>(acc, row_scales, c.y + n, c.n_dim);
}

// Register path: y[0:G, n:n+R] for all G = M rows of x and rows n..n+R-1 of W, whose scales are in d [R, nbp]
// (minimums in m; for q4_0 m is d and xsum holds -8 times the sums).
template <Scheme S, int G, int R>
void RegTile(const Call& c, int64_t n, const float* d, const float* m, const float* row_scales) {
  const int64_t k_dim = c.k_dim, nbp = c.nbp, bb = BlockBytes(S);
  const uint8_t* rows = c.q + n * c.row_bytes;
  const uint8_t* ahead = rows + kPrefetchRows * c.row_bytes;
  __m256 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < c.nb; ++b) {
    if (((b * bb) & 63) == 0) {
      for (int r = 0; r < R; ++r) Prefetch(c, ahead + r * c.row_bytes + b * bb);
    }
    const float* xb = c.x + b * kBlock;
    for (int r = 0; r < R; ++r) {
      __m256 v[4];
      LoadBlock<S>(rows + r * c.row_bytes + b * bb, v);
      for (int g = 0; g < G; ++g) {
        const float* xg = xb + g * k_dim;
        __m256 t = _mm256_mul_ps(v[0], _mm256_loadu_ps(xg));
        t = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xg + 8), t);
        t = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xg + 16), t);
        t = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xg + 24), t);
        if constexpr (S == kInt8) {
          acc[g][r] = _mm256_add_ps(acc[g][r], t);
        } else {
          acc[g][r] = _mm256_fmadd_ps(t, _mm256_broadcast_ss(d + r * nbp + b), acc[g][r]);
        }
      }
    }
  }
  Finish<S, G, R>(c, acc, n, m, row_scales);
}

// Rows n0:n1 of W, R at a time (the rest one by one): each tile's scales and offsets into the scratch, then
// tile(std::integral_constant<int, rows>, n, scratch) computes y[:, n:n+rows]. Every path's loop over W.
template <Scheme S, int R, typename Tile>
void EachTile(const Call& c, int64_t n0, int64_t n1, Tile tile) {
  Scratch s(c);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    s.Load<S>(c, n, R);
    tile(std::integral_constant<int, R>(), n, s);
  }
  for (; n < n1; ++n) {
    s.Load<S>(c, n, 1);
    tile(std::integral_constant<int, 1>(), n, s);
  }
}

template <Scheme S, int G>
void RegChunk(const Call& c, int64_t n0, int64_t n1) {
  constexpr int R = G <= 2 ? 4 : 2;  // G * R accumulators, four vectors of a block and a product in 16 registers
  EachTile<S, R>(c, n0, n1, [&](auto rows, int64_t n, const Scratch& s) {
    RegTile<S, G, decltype(rows)::value>(c, n, s.d, s.Offsets(S), s.row_scales);
  });
}

// Int8-activation path (AVX-512 VNNI here, AVX2 below; what llama.cpp runs for these blocks): each block of 32
// values of a row of x is rounded to int8 once per call with its own scale, dx = max |x| / 127, and every block's
// dot product with W's integers is one vpdpbusd (unsigned bytes times signed bytes, summed four at a time into
// int32 lanes), two blocks per 512-bit instruction; acc += float(t) * d * dx. The 4-bit offsets use the float x's
// block sums, as the register path does. Not exact with respect to x (about 1/254 of a block's largest value per
// element): the caller asks for it (`int8_activations`), for drafts and quantized targets only.
#define SPECJAX_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

bool CpuHasVnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

// x rounded per block: xq [M, nb2 * 32] int8 and dx8 [M, nb2 * 8] (each block's scale eight times), both zero
// past nb blocks (nb2 = nb rounded up to even, so blocks go in pairs).
// For the AVX2 path's 4-bit pairs also xh [M, nb2 * 32], each pair of blocks as its values in the order the
// nibbles come (b's 0-15, b + 1's 0-15, b's 16-31, b + 1's 16-31), and dx4 [M, nb2 * 4] (each scale four times).
struct Int8Activations {
  int64_t nb2;
  std::unique_ptr<int8_t[]> xq, xh;
  std::unique_ptr<float[]> dx8, dx4;

  Int8Activations(const float* x, int64_t m_rows, int64_t k_dim, int64_t nb)
      : nb2((nb + 1) & ~int64_t{1}), xq(new int8_t[m_rows * nb2 * kBlock]()), xh(new int8_t[m_rows * nb2 * kBlock]()),
        dx8(new float[m_rows * nb2 * 8]()), dx4(new float[m_rows * nb2 * 4]()) {
    for (int64_t g = 0; g < m_rows; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        const float* p = x + g * k_dim + b * kBlock;
        float amax = 0.f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(p[i]));
        const float d = amax / 127.f, inverse = d != 0.f ? 1.f / d : 0.f;
        int8_t* dst = xq.get() + (g * nb2 + b) * kBlock;
        for (int i = 0; i < kBlock; ++i) {
          dst[i] = static_cast<int8_t>(std::clamp(std::nearbyint(p[i] * inverse), -127.f, 127.f));
        }
        std::fill_n(dx8.get() + (g * nb2 + b) * 8, 8, d);
        std::fill_n(dx4.get() + (g * nb2 + b) * 4, 4, d);
        int8_t* pair = xh.get() + (g * nb2 + (b & ~int64_t{1})) * kBlock + (b & 1) * 16;
        std::copy_n(dst, 16, pair);
        std::copy_n(dst + 16, 16, pair + 32);
      }
    }
  }
};

// Blocks b and b + 1 of a row of W as 64 bytes in value order (block b's 32, then block b + 1's), and their scales
// [d_b x8, d_b1 x8]; `one` (b + 1 == nb) reads block b only, the rest zero.
template <Scheme S>
SPECJAX_VNNI inline __m512i LoadPair(const uint8_t* p, bool one) {
  if constexpr (IsQ4(S)) {
    const __m256i raw = one ? _mm256_maskz_loadu_epi8(0xFFFF, p) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i mask = _mm256_set1_epi8(0xF);
    const __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // lo_b lo_b1 hi_b hi_b1
    return _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));             // lo_b hi_b lo_b1 hi_b1
  } else {
    return one ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p) : _mm512_loadu_si512(p);
  }
}

// y[0:G, n:n+R] on the int8-activation path (scales in d [R, nbp], offsets in m as RegTile takes them).
template <Scheme S, int G, int R>
SPECJAX_VNNI void VnniTile(const Call& c, const Int8Activations& a, int64_t n, const float* d, const float* m,
                           const float* row_scales) {
  const int64_t nbp = c.nbp, bb = BlockBytes(S), nb2 = a.nb2;
  const uint8_t* rows = c.q + n * c.row_bytes;
  const uint8_t* ahead = rows + kPrefetchRows * c.row_bytes;
  const __m512i pair_index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < c.nb; b += 2) {
    if (((b * bb) & 63) == 0) {
      for (int r = 0; r < R; ++r) {
        Prefetch(c, ahead + r * c.row_bytes + b * bb);
        if (bb == kBlock) Prefetch(c, ahead + r * c.row_bytes + b * bb + 32);
      }
    }
    const bool one = b + 1 == c.nb;
    for (int r = 0; r < R; ++r) {
      const __m512i w = LoadPair<S>(rows + r * c.row_bytes + b * bb, one);
      __m512i magnitude = w;
      __mmask64 negative = 0;
      if constexpr (!IsQ4(S)) {  // signed weights: |w| times x with w's sign (x is never -128)
        magnitude = _mm512_abs_epi8(w);
        negative = _mm512_movepi8_mask(w);
      }
      __m512 scale = _mm512_set1_ps(1.f);
      if constexpr (S != kInt8) {
        const __m128 pair = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(d + r * nbp + b)));
        scale = _mm512_permutexvar_ps(pair_index, _mm512_castps128_ps512(pair));
      }
      for (int g = 0; g < G; ++g) {
        __m512i xg = _mm512_loadu_si512(a.xq.get() + (g * nb2 + b) * kBlock);
        if constexpr (!IsQ4(S)) xg = _mm512_mask_sub_epi8(xg, negative, _mm512_setzero_si512(), xg);
        const __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude, xg);
        const __m512 dx = _mm512_loadu_ps(a.dx8.get() + (g * nb2 + b) * 8);
        acc[g][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scale, dx), acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < R; ++r) {
      float offset = 0.f;
      if constexpr (IsQ4(S)) {
        __m256 o = _mm256_setzero_ps();
        for (int64_t b = 0; b < nbp; b += 8) {
          o = _mm256_fmadd_ps(_mm256_loadu_ps(m + r * nbp + b), _mm256_loadu_ps(c.xsum + g * nbp + b), o);
        }
        offset = HorizontalSum(o);
      }
      const float dot = _mm512_reduce_add_ps(acc[g][r]);
      c.y[g * c.n_dim + n + r] = (S == kInt8 ? dot * row_scales[r] : dot) + offset;
    }
  }
}

template <Scheme S, int G>
void VnniChunk(const Call& c, const Int8Activations& a, int64_t n0, int64_t n1) {
  EachTile<S, 4>(c, n0, n1, [&](auto rows, int64_t n, const Scratch& s) {
    VnniTile<S, G, decltype(rows)::value>(c, a, n, s.d, s.Offsets(S), s.row_scales);
  });
}

// The same int8-activation path with AVX2 only (no VNNI): vpmaddubsw multiplies W's unsigned bytes by x's signed
// ones and sums pairs into int16 (at most 2 * 128 * 127, no saturation), vpmaddwd by ones sums pairs again into
// int32 lanes; acc += float(t) * d * dx. 4 bits: two blocks per step, 32 bytes of W masked into both blocks' low
// nibbles and both blocks' high ones against x in that order (Int8Activations::xh), lanes 0-3 block b's and 4-7
// block b + 1's. 8 bits: one block per step, |w| times x with x's sign flipped where w < 0. Here y[0:G, n:n+R]
// (scales in d [R, nbp], offsets in m as RegTile takes them).
template <Scheme S, int G, int R>
void Avx2Int8Tile(const Call& c, const Int8Activations& a, int64_t n, const float* d, const float* m,
                  const float* row_scales) {
  const int64_t nbp = c.nbp, bb = BlockBytes(S), nb2 = a.nb2;
  const uint8_t* rows = c.q + n * c.row_bytes;
  const uint8_t* ahead = rows + kPrefetchRows * c.row_bytes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
  if constexpr (IsQ4(S)) {  // two blocks at a time: 32 bytes of W give both blocks' low nibbles, then high ones
    const __m256i mask = _mm256_set1_epi8(0xF);
    const __m256i pair_index = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t b = 0; b < c.nb; b += 2) {
      if (((b * bb) & 63) == 0) {
        for (int r = 0; r < R; ++r) Prefetch(c, ahead + r * c.row_bytes + b * bb);
      }
      __m256i xlo[G], xhi[G];
      __m256 dx[G];
      for (int g = 0; g < G; ++g) {
        const int8_t* xp = a.xh.get() + (g * nb2 + b) * kBlock;
        xlo[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp));
        xhi[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + 32));
        dx[g] = _mm256_loadu_ps(a.dx4.get() + (g * nb2 + b) * 4);
      }
      const bool one = b + 1 == c.nb;
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows + r * c.row_bytes + b * bb;
        const __m256i raw = one ? _mm256_inserti128_si256(_mm256_setzero_si256(),
                                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), 0)
                                : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
        const __m128 d_pair = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(d + r * nbp + b)));
        const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d_pair), pair_index);
        for (int g = 0; g < G; ++g) {
          const __m256i t16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo[g]), _mm256_maddubs_epi16(hi, xhi[g]));
          const __m256i t = _mm256_madd_epi16(t16, ones);
          acc[g][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, dx[g]), acc[g][r]);
        }
      }
    }
  }
  for (int64_t b = 0; !IsQ4(S) && b < c.nb; ++b) {
    if (((b * bb) & 63) == 0) {
      for (int r = 0; r < R; ++r) Prefetch(c, ahead + r * c.row_bytes + b * bb);
    }
    __m256i xg[G];
    float dx[G];
    for (int g = 0; g < G; ++g) {
      xg[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq.get() + (g * nb2 + b) * kBlock));
      dx[g] = a.dx8[(g * nb2 + b) * 8];
    }
    for (int r = 0; r < R; ++r) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * c.row_bytes + b * bb));
      const __m256i magnitude = _mm256_sign_epi8(w, w);
      const float dw = S == kInt8 ? 1.f : d[r * nbp + b];
      for (int g = 0; g < G; ++g) {
        const __m256i xs = _mm256_sign_epi8(xg[g], w);
        const __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, xs), ones);
        acc[g][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(dw * dx[g]), acc[g][r]);
      }
    }
  }
  Finish<S, G, R>(c, acc, n, m, row_scales);
}

template <Scheme S, int G>
void Avx2Int8Chunk(const Call& c, const Int8Activations& a, int64_t n0, int64_t n1) {
  EachTile<S, G <= 2 ? 4 : 2>(c, n0, n1, [&](auto rows, int64_t n, const Scratch& s) {
    Avx2Int8Tile<S, G, decltype(rows)::value>(c, a, n, s.d, s.Offsets(S), s.row_scales);
  });
}

// Tile path: rows n..n+R-1 of W as floats into out [R, K].
template <Scheme S>
void Dequantize(const Call& c, int64_t n, int rows_in_tile, const Scratch& s, float* out) {
  const int64_t k_dim = c.k_dim, nbp = c.nbp, bb = BlockBytes(S);
  for (int r = 0; r < rows_in_tile; ++r) {
    const uint8_t* row = c.q + (n + r) * c.row_bytes;
    const uint8_t* ahead = row + kPrefetchRows * c.row_bytes;
    float* dst = out + r * k_dim;
    for (int64_t b = 0; b < c.nb; ++b) {
      if (((b * bb) & 63) == 0) Prefetch(c, ahead + b * bb);
      __m256 v[4];
      LoadBlock<S>(row + b * bb, v);
      const __m256 d = _mm256_broadcast_ss(S == kInt8 ? s.row_scales + r : s.d + r * nbp + b);
      __m256 offset = _mm256_setzero_ps();  // nib * d + offset, exact for q4_0: (nib - 8) * d needs 15 bits
      if constexpr (S == kQ4_1) offset = _mm256_broadcast_ss(s.m + r * nbp + b);
      if constexpr (S == kQ4_0) offset = _mm256_mul_ps(d, _mm256_set1_ps(-8.f));
      for (int i = 0; i < 4; ++i) {
        const __m256 value = IsQ4(S) ? _mm256_fmadd_ps(v[i], d, offset) : _mm256_mul_ps(v[i], d);
        _mm256_storeu_ps(dst + b * kBlock + 8 * i, value);
      }
    }
  }
}

// y[g, r] = x[g] . w[r] for G rows of x and R dequantized rows of W (the fp32 NT kernel's inner product).
template <int G, int R>
inline void DotTile(const float* x, const float* w, float* y, int64_t k_dim, int64_t n_dim) {
  __m256 acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < k_dim; j += 8) {
    __m256 v[R];
    for (int r = 0; r < R; ++r) v[r] = _mm256_loadu_ps(w + r * k_dim + j);
    for (int g = 0; g < G; ++g) {
      const __m256 xg = _mm256_loadu_ps(x + g * k_dim + j);
      for (int r = 0; r < R; ++r) acc[g][r] = _mm256_fmadd_ps(xg, v[r], acc[g][r]);
    }
  }
  Store<G, R, false>(acc, nullptr, y, n_dim);
}

template <int R>
void DotRows(const Call& c, const float* w, int64_t n) {
  int64_t g = 0;
  for (; g + 2 <= c.m_rows; g += 2) DotTile<2, R>(c.x + g * c.k_dim, w, c.y + g * c.n_dim + n, c.k_dim, c.n_dim);
  if (g < c.m_rows) DotTile<1, R>(c.x + g * c.k_dim, w, c.y + g * c.n_dim + n, c.k_dim, c.n_dim);
}

template <Scheme S>
void TileChunk(const Call& c, int64_t n0, int64_t n1) {
  EachTile<S, 4>(c, n0, n1, [&](auto rows, int64_t n, const Scratch& s) {
    constexpr int R = decltype(rows)::value;
    Dequantize<S>(c, n, R, s, s.rows);
    DotRows<R>(c, s.rows, n);
  });
}

template <Scheme S>
void Chunk(const Call& c, int64_t n0, int64_t n1) {
  if (c.int8_x != nullptr && c.int8_vnni) {
    switch (c.m_rows) {
      case 1: return VnniChunk<S, 1>(c, *c.int8_x, n0, n1);
      case 2: return VnniChunk<S, 2>(c, *c.int8_x, n0, n1);
      case 3: return VnniChunk<S, 3>(c, *c.int8_x, n0, n1);
      case 4: return VnniChunk<S, 4>(c, *c.int8_x, n0, n1);
    }
  }
  if (c.int8_x != nullptr) {
    switch (c.m_rows) {
      case 1: return Avx2Int8Chunk<S, 1>(c, *c.int8_x, n0, n1);
      case 2: return Avx2Int8Chunk<S, 2>(c, *c.int8_x, n0, n1);
      case 3: return Avx2Int8Chunk<S, 3>(c, *c.int8_x, n0, n1);
      case 4: return Avx2Int8Chunk<S, 4>(c, *c.int8_x, n0, n1);
    }
  }
  switch (c.m_rows) {
    case 1: return RegChunk<S, 1>(c, n0, n1);
    case 2: return RegChunk<S, 2>(c, n0, n1);
    case 3: return RegChunk<S, 3>(c, n0, n1);
    case 4: return RegChunk<S, 4>(c, n0, n1);
    default: return TileChunk<S>(c, n0, n1);
  }
  static_assert(kMaxRegRows == 4, "Chunk's cases");
}

void RunChunk(const Call& c, int64_t n0, int64_t n1) {
  switch (c.scheme) {
    case kInt8: return Chunk<kInt8>(c, n0, n1);
    case kQ8_0: return Chunk<kQ8_0>(c, n0, n1);
    case kQ4_0: return Chunk<kQ4_0>(c, n0, n1);
    case kQ4_1: return Chunk<kQ4_1>(c, n0, n1);
  }
}

// xsum[m, b] = scale * sum of x[m, 32 b : 32 b + 32], zero for b >= nb.
void BlockSums(const float* x, int64_t m_rows, int64_t k_dim, int64_t nb, int64_t nbp, float scale, float* xsum) {
  for (int64_t m = 0; m < m_rows; ++m) {
    for (int64_t b = 0; b < nbp; ++b) {
      float sum = 0.f;
      if (b < nb) {
        const float* p = x + m * k_dim + b * kBlock;
        const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)),
                                       _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)));
        sum = HorizontalSum(s) * scale;
      }
      xsum[m * nbp + b] = sum;
    }
  }
}

ffi::Error Quantized(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::AnyBuffer q, ffi::Buffer<ffi::F16> scale,
                     ffi::Buffer<ffi::F16> minimum, ffi::ResultBuffer<ffi::F32> y, int64_t scheme,
                     int64_t int8_activations) {
  if (scheme < kInt8 || scheme > kQ4_1) return ffi::Error::InvalidArgument("specjax_cpu_quant: unknown scheme");
  if (int8_activations < kFloatX || int8_activations > kInt8Avx2) {
    return ffi::Error::InvalidArgument("specjax_cpu_quant: int8_activations is 0 (off), 1 (on) or 2 (AVX2 only)");
  }
  const Scheme s = static_cast<Scheme>(scheme);
  const auto xd = x.dimensions(), qd = q.dimensions(), sd = scale.dimensions(), md = minimum.dimensions();
  if (xd.size() != 2 || qd.size() != 2 || sd.size() != 2) {
    return ffi::Error::InvalidArgument("specjax_cpu_quant takes 2-D x, q and scale");
  }
  const int64_t m_rows = xd[0], k_dim = xd[1], n_dim = qd[0];
  if (k_dim % kBlock != 0) return ffi::Error::InvalidArgument("specjax_cpu_quant: K is not a multiple of 32");
  const int64_t nb = k_dim / kBlock;
  const bool q4 = IsQ4(s);
  if (q.element_type() != (q4 ? ffi::DataType::U8 : ffi::DataType::S8) || qd[1] != (q4 ? k_dim / 2 : k_dim)) {
    return ffi::Error::InvalidArgument("specjax_cpu_quant: q's type or width does not fit the scheme and K");
  }
  const int64_t n_scales = s == kInt8 ? 1 : nb;
  if (sd[0] != n_dim || sd[1] != n_scales) {
    return ffi::Error::InvalidArgument("specjax_cpu_quant: scale's shape does not fit the scheme");
  }
  if (s == kQ4_1 && (md.size() != 2 || md[0] != n_dim || md[1] != nb)) {
    return ffi::Error::InvalidArgument("specjax_cpu_quant: q4_1 takes a minimum of the scale's shape");
  }
  if (m_rows > kMaxRows) return ffi::Error::InvalidArgument("specjax_cpu_quant: more rows than the kernel takes");
  if (m_rows == 0 || n_dim == 0) return ffi::Error::Success();
  if (k_dim == 0) {
    std::memset(y->typed_data(), 0, sizeof(float) * m_rows * n_dim);
    return ffi::Error::Success();
  }
  Call c;
  c.x = x.typed_data();
  c.q = static_cast<const uint8_t*>(q.untyped_data());
  c.scale = scale.typed_data();
  c.minimum = s == kQ4_1 ? minimum.typed_data() : nullptr;
  c.y = y->typed_data();
  c.scheme = s;
  c.m_rows = m_rows;
  c.k_dim = k_dim;
  c.n_dim = n_dim;
  c.nb = nb;
  c.nbp = (nb + 7) & ~int64_t{7};
  c.row_bytes = q4 ? k_dim / 2 : k_dim;
  c.n_scales = n_scales;
  std::unique_ptr<float[]> xsum;
  if (q4 && m_rows <= kMaxRegRows) {  // the tile path applies the offsets when it dequantizes
    xsum.reset(new float[m_rows * c.nbp]);
    BlockSums(c.x, m_rows, k_dim, nb, c.nbp, s == kQ4_0 ? -8.f : 1.f, xsum.get());
  }
  c.xsum = xsum.get();
  std::unique_ptr<Int8Activations> int8_x;
  if (int8_activations != kFloatX && m_rows <= kMaxRegRows) int8_x.reset(new Int8Activations(c.x, m_rows, k_dim, nb));
  c.int8_x = int8_x.get();
  static const bool has_vnni = CpuHasVnni();
  c.int8_vnni = int8_activations == kInt8X && has_vnni;
  // Chunks of at least kMinChunkWork, a multiple of the threads, at most four per thread.
  const int64_t threads = specjax::KernelThreads(pool);
  const int64_t work = n_dim * k_dim * (m_rows + 1) / 2;
  int64_t n_chunks = std::min<int64_t>(4 * threads, work / kMinChunkWork);
  n_chunks = n_chunks < threads ? (n_chunks < 2 ? 1 : n_chunks) : n_chunks / threads * threads;
  const int64_t rows_per_chunk = ((n_dim + n_chunks - 1) / n_chunks + 3) & ~int64_t{3};
  n_chunks = (n_dim + rows_per_chunk - 1) / rows_per_chunk;
  specjax::Parallel(pool, n_chunks, threads, [&c, rows_per_chunk](int64_t chunk) {
    const int64_t n0 = chunk * rows_per_chunk;
    RunChunk(c, n0, std::min(c.n_dim, n0 + rows_per_chunk));
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCpuQuant, Quantized,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F16>>()
                                  .Arg<ffi::Buffer<ffi::F16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("scheme")
                                  .Attr<int64_t>("int8_activations"));
