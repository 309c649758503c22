// Causal attention of a few queries (a decode step, a K+1 verification) against one layer of the KV cache, on x86
// CPUs with AVX2.
//
// XLA:CPU runs the blockwise online-softmax attention as a loop of small einsums, transposes and masks: about 15%
// of a SmolLM2-135M decode step while touching a few hundred KB. Here each task is (row, kv head, run of queries):
// it reads that kv head's keys and values once for all those queries and all the query heads of the group.
//   q [B, T, H, D], k and v [L, B, S, KV, D] (every layer's cache; `layer` picks one), positions [B, T] ->
//   out [B, T, H, D]; query head h reads kv head h / (H / KV). A query at position p sees cache entries 0..p.
// The tree variant (specjax_cpu_tree_attention) also takes ancestors [B, T, N] (uint8: the query's row of the tree's
// ancestor matrix) and roots [B] (the tree's first slot): of entries 0..p, a query then sees those before the root
// and the tree slots root + j with ancestors[j] set, none at or after root + N.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kWorkPerThread = 1 << 15;  // multiply-adds below which a helper thread costs more than it saves
constexpr int64_t kPrefetchRows = 16;        // cache rows requested ahead: the rows are strided, and a decode step
                                             // finds them in DRAM (the weights streamed through the caches since)

// Asks for the dim floats at `row` to be brought into the caches.
inline void PrefetchRow(const float* row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16) _mm_prefetch(reinterpret_cast<const char*>(row + j), _MM_HINT_T0);
}

// Cache entries a query at `position` sees: 0..position, within the cache; none for a negative position.
inline int64_t VisibleKeys(int32_t position, int64_t size) {
  return std::min<int64_t>(std::max<int64_t>(position, -1), size - 1) + 1;
}

inline float Dot(const float* a, const float* b, int64_t dim) {
  float sum = 0.f;
  for (int64_t j = 0; j < dim; ++j) sum += a[j] * b[j];
  return sum;
}

// scores[key] = query . keys[key] * scale for key < n, eight keys at a time (eight accumulators reduced together,
// instead of one horizontal sum per key). `prefetch`: the pass that first touches these rows asks for later ones.
void Scores(const float* query, const float* keys, int64_t key_stride, int64_t n, int64_t dim, float scale,
            bool prefetch, float* scores) {
  int64_t key = 0;
  if (dim % 8 == 0) {
    for (; key + 8 <= n; key += 8) {
      const float* rows = keys + key * key_stride;
      if (prefetch) {
        for (int64_t r = kPrefetchRows; r < kPrefetchRows + 8 && key + r < n; ++r) PrefetchRow(rows + r * key_stride, dim);
      }
      __m256 acc[8];
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t j = 0; j < dim; j += 8) {
        const __m256 q = _mm256_loadu_ps(query + j);
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(q, _mm256_loadu_ps(rows + r * key_stride + j), acc[r]);
      }
      const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                                        _mm256_permute2f128_ps(s0123, s4567, 0x31));
      _mm256_storeu_ps(scores + key, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
    }
  }
  for (; key < n; ++key) scores[key] = Dot(query, keys + key * key_stride, dim) * scale;
}

// e^x for x <= 0, eight at a time: 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, e^r by its degree-7 Taylor
// series (relative error below 2e-7); x below -87 gives about e^-87, far under any weight that matters.
inline __m256 ExpNonPositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2 in two parts keeps r exact
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// scores[0:n] = exp(scores - max); returns their sum.
float SoftmaxNumerators(float* scores, int64_t n) {
  __m256 max_v = _mm256_set1_ps(-INFINITY);   // eight running maxima: one serial chain of n compares was slower
  int64_t tail = 0;
  for (; tail + 8 <= n; tail += 8) max_v = _mm256_max_ps(max_v, _mm256_loadu_ps(scores + tail));
  alignas(32) float maxima[8];
  _mm256_store_ps(maxima, max_v);
  float max_score = *std::max_element(maxima, maxima + 8);
  for (; tail < n; ++tail) max_score = std::max(max_score, scores[tail]);
  max_v = _mm256_set1_ps(max_score);
  __m256 sum_v = _mm256_setzero_ps();
  int64_t key = 0;
  for (; key + 8 <= n; key += 8) {
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(scores + key), max_v));
    _mm256_storeu_ps(scores + key, e);
    sum_v = _mm256_add_ps(sum_v, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum_v);
  float sum = 0.f;
  for (float lane : lanes) sum += lane;
  for (; key < n; ++key) {
    scores[key] = std::exp(scores[key] - max_score);
    sum += scores[key];
  }
  return sum;
}

// out[0:dim] = sum over key < n of weights[key] * values[key] * inverse_total, 64 columns at a time in registers.
void WeightedSum(const float* weights, const float* values, int64_t value_stride, int64_t n, int64_t dim,
                 float inverse_total, bool prefetch, float* out) {
  int64_t j0 = 0;
  for (; j0 + 64 <= dim; j0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t key = 0; key < n; ++key) {
      const float* row = values + key * value_stride + j0;
      if (prefetch && key + kPrefetchRows < n) PrefetchRow(row + kPrefetchRows * value_stride, 64);
      const __m256 w = _mm256_set1_ps(weights[key]);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * c), acc[c]);
    }
    const __m256 scale = _mm256_set1_ps(inverse_total);
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + j0 + 8 * c, _mm256_mul_ps(acc[c], scale));
  }
  for (int64_t j = j0; j < dim; ++j) {
    float sum = 0.f;
    for (int64_t key = 0; key < n; ++key) sum += weights[key] * values[key * value_stride + j];
    out[j] = sum * inverse_total;
  }
}

struct Shapes {
  int64_t batch, t_len, n_heads, head_dim, n_layers, size, n_kv, groups;
};

// A token tree's masks: per query its row of ancestors (n_tree entries), per batch row the root's slot.
struct Tree {
  const uint8_t* ancestors;
  const int32_t* roots;
  int64_t n_tree;
};

// Whether the query whose ancestor row is `row` sees tree key `key` (key >= root).
inline bool SeesTreeKey(const uint8_t* row, int64_t root, int64_t n_tree, int64_t key) {
  return key - root < n_tree && row[key - root] != 0;
}

// scores[key] = -inf for the keys in root..n-1 the query does not see; returns how many of 0..n-1 it sees.
int64_t MaskTreeScores(const uint8_t* row, int64_t root, int64_t n_tree, int64_t n, float* scores) {
  int64_t seen = std::min(std::max<int64_t>(root, 0), n);
  for (int64_t key = seen; key < n; ++key) {
    if (SeesTreeKey(row, root, n_tree, key)) {
      ++seen;
    } else {
      scores[key] = -INFINITY;
    }
  }
  return seen;
}

// Queries t0..t1-1 of row b, with the `groups` query heads of kv head kv. The first query's passes bring the kv
// head's rows into the caches; the others find them there. `tree` (null for a chain) masks the tree's slots.
void AttendQueries(const Shapes& s, const float* q, const float* k_layer, const float* v_layer,
                   const int32_t* positions, const Tree* tree, float* out, int64_t b, int64_t t0, int64_t t1,
                   int64_t kv, std::vector<float>& scores) {
  const int64_t dim = s.head_dim, stride = s.n_kv * dim;
  const float* keys = k_layer + (b * s.size * s.n_kv + kv) * dim;
  const float* values = v_layer + (b * s.size * s.n_kv + kv) * dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  scores.resize(s.size);
  bool first = true;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t visible = VisibleKeys(positions[b * s.t_len + t], s.size);
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t offset = ((b * s.t_len + t) * s.n_heads + kv * s.groups + g) * dim;
      if (visible == 0) {  // a query that sees no entry: zeros
        std::memset(out + offset, 0, sizeof(float) * dim);
        continue;
      }
      if (first) {
        for (int64_t key = 0; key < std::min(kPrefetchRows, visible); ++key) PrefetchRow(keys + key * stride, dim);
      }
      Scores(q + offset, keys, stride, visible, dim, scale, first, scores.data());
      if (first) {
        for (int64_t key = 0; key < std::min(kPrefetchRows, visible); ++key) PrefetchRow(values + key * stride, dim);
      }
      const uint8_t* row = tree ? tree->ancestors + (b * s.t_len + t) * tree->n_tree : nullptr;
      const int64_t root = tree ? tree->roots[b] : 0;
      if (tree && MaskTreeScores(row, root, tree->n_tree, visible, scores.data()) == 0) {
        std::memset(out + offset, 0, sizeof(float) * dim);
        continue;
      }
      const float total = SoftmaxNumerators(scores.data(), visible);
      if (tree) {  // masked keys' weights are exactly zero (the vector exp floors at e^-87)
        for (int64_t key = std::max<int64_t>(root, 0); key < visible; ++key) {
          if (!SeesTreeKey(row, root, tree->n_tree, key)) scores[key] = 0.f;
        }
      }
      WeightedSum(scores.data(), values, stride, visible, dim, 1.0f / total, first, out + offset);
      first = false;
    }
  }
}

ffi::Error Run(ffi::ThreadPool& pool, ffi::Buffer<ffi::F32>& q, ffi::Buffer<ffi::F32>& k, ffi::Buffer<ffi::F32>& v,
               ffi::Buffer<ffi::S32>& positions, const Tree* tree, ffi::ResultBuffer<ffi::F32>& out, int64_t layer) {
  const auto qd = q.dimensions(), kd = k.dimensions(), pd = positions.dimensions();
  if (qd.size() != 4 || kd.size() != 5 || pd.size() != 2) {
    return ffi::Error::InvalidArgument("specjax_cpu_attention takes q [B,T,H,D], k/v [L,B,S,KV,D], positions [B,T]");
  }
  Shapes s{qd[0], qd[1], qd[2], qd[3], kd[0], kd[2], kd[3], 0};
  if (kd[1] != s.batch || kd[4] != s.head_dim || pd[0] != s.batch || pd[1] != s.t_len ||
      v.dimensions().size() != 5 || !std::equal(kd.begin(), kd.end(), v.dimensions().begin())) {
    return ffi::Error::InvalidArgument("specjax_cpu_attention: q, k, v and positions disagree on their shapes");
  }
  if (s.n_kv == 0 || s.n_heads % s.n_kv) {
    return ffi::Error::InvalidArgument("specjax_cpu_attention: query heads must be a multiple of the kv heads");
  }
  if (layer < 0 || layer >= s.n_layers) return ffi::Error::InvalidArgument("specjax_cpu_attention: layer out of range");
  s.groups = s.n_heads / s.n_kv;
  if (s.batch == 0 || s.t_len == 0 || s.head_dim == 0) return ffi::Error::Success();
  const int64_t layer_floats = s.batch * s.size * s.n_kv * s.head_dim;
  const float* k_layer = k.typed_data() + layer * layer_floats;
  const float* v_layer = v.typed_data() + layer * layer_floats;
  const int32_t* pos = positions.typed_data();

  int64_t work = 0;  // multiply-adds of scores and values
  for (int64_t i = 0; i < s.batch * s.t_len; ++i) work += VisibleKeys(pos[i], s.size);
  work *= 2 * s.n_heads * s.head_dim;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(specjax::KernelThreads(pool), work / kWorkPerThread));
  // Tasks are (row, kv head, run of queries), the queries cut into runs for about two tasks per thread.
  const int64_t runs = std::min(s.t_len, std::max<int64_t>(1, (2 * threads + s.batch * s.n_kv - 1) / (s.batch * s.n_kv)));
  const int64_t run_len = (s.t_len + runs - 1) / runs;
  specjax::Parallel(pool, s.batch * s.n_kv * runs, threads, [&](int64_t task) {
    thread_local std::vector<float> scores;
    const int64_t kv = task % s.n_kv, run = (task / s.n_kv) % runs, b = task / (s.n_kv * runs);
    const int64_t t0 = run * run_len, t1 = std::min(s.t_len, t0 + run_len);
    if (t0 < t1) {
      AttendQueries(s, q.typed_data(), k_layer, v_layer, pos, tree, out->typed_data(), b, t0, t1, kv, scores);
    }
  });
  return ffi::Error::Success();
}

ffi::Error Attention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                     ffi::Buffer<ffi::S32> positions, ffi::ResultBuffer<ffi::F32> out, int64_t layer) {
  return Run(pool, q, k, v, positions, nullptr, out, layer);
}

ffi::Error TreeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> positions, ffi::Buffer<ffi::U8> ancestors,
                         ffi::Buffer<ffi::S32> roots, ffi::ResultBuffer<ffi::F32> out, int64_t layer) {
  const auto qd = q.dimensions(), ad = ancestors.dimensions(), rd = roots.dimensions();
  if (qd.size() != 4 || ad.size() != 3 || rd.size() != 1 || ad[0] != qd[0] || ad[1] != qd[1] || rd[0] != qd[0]) {
    return ffi::Error::InvalidArgument("specjax_cpu_tree_attention takes ancestors [B,T,N] and roots [B]");
  }
  const Tree tree{ancestors.typed_data(), roots.typed_data(), ad[2]};
  return Run(pool, q, k, v, positions, &tree, out, layer);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCpuAttention, Attention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("layer"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCpuTreeAttention, TreeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("layer"));
