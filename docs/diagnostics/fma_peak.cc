// This CPU's float32 FMA peak: each thread runs 20 independent AVX-512 FMA chains (inline assembly, so that the
// compiler keeps them in registers); GFLOP/s with 1 and 2 threads. docs/results.md section 45.
//
//   g++ -O2 -mavx512f -pthread docs/diagnostics/fma_peak.cc -o /tmp/fma_peak && /tmp/fma_peak
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

void Chains(long iterations) {
#define FMA(r) "vfmadd231ps %%zmm1, %%zmm0, %%zmm" #r "\n"
  asm volatile("vxorps %%xmm0, %%xmm0, %%xmm0\n vmovaps %%zmm0, %%zmm1\n"
               "1:\n" FMA(4) FMA(5) FMA(6) FMA(7) FMA(8) FMA(9) FMA(10) FMA(11) FMA(12) FMA(13) FMA(14) FMA(15)
               FMA(16) FMA(17) FMA(18) FMA(19) FMA(20) FMA(21) FMA(22) FMA(23) "dec %0\n jnz 1b\n"
               : "+r"(iterations)
               :
               : "xmm0", "xmm1", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
                 "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "cc");
#undef FMA
}

int main() {
  const long iterations = 50000000;
  for (int threads : {1, 2}) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(Chains, iterations);
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d thread(s): %.0f GFLOP/s\n", threads, threads * iterations * 20.0 * 16 * 2 / s / 1e9);
  }
}
