// A machine probe, not a kernel: the round trip of one cache line bounced between two threads pinned to two CPUs.
// On a VM it says how close the host placed the vCPUs (0.07-0.14 us sharing an L3 and a memory link, 0.39-0.55 us
// on separate dies), which moves a two-core decode step by 1.44x on this project's VM (docs/results.md section 54).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

namespace {

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace

// The median round trip in microseconds over up to `trips` bounces (at most 50 ms of them: on a busy machine a
// bounce can wait for a descheduled peer) between threads on cpu_a and cpu_b; -1 when either thread cannot be
// pinned. The calling thread's own affinity is left as it was.
extern "C" double SpecjaxCoreRoundTripUs(int cpu_a, int cpu_b, int trips) {
  // Above every bounce's value, so a peer still at the start barrier (line < 2) also sees it and leaves.
  constexpr int kDone = std::numeric_limits<int>::max();
  alignas(64) std::atomic<int> line{0};
  std::atomic<bool> pinned{true};
  std::vector<double> us;
  us.reserve(std::max(trips, 1));
  auto bounce = [&](int cpu, bool first) {
    if (!Pin(cpu)) pinned.store(false);
    line.fetch_add(1);  // both threads pinned (or failed) before the first bounce
    while (line.load() < 2) {}
    if (!pinned.load()) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    for (int i = 0; i < std::max(trips, 1); ++i) {
      const int base = 2 + 2 * i;
      if (first) {
        const auto start = std::chrono::steady_clock::now();
        if (start > deadline) break;
        line.store(base + 1);
        while (line.load() != base + 2) {}
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      } else {
        int seen;
        while ((seen = line.load()) != base + 1 && seen != kDone) {}
        if (seen == kDone) return;
        line.store(base + 2);
      }
    }
    if (first) line.store(kDone);
  };
  std::thread a([&] { bounce(cpu_a, true); });
  std::thread b([&] { bounce(cpu_b, false); });
  a.join();
  b.join();
  if (!pinned.load() || us.empty()) return -1.0;
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}
