// Packed float32 linear for 1..64 rows on AVX-512 CPUs: y[M, n] = x[M, K] @ W[K, n], W stored as column tiles
// [T, K, 48] (`specjax.kernels.packed`): tile t holds W[:, 48t : 48t + 48] row after row, so one tile is one
// contiguous stream and every output of a tile stays in registers for all of K.
//
// A Linear kernel [K, N] read 48 columns at a time jumps N * 4 bytes per row, and the hardware prefetchers do not
// keep up: a register-tiled 17-row product on it reached 45-65 GFLOP/s on one Zen 4 core, 90-110 on the same
// numbers tiled (this project's CPU, peak about 113; docs/diagnostics/packed_linear.py times the kernels in JAX).
// Rows go through in groups of at most 9: 9 x 3 accumulators, 3 loads of W and 9 broadcasts of x per row of the
// tile (31 of the 32 vector registers); several groups take turns over blocks of the tile small enough to stay in
// L1.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kTile = 48;          // floats per tile row: 3 AVX-512 vectors
constexpr int kVecs = 3;
constexpr int kGroupRows = 9;          // rows of x per pass over a tile: 27 accumulators, 3 W, 1 x
constexpr int64_t kMaxRows = 64;
// Rows of K per pass: one group passes over up to 1024 (192 KiB of a tile); several take turns over blocks of 64
// (12 KiB, L1-resident for the groups after the first).
constexpr int64_t kBlockRows = 1024, kSharedBlockRows = 64;
// One group prefetches the tile row 16 rows (3 KiB) ahead into L2: without it an Intel AVX-512 core's prefetchers
// fall behind once a step holds 5 or more rows' FMAs (17 rows over SmolLM2's weights, two cores: 43-47 against
// 33 ms; 5 rows 32-35 against 23, the memory floor; docs/results.md section 44). Several groups share the
// prefetch of the next block, each its 1/G: memory streams on while later groups compute from L1 (17 rows,
// 2 MB pages: 25-27 against 27-28 ms; section 45).
constexpr int64_t kPrefetchRows = 16;

#define SPECJAX_AVX512 __attribute__((target("avx512f")))

// Where pass `pass` of `passes` over a block prefetches: at step k, the lines from byte (pass * kc + k) * 192 /
// passes of `ahead` (one pointer stepped by a constant: fewer live registers than a row and its remainder).
// Passed by reference: by value, the caller stored it as 8-byte fields and copied it as 16 bytes, a failed
// store forward behind the group's 27 result stores at every call (9% of a 17-row call's time; section 46).
struct Prefetch {
  const float* ahead;
  int64_t pass, passes;
};

// y[R, tile] (+)= x[R, k0:k0+kc] @ tile[k0:k0+kc, :48], writing only the lanes in `lanes`; accumulate adds to
// what y holds (blocks of K after the first).
template <int R>
SPECJAX_AVX512 void TileRows(const float* x, int64_t k_dim, const float* tile, int64_t kc, float* y, int64_t ldy,
                             const __mmask16 (&lanes)[kVecs], bool accumulate, const Prefetch& pf) {
  __m512 acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v)
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(lanes[v], y + r * ldy + 16 * v) : _mm512_setzero_ps();
  const int64_t stride = kTile * static_cast<int64_t>(sizeof(float)) / pf.passes;   // bytes ahead per step
  const char* ahead = reinterpret_cast<const char*>(pf.ahead) + pf.pass * kc * stride;  // a hint: never faults
  const bool whole_rows = pf.passes == 1;
  for (int64_t k = 0; k < kc; ++k, ahead += stride) {
    const float* w = tile + k * kTile;
    _mm_prefetch(ahead, _MM_HINT_T1);
    _mm_prefetch(ahead + 64, _MM_HINT_T1);
    if (whole_rows) _mm_prefetch(ahead + 128, _MM_HINT_T1);
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16), w2 = _mm512_loadu_ps(w + 32);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * k_dim + k]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, w2, acc[r][2]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) _mm512_mask_storeu_ps(y + r * ldy + 16 * v, lanes[v], acc[r][v]);
}

SPECJAX_AVX512 void Rows(int rows, const float* x, int64_t k_dim, const float* tile, int64_t kc, float* y,
                         int64_t ldy, const __mmask16 (&lanes)[kVecs], bool accumulate, const Prefetch& pf) {
  switch (rows) {
    case 1: TileRows<1>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 2: TileRows<2>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 3: TileRows<3>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 4: TileRows<4>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 5: TileRows<5>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 6: TileRows<6>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 7: TileRows<7>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    case 8: TileRows<8>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
    default: TileRows<9>(x, k_dim, tile, kc, y, ldy, lanes, accumulate, pf); break;
  }
  static_assert(kGroupRows == 9, "Rows' cases");
}

// Tiles t0:t1 for all M rows: per block of K, every group of rows (as even as ceil(M / 9) groups can be) passes
// over the tile's block.
SPECJAX_AVX512 void Tiles(const float* x, const float* tiles, float* y, int64_t m_rows, int64_t k_dim, int64_t n_dim,
                          int64_t t0, int64_t t1) {
  const int64_t groups = (m_rows + kGroupRows - 1) / kGroupRows;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t width = std::min(kTile, n_dim - t * kTile);
    __mmask16 lanes[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      const int64_t n = std::clamp<int64_t>(width - 16 * v, 0, 16);
      lanes[v] = static_cast<__mmask16>((uint32_t{1} << n) - 1);
    }
    const float* tile = tiles + t * k_dim * kTile;
    const int64_t block = groups == 1 ? kBlockRows : kSharedBlockRows;
    for (int64_t k0 = 0; k0 < k_dim; k0 += block) {
      const int64_t kc = std::min(block, k_dim - k0);
      // the tiles follow one another in memory: past a tile's last block comes the next tile's first
      const float* ahead = tile + (groups == 1 ? k0 + kPrefetchRows : k0 + kc) * kTile;
      int64_t m = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const int rows = static_cast<int>((m_rows - m + groups - g - 1) / (groups - g));
        Rows(rows, x + m * k_dim + k0, k_dim, tile + k0 * kTile, kc, y + m * n_dim + t * kTile, n_dim, lanes, k0 > 0,
             Prefetch{ahead, g, groups});
        m += rows;
      }
    }
  }
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

ffi::Error PackedLinear(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> tiles,
                        ffi::ResultBuffer<ffi::F32> y) {
  const auto xd = x.dimensions(), td = tiles.dimensions(), yd = y->dimensions();
  if (xd.size() != 2 || td.size() != 3 || yd.size() != 2 || td[2] != kTile) {
    return ffi::Error::InvalidArgument("specjax_cpu_packed_linear takes x [M, K], tiles [T, K, 48], y [M, N]");
  }
  const int64_t m_rows = xd[0], k_dim = xd[1], n_dim = yd[1], n_tiles = td[0];
  if (td[1] != k_dim || yd[0] != m_rows) {
    return ffi::Error::InvalidArgument("specjax_cpu_packed_linear: x, tiles and y disagree on M or K");
  }
  if (n_dim > n_tiles * kTile || n_dim <= (n_tiles - 1) * kTile) {
    return ffi::Error::InvalidArgument("specjax_cpu_packed_linear: N does not match the number of tiles");
  }
  if (m_rows > kMaxRows) {
    return ffi::Error::InvalidArgument("specjax_cpu_packed_linear: more rows than the kernel takes");
  }
  static const bool avx512 = CpuHasAvx512();
  if (!avx512) return ffi::Error::InvalidArgument("specjax_cpu_packed_linear needs AVX-512 (see packed.available())");
  if (m_rows == 0 || n_dim == 0) return ffi::Error::Success();
  float* out = y->typed_data();
  if (k_dim == 0) {
    std::fill(out, out + m_rows * n_dim, 0.f);
    return ffi::Error::Success();
  }
  const int64_t threads = specjax::KernelThreads(pool);
  const int64_t n_chunks = std::min(n_tiles, threads * 8);
  const int64_t per_chunk = (n_tiles + n_chunks - 1) / n_chunks;
  const float* xs = x.typed_data();
  const float* ws = tiles.typed_data();
  specjax::Parallel(pool, (n_tiles + per_chunk - 1) / per_chunk, threads, [&](int64_t c) {
    Tiles(xs, ws, out, m_rows, k_dim, n_dim, c * per_chunk, std::min(n_tiles, (c + 1) * per_chunk));
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCpuPackedLinear, PackedLinear,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
