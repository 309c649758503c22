// The packed kernel's inner loop (specjax/kernels/cpu_packed.cc) outside JAX, over tiles the size of SmolLM2-135M's
// packed weights (30 layers of qkv, o, gate+up and down, and the tied head: 538 MB), two threads each taking half of
// every weight's tiles: ms per pass at 1, 2, 5, 9 and 17 rows, with no software prefetch and with each step
// prefetching the tile row `distance` rows ahead into L2 (T1) or L1 (T0) (docs/results.md section 44); "shared":
// several groups of rows take turns over blocks of 64 tile rows, each prefetching its share of the next block (the
// kernel since section 45).
//
//   g++ -O3 -mavx2 -mfma -std=c++17 -pthread docs/diagnostics/packed_prefetch.cc -o /tmp/packed_prefetch
//   /tmp/packed_prefetch            # the whole model;  /tmp/packed_prefetch head  # the tied head alone
//   HUGE=1 /tmp/packed_prefetch     # the tiles in transparent huge pages (madvise)
//   /tmp/packed_prefetch l2         # the same bytes from one 2.2 MB weight read 240 times: the FMAs, not memory
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

constexpr int64_t kTile = 48;
constexpr int kVecs = 3;
constexpr int kGroupRows = 9;
constexpr int64_t kBlockRows = 1024;

struct Prefetch { int distance; int hint; bool shared = false; };   // distance 0: none

template <int R>
__attribute__((target("avx512f"))) void TileRows(const float* x, int64_t k_dim, const float* tile, int64_t kc,
                                                 float* y, int64_t ldy, bool accumulate, Prefetch pf,
                                                 const float* next, int pass, int passes) {
  __m512 acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v)
      acc[r][v] = accumulate ? _mm512_loadu_ps(y + r * ldy + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const float* w = tile + k * kTile;
    if (pf.distance) {
      const float* row = passes > 1 ? next + (pass * kc + k) / passes * kTile : w + pf.distance * kTile;
      const char* ahead = reinterpret_cast<const char*>(row);
      for (int line = 0; line < 3; ++line) {
        if (pf.hint == 1) _mm_prefetch(ahead + 64 * line, _MM_HINT_T1);
        else _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
      }
    }
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16), w2 = _mm512_loadu_ps(w + 32);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * k_dim + k]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, w2, acc[r][2]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
}

__attribute__((target("avx512f"))) void Rows(int rows, const float* x, int64_t k_dim, const float* tile, int64_t kc,
                                             float* y, int64_t ldy, bool acc, Prefetch pf, const float* next,
                                             int pass, int passes) {
  switch (rows) {
    case 1: TileRows<1>(x, k_dim, tile, kc, y, ldy, acc, pf, next, pass, passes); break;
    case 2: TileRows<2>(x, k_dim, tile, kc, y, ldy, acc, pf, next, pass, passes); break;
    case 5: TileRows<5>(x, k_dim, tile, kc, y, ldy, acc, pf, next, pass, passes); break;
    case 8: TileRows<8>(x, k_dim, tile, kc, y, ldy, acc, pf, next, pass, passes); break;
    default: TileRows<9>(x, k_dim, tile, kc, y, ldy, acc, pf, next, pass, passes); break;
  }
}

struct Weight { int64_t k, tiles; float* data; };

void Tiles(const float* x, const Weight& w, float* y, int64_t rows, int64_t t0, int64_t t1, Prefetch pf) {
  const int64_t groups = (rows + kGroupRows - 1) / kGroupRows;
  for (int64_t t = t0; t < t1; ++t) {
    const float* tile = w.data + t * w.k * kTile;
    const bool shared = pf.shared && groups > 1;
    const int64_t block = shared ? 64 : kBlockRows;
    for (int64_t k0 = 0; k0 < w.k; k0 += block) {
      const int64_t kc = std::min(block, w.k - k0);
      int64_t m = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const int r = static_cast<int>((rows - m + groups - g - 1) / (groups - g));
        Rows(r, x + m * w.k + k0, w.k, tile + k0 * kTile, kc, y + m * w.tiles * kTile + t * kTile, w.tiles * kTile,
             k0 > 0, pf, tile + (k0 + kc) * kTile, static_cast<int>(g), shared ? static_cast<int>(groups) : 1);
        m += r;
      }
    }
  }
}

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes;   // [K, N] of each packed weight
  const bool l2 = argc > 1 && std::string(argv[1]) == "l2";
  if (l2) {
    shapes.assign(240, {576, 960});
  } else if (argc < 2) {
    for (int layer = 0; layer < 30; ++layer) {
      shapes.insert(shapes.end(), {{576, 960}, {576, 576}, {576, 3072}, {1536, 576}});
    }
  }
  if (!l2) shapes.push_back({576, 49152});
  std::vector<Weight> weights;
  double bytes = 0;
  for (auto [k, n] : shapes) {
    const int64_t tiles = (n + kTile - 1) / kTile;
    const size_t size = (tiles * k * kTile * 4 + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    float* data = l2 && !weights.empty() ? weights[0].data : static_cast<float*>(aligned_alloc(2 << 20, size));
    if (getenv("HUGE")) madvise(data, size, MADV_HUGEPAGE);
    for (int64_t i = 0; i < tiles * k * kTile; ++i) data[i] = static_cast<float>(i % 13) * 0.01f;
    weights.push_back({k, tiles, data});
    bytes += tiles * k * kTile * 4.0;
  }
  std::vector<float> x(64 * 1536, 0.5f), y(64 * 49200), y2(64 * 49200);
  std::printf("tiles %.0f MB%s\n", bytes / 1e6, getenv("HUGE") ? " (huge pages)" : "");
  const Prefetch variants[] = {{0, 0}, {8, 0}, {16, 0}, {8, 1}, {16, 1}, {24, 1}, {16, 1, true}};
  for (int rows : {1, 2, 5, 9, 17}) {
    for (const Prefetch pf : variants) {
      std::vector<double> ms;
      for (int rep = 0; rep < 7; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        std::thread helper([&] {
          for (auto& w : weights) Tiles(x.data(), w, y2.data(), rows, w.tiles / 2, w.tiles, pf);
        });
        for (auto& w : weights) Tiles(x.data(), w, y.data(), rows, 0, w.tiles / 2, pf);
        helper.join();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(ms.begin(), ms.end());
      const std::string how = pf.distance ? std::to_string(pf.distance) + " rows ahead, " + (pf.hint ? "T1" : "T0")
                                          : std::string("none");
      const std::string shown = how + (pf.shared ? ", shared blocks" : "");
      std::printf("rows %2d, prefetch %s: %.1f ms (min %.1f)\n", rows, shown.c_str(), ms[3], ms[0]);
    }
  }
}
