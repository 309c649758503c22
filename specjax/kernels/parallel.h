// Parallel: chunks 0..n-1 of a kernel's work, run on the calling thread and this library's spinning helper threads
// (Helpers), or on XLA's intra-op pool (ParallelFor) while another call holds the helpers.
//
// Chunks are claimed from an atomic counter, so a thread that starts late finds nothing left and the call never
// waits on a thread that is busy elsewhere; the caller spins (then yields) until every claimed chunk is finished.
#ifndef SPECJAX_KERNELS_PARALLEL_H_
#define SPECJAX_KERNELS_PARALLEL_H_

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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

// Helper threads of this library's own for the kernels' chunks. XLA's intra-op pool threads sleep between the
// kernels of a decode step, and on this project's 2-vCPU VM a sleeping one starts a scheduled task 0.1-0.4 ms
// later (measured: 350 us on average around 576x576 products that take 40-70 us), so ParallelFor's helper would
// find the work done and every product would run on one core. These threads spin (yielding the core to any other
// runnable thread) for kSpinTime after each job before they sleep, so within a step's stream of products they
// join a call within a microsecond or two.
class Helpers {
 public:
  static Helpers& Get() {
    static Helpers* helpers = new Helpers(static_cast<int>(std::thread::hardware_concurrency()) - 1);  // never freed
    return *helpers;
  }

  int count() const { return count_; }

  // Runs run(c) for every c in [0, n_chunks) on the calling thread and the helpers, and returns once all are done
  // and no helper holds the job any more; false (nothing run) while another call has the helpers.
  bool Run(int64_t n_chunks, const std::function<void(int64_t)>& run) {
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true)) return false;
    Job job;
    job.run = &run;
    job.n_chunks = n_chunks;
    job_.store(&job);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    job.Drain();
    job_.store(nullptr);  // a helper that has not taken the job yet finds none
    for (int spins = 0; job.finished.load(std::memory_order_acquire) < n_chunks || active_.load() != 0;) {
      if (++spins < 4096) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
    busy_.store(false);
    return true;
  }

 private:
  static constexpr std::chrono::microseconds kSpinTime{1000};

  struct Job {
    const std::function<void(int64_t)>* run;
    int64_t n_chunks;
    std::atomic<int64_t> next{0}, finished{0};
    void Drain() {
      for (int64_t c = next.fetch_add(1); c < n_chunks; c = next.fetch_add(1)) {
        (*run)(c);
        finished.fetch_add(1, std::memory_order_release);
      }
    }
  };

  explicit Helpers(int count) : count_(std::max(0, count)) {
    for (int i = 0; i < count_; ++i) std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    uint64_t seen = generation_.load();
    for (;;) {
      auto last = std::chrono::steady_clock::now();
      for (int spins = 1; generation_.load() == seen; ++spins) {
        _mm_pause();
        if (spins % 16 != 0) continue;
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() - last < kSpinTime) continue;
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load();
      // active_ is raised before job_ is read: a caller that has cleared job_ and then sees active_ at zero knows
      // that no helper can still reach its job (all sequentially consistent).
      active_.fetch_add(1);
      if (Job* job = job_.load()) job->Drain();
      active_.fetch_sub(1);
    }
  }

  const int count_;
  std::atomic<bool> busy_{false};
  std::atomic<Job*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0}, sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};


// The threads a kernel may split its work over: XLA's intra-op pool size, at most the helpers and the caller.
inline int64_t KernelThreads(xla::ffi::ThreadPool& pool) {
  return std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), Helpers::Get().count() + 1));
}

// run(c) for c in [0, n_chunks): on the calling thread alone for one chunk or one thread, else on the helpers
// (XLA's pool while another call holds them).
inline void Parallel(xla::ffi::ThreadPool& pool, int64_t n_chunks, int64_t threads,
                     const std::function<void(int64_t)>& run) {
  if (n_chunks == 1 || threads <= 1) {
    for (int64_t c = 0; c < n_chunks; ++c) run(c);
  } else if (!Helpers::Get().Run(n_chunks, run)) {
    ParallelFor(pool, n_chunks, threads, run);
  }
}

}  // namespace specjax

#endif  // SPECJAX_KERNELS_PARALLEL_H_
