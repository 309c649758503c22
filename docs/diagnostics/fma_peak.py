"""This CPU's float32 FMA peak, the ceiling every matmul kernel here is judged against (docs/results.md section 32):
a minimal AVX2 loop of 12 independent 8-wide FMA chains per thread (no memory traffic), on 1 and 2 threads.

  python docs/diagnostics/fma_peak.py
"""
import os
import subprocess
import tempfile

SOURCE = r"""
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
__attribute__((noinline)) float Chains(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(i);
  const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}
int main(int argc, char** argv) {
  const int threads = atoi(argv[1]);
  const long iters = 100000000;
  std::vector<float> out(threads);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { out[i] = Chains(iters); });
  for (auto& t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("%d thread(s): %.1f GFLOP/s (checksum %g)\n", threads, threads * iters * 12.0 * 16 / s / 1e9, out[0]);
}
"""

with tempfile.TemporaryDirectory() as tmp:
  source, binary = os.path.join(tmp, "fma.cc"), os.path.join(tmp, "fma")
  with open(source, "w") as f:
    f.write(SOURCE)
  subprocess.run(["g++", "-O3", "-mavx2", "-mfma", "-std=c++17", source, "-o", binary, "-lpthread"], check=True)
  for threads in (1, 2):
    print(subprocess.run([binary, str(threads)], check=True, capture_output=True, text=True).stdout, end="")
