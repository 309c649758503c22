// Skinny matrix products for decoding on x86 CPUs: y[M,N] = x[M,K] @ W, M small (one row per token being scored).
//
// Decoding is bound by streaming the weights from memory once per step. XLA's CPU GEMM packs its operands and
// reaches a fraction of the machine's bandwidth for 2..32 rows; these kernels read each weight once, front to
// back, keep the M output rows in L2, and split the work over XLA's intra-op thread pool.
//   kNN: W is [K, N] (a Linear kernel).   kNT: W is [N, K] (a tied embedding used as the output head).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kMaxRows = 32;
constexpr int64_t kAccFloats = 1 << 16;  // accumulator floats per chunk (256 KiB: the core's L2 share)

// The AVX-512 form of RowsNN (where the CPU has it) for up to kGroup rows of x at a time: the 4 G broadcasts of x
// stay in registers and each load of W (16 floats of each of the four streams) serves all G rows, so W is read
// from L1 once per group instead of once per pair of rows; widths that are not a multiple of 16 end masked.
#define SPECJAX_AVX512 __attribute__((target("avx512f")))
constexpr int kGroup = 6;  // 4 * 6 broadcasts, 4 W vectors and 2 partial sums in 32 registers

template <int G>
SPECJAX_AVX512 void RowsNNGroup(const float* x, const float* w, float* acc, int64_t k_dim, int64_t n_dim,
                                int64_t width, int64_t k0, int64_t stride, int64_t n0) {
  const int64_t vec_end = width & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (width - vec_end)) - 1);
  for (int64_t k = k0; k < k0 + stride; ++k) {
    const float* w0 = w + k * n_dim + n0;
    const float* w1 = w0 + stride * n_dim;
    const float* w2 = w1 + stride * n_dim;
    const float* w3 = w2 + stride * n_dim;
    __m512 a[G][4];
    for (int g = 0; g < G; ++g)
      for (int i = 0; i < 4; ++i) a[g][i] = _mm512_set1_ps(x[g * k_dim + k + i * stride]);
    for (int64_t j = 0; j < width; j += 16) {
      const __mmask16 lanes = j < vec_end ? __mmask16{0xFFFF} : tail;
      const __m512 v0 = _mm512_maskz_loadu_ps(lanes, w0 + j), v1 = _mm512_maskz_loadu_ps(lanes, w1 + j);
      const __m512 v2 = _mm512_maskz_loadu_ps(lanes, w2 + j), v3 = _mm512_maskz_loadu_ps(lanes, w3 + j);
      for (int g = 0; g < G; ++g) {
        float* y = acc + g * width + j;
        __m512 p = _mm512_fmadd_ps(a[g][0], v0, _mm512_maskz_loadu_ps(lanes, y)), q = _mm512_mul_ps(a[g][1], v1);
        p = _mm512_fmadd_ps(a[g][2], v2, p);
        q = _mm512_fmadd_ps(a[g][3], v3, q);
        _mm512_mask_storeu_ps(y, lanes, _mm512_add_ps(p, q));
      }
    }
  }
}

// RowsNN's four-stream part for all M rows, kGroup rows at a time.
void RowsNNWide(const float* x, const float* w, float* acc, int64_t m_rows, int64_t k_dim, int64_t n_dim,
                int64_t width, int64_t k0, int64_t stride, int64_t n0) {
  for (int64_t m = 0; m < m_rows; m += kGroup) {
    const float* xg = x + m * k_dim;
    float* ag = acc + m * width;
    switch (std::min<int64_t>(kGroup, m_rows - m)) {
      case 1: RowsNNGroup<1>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
      case 2: RowsNNGroup<2>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
      case 3: RowsNNGroup<3>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
      case 4: RowsNNGroup<4>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
      case 5: RowsNNGroup<5>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
      default: RowsNNGroup<6>(xg, w, ag, k_dim, n_dim, width, k0, stride, n0); break;
    }
  }
  static_assert(kGroup == 6, "RowsNNWide's cases");
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

// The four-stream part of RowsNN with AVX2 for W [K, N]. The rows k0:k1 are cut into four quarters read
// side by side, one row of each per pass over the accumulator: four long front-to-back streams (four adjacent rows
// at a time read about 20% slower); two rows of x share each load of W.
void RowsNNPairs(const float* x, const float* w, float* acc, int64_t m_rows, int64_t k_dim, int64_t n_dim,
                 int64_t width, int64_t k0, int64_t stride, int64_t n0) {
  const int64_t vec_end = width & ~int64_t{7};
  for (int64_t k = k0; k < k0 + stride; ++k) {
    const float* w0 = w + k * n_dim + n0;
    const float* w1 = w0 + stride * n_dim;
    const float* w2 = w1 + stride * n_dim;
    const float* w3 = w2 + stride * n_dim;
    int64_t m = 0;
    for (; m + 2 <= m_rows; m += 2) {
      const float* xa = x + m * k_dim + k;
      const float* xb = xa + k_dim;
      const __m256 a0 = _mm256_broadcast_ss(xa), a1 = _mm256_broadcast_ss(xa + stride);
      const __m256 a2 = _mm256_broadcast_ss(xa + 2 * stride), a3 = _mm256_broadcast_ss(xa + 3 * stride);
      const __m256 b0 = _mm256_broadcast_ss(xb), b1 = _mm256_broadcast_ss(xb + stride);
      const __m256 b2 = _mm256_broadcast_ss(xb + 2 * stride), b3 = _mm256_broadcast_ss(xb + 3 * stride);
      float* ya = acc + m * width;
      float* yb = ya + width;
      for (int64_t j = 0; j < vec_end; j += 8) {
        const __m256 v0 = _mm256_loadu_ps(w0 + j), v1 = _mm256_loadu_ps(w1 + j);
        const __m256 v2 = _mm256_loadu_ps(w2 + j), v3 = _mm256_loadu_ps(w3 + j);
        __m256 p = _mm256_fmadd_ps(a0, v0, _mm256_loadu_ps(ya + j)), q = _mm256_mul_ps(a1, v1);
        p = _mm256_fmadd_ps(a2, v2, p);
        q = _mm256_fmadd_ps(a3, v3, q);
        _mm256_storeu_ps(ya + j, _mm256_add_ps(p, q));
        __m256 r = _mm256_fmadd_ps(b0, v0, _mm256_loadu_ps(yb + j)), s = _mm256_mul_ps(b1, v1);
        r = _mm256_fmadd_ps(b2, v2, r);
        s = _mm256_fmadd_ps(b3, v3, s);
        _mm256_storeu_ps(yb + j, _mm256_add_ps(r, s));
      }
      for (int64_t j = vec_end; j < width; ++j) {
        ya[j] += xa[0] * w0[j] + xa[stride] * w1[j] + xa[2 * stride] * w2[j] + xa[3 * stride] * w3[j];
        yb[j] += xb[0] * w0[j] + xb[stride] * w1[j] + xb[2 * stride] * w2[j] + xb[3 * stride] * w3[j];
      }
    }
    for (; m < m_rows; ++m) {
      const float* xa = x + m * k_dim + k;
      const __m256 a0 = _mm256_broadcast_ss(xa), a1 = _mm256_broadcast_ss(xa + stride);
      const __m256 a2 = _mm256_broadcast_ss(xa + 2 * stride), a3 = _mm256_broadcast_ss(xa + 3 * stride);
      float* ya = acc + m * width;
      for (int64_t j = 0; j < vec_end; j += 8) {
        __m256 p = _mm256_fmadd_ps(a0, _mm256_loadu_ps(w0 + j), _mm256_loadu_ps(ya + j));
        __m256 q = _mm256_mul_ps(a1, _mm256_loadu_ps(w1 + j));
        p = _mm256_fmadd_ps(a2, _mm256_loadu_ps(w2 + j), p);
        q = _mm256_fmadd_ps(a3, _mm256_loadu_ps(w3 + j), q);
        _mm256_storeu_ps(ya + j, _mm256_add_ps(p, q));
      }
      for (int64_t j = vec_end; j < width; ++j) ya[j] += xa[0] * w0[j] + xa[stride] * w1[j] + xa[2 * stride] * w2[j] + xa[3 * stride] * w3[j];
    }
  }
}

// acc[M, n0:n1] += x[M, k0:k1] @ W[k0:k1, n0:n1]: the four streams (RowsNNWide with AVX-512, else RowsNNPairs),
// then the rows of k0:k1 left over after four equal quarters.
void RowsNN(const float* x, const float* w, float* acc, int64_t m_rows, int64_t k_dim, int64_t n_dim, int64_t k0,
            int64_t k1, int64_t n0, int64_t n1) {
  const int64_t width = n1 - n0;
  const int64_t stride = (k1 - k0) / 4;  // rows between the four streams
  static const bool avx512 = CpuHasAvx512();
  (avx512 ? RowsNNWide : RowsNNPairs)(x, w, acc, m_rows, k_dim, n_dim, width, k0, stride, n0);
  for (int64_t k = k0 + 4 * stride; k < k1; ++k) {
    const float* wk = w + k * n_dim + n0;
    for (int64_t m = 0; m < m_rows; ++m) {
      const float xv = x[m * k_dim + k];
      float* ya = acc + m * width;
      for (int64_t j = 0; j < width; ++j) ya[j] += xv * wk[j];
    }
  }
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// y[g, n + q * i] = x[g] . W[n + q * i] for G rows of x (G = 1 or 2) and the four rows i = 0..3 of W, a quarter
// q apart: one row of each stream per call, each load of W shared by the G rows of x.
template <int G>
inline void DotFourStreams(const float* x, const float* r, float* y, int64_t k_dim, int64_t n_dim, int64_t quarter,
                           int64_t vec_end) {
  const float* rows[4] = {r, r + quarter * k_dim, r + 2 * quarter * k_dim, r + 3 * quarter * k_dim};
  __m256 c[G][4];
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < 4; ++i) c[g][i] = _mm256_setzero_ps();
  for (int64_t j = 0; j < vec_end; j += 8) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(rows[i] + j);
    for (int g = 0; g < G; ++g) {
      const __m256 xg = _mm256_loadu_ps(x + g * k_dim + j);
      for (int i = 0; i < 4; ++i) c[g][i] = _mm256_fmadd_ps(xg, v[i], c[g][i]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < 4; ++i) {
      float sum = HorizontalSum(c[g][i]);
      for (int64_t j = vec_end; j < k_dim; ++j) sum += x[g * k_dim + j] * rows[i][j];
      y[g * n_dim + i * quarter] = sum;
    }
  }
}

// y[M, n0:n1] = x @ W[n0:n1]^T for W [N, K]. The range is cut into four quarters walked side by side, one row
// of each at a time: four long front-to-back streams (four adjacent rows at a time read about 40% slower). Each
// row of W is read from memory once, and from L1 for every further pair of x rows.
void RowsNT(const float* x, const float* w, float* y, int64_t m_rows, int64_t k_dim, int64_t n_dim, int64_t n0,
            int64_t n1) {
  const int64_t vec_end = k_dim & ~int64_t{7};
  const int64_t quarter = (n1 - n0) / 4;
  for (int64_t i = 0; i < quarter; ++i) {
    const float* r = w + (n0 + i) * k_dim;
    int64_t m = 0;
    for (; m + 2 <= m_rows; m += 2) {
      DotFourStreams<2>(x + m * k_dim, r, y + m * n_dim + n0 + i, k_dim, n_dim, quarter, vec_end);
    }
    if (m < m_rows) DotFourStreams<1>(x + m * k_dim, r, y + m * n_dim + n0 + i, k_dim, n_dim, quarter, vec_end);
  }
  for (int64_t n = n0 + 4 * quarter; n < n1; ++n) {
    const float* r0 = w + n * k_dim;
    for (int64_t m = 0; m < m_rows; ++m) {
      float s = 0.f;
      for (int64_t j = 0; j < k_dim; ++j) s += x[m * k_dim + j] * r0[j];
      y[m * n_dim + n] = s;
    }
  }
}

// The work of one call, cut into chunks for specjax::Parallel:
//   kNT: chunk c is a range of output columns (rows of W), written straight into y.
//   kNN: chunk c = (column block, row slice s); slice s accumulates into its own partial sum, added up at the end.
struct Work {
  const float* x;
  const float* w;
  float* y;
  int64_t m_rows, k_dim, n_dim, n_chunks;
  bool transposed;
  int64_t cols_per_chunk;                 // kNT
  int64_t slices, block_cols, n_blocks;   // kNN
  std::unique_ptr<float[]> partial;       // kNN: [slices, M, N]

  void Run(int64_t c) {
    if (transposed) {
      const int64_t n0 = c * cols_per_chunk;
      RowsNT(x, w, y, m_rows, k_dim, n_dim, n0, std::min(n_dim, n0 + cols_per_chunk));
      return;
    }
    const int64_t block = c / slices, slice = c % slices;
    const int64_t n0 = block * block_cols, n1 = std::min(n_dim, n0 + block_cols);
    const int64_t rows = (k_dim + slices - 1) / slices, k0 = slice * rows, k1 = std::min(k_dim, k0 + rows);
    float* acc = partial.get() + (slice * n_blocks + block) * m_rows * block_cols;
    std::memset(acc, 0, sizeof(float) * m_rows * (n1 - n0));
    if (k0 < k1) RowsNN(x, w, acc, m_rows, k_dim, n_dim, k0, k1, n0, n1);
  }

  void Reduce() {
    for (int64_t block = 0; block < n_blocks; ++block) {
      const int64_t n0 = block * block_cols, width = std::min(n_dim, n0 + block_cols) - n0;
      for (int64_t m = 0; m < m_rows; ++m) {
        float* out = y + m * n_dim + n0;
        const float* first = partial.get() + block * m_rows * block_cols + m * width;
        std::memcpy(out, first, sizeof(float) * width);
        for (int64_t s = 1; s < slices; ++s) {
          const float* more = partial.get() + (s * n_blocks + block) * m_rows * block_cols + m * width;
          for (int64_t j = 0; j < width; ++j) out[j] += more[j];
        }
      }
    }
  }
};

ffi::Error Linear(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                  ffi::ResultBuffer<ffi::F32> y, bool transposed) {
  const auto xd = x.dimensions(), wd = w.dimensions();
  if (xd.size() != 2 || wd.size() != 2) return ffi::Error::InvalidArgument("specjax_cpu_linear takes 2-D x and w");
  const int64_t m_rows = xd[0], k_dim = xd[1];
  const int64_t n_dim = transposed ? wd[0] : wd[1];
  if ((transposed ? wd[1] : wd[0]) != k_dim) {
    return ffi::Error::InvalidArgument("specjax_cpu_linear: x and w disagree on the contracted dimension");
  }
  if (m_rows > kMaxRows) return ffi::Error::InvalidArgument("specjax_cpu_linear: more rows than the kernel takes");
  if (m_rows == 0 || n_dim == 0) return ffi::Error::Success();
  if (k_dim == 0) {
    std::memset(y->typed_data(), 0, sizeof(float) * m_rows * n_dim);
    return ffi::Error::Success();
  }
  const int64_t threads = specjax::KernelThreads(pool);
  Work work;
  work.x = x.typed_data();
  work.w = w.typed_data();
  work.y = y->typed_data();
  work.m_rows = m_rows;
  work.k_dim = k_dim;
  work.n_dim = n_dim;
  work.transposed = transposed;
  if (transposed) {
    const int64_t per = (n_dim + threads * 4 - 1) / (threads * 4);
    work.cols_per_chunk = std::max<int64_t>(64, (per + 3) & ~int64_t{3});
    work.n_chunks = (n_dim + work.cols_per_chunk - 1) / work.cols_per_chunk;
  } else {
    work.slices = std::min(threads, std::max<int64_t>(1, k_dim / 64));
    work.block_cols = std::min(n_dim, std::max<int64_t>(256, (kAccFloats / m_rows) & ~int64_t{7}));
    work.n_blocks = (n_dim + work.block_cols - 1) / work.block_cols;
    work.n_chunks = work.n_blocks * work.slices;
    work.partial.reset(new float[work.slices * work.n_blocks * m_rows * work.block_cols]);
  }
  specjax::Parallel(pool, work.n_chunks, threads, [&work](int64_t c) { work.Run(c); });
  if (!transposed) work.Reduce();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCpuLinear, Linear,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("transposed"));
