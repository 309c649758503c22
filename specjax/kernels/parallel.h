// ParallelFor: chunks 0..n-1 run on the calling thread and on helper tasks scheduled on XLA's intra-op pool.
//
// Chunks are claimed from an atomic counter, so a helper that starts late finds nothing left and the call never
// waits on a thread that is busy elsewhere; the caller spins (then yields) until every claimed chunk is finished.
#ifndef SPECJAX_KERNELS_PARALLEL_H_
#define SPECJAX_KERNELS_PARALLEL_H_

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace specjax {

// `run(c)` must be safe to call from any thread for distinct c. With max_threads 1 (or one chunk) everything runs
// on the calling thread.
inline void ParallelFor(xla::ffi::ThreadPool& pool, int64_t n_chunks, int64_t max_threads,
                        std::function<void(int64_t)> run) {
  struct Shared {
    std::function<void(int64_t)> run;
    int64_t n_chunks;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> finished{0};
    void Drain() {
      for (int64_t c = next.fetch_add(1); c < n_chunks; c = next.fetch_add(1)) {
        run(c);
        finished.fetch_add(1, std::memory_order_release);
      }
    }
  };
  auto shared = std::make_shared<Shared>();
  shared->run = std::move(run);
  shared->n_chunks = n_chunks;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(max_threads, pool.num_threads()));
  const int64_t helpers = std::min(threads, n_chunks) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([shared] { shared->Drain(); });
  shared->Drain();
  for (int spins = 0; shared->finished.load(std::memory_order_acquire) < n_chunks;) {
    if (spins < 4096) {
      ++spins;
      _mm_pause();
    } else {
      std::this_thread::yield();  // the helper holding the last chunk may share this core
    }
  }
}

}  // namespace specjax

#endif  // SPECJAX_KERNELS_PARALLEL_H_
