#!/bin/sh
# llama.cpp beside our NF4 decode, on the same machine in the same run: tokens/s at one sequence
# on a random model of Qwen2.5-0.5B's shape, llama.cpp in Q4_0 (its own quantizer's recipe) and
# ours in NF4 (BenchmarkDecodeNF4's 1-sequence row). Not part of `go test`: it installs
# node-llama-cpp's prebuilt Linux x64 binaries (libllama, the ggml CPU backends) with npm,
# without install scripts, into a cache folder outside the repository.
#
# usage: bench/llamacpp_anchor.sh [CACHE_DIR]   (default ~/.cache/rlhfstation/llamacpp)
# env:   THREADS (2), STEPS (32), RLHFSTATION_DECODE_REPS (3, our benchmark's rounds)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${HOME}/.cache/rlhfstation/llamacpp}
threads=${THREADS:-2}
steps=${STEPS:-32}
mkdir -p "$cache"

lib="$cache/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ ! -e "$lib/libllama.v0.5.0.so" ] && ! ls "$lib"/libllama*.so >/dev/null 2>&1; then
	(cd "$cache" && npm i --ignore-scripts --no-audit --no-fund @node-llama-cpp/linux-x64 >&2)
fi
libllama=$(cd "$lib" && ls libllama*.so | grep -v common | head -1)
libggml=$(cd "$lib" && ls libggml.*so | head -1)
gcc -O2 "$repo/bench/llamacpp_anchor.c" -o "$cache/anchor" -L"$lib" -l:"$libllama" -l:"$libggml" -Wl,-rpath,"$lib"

if [ ! -s "$cache/qwen05-q4_0.gguf" ]; then
	/usr/bin/python3 "$repo/bench/gguf_qwen05.py" "$cache/qwen05-f16.gguf"
	LLAMA_LIB_DIR="$lib" "$cache/anchor" quantize "$cache/qwen05-f16.gguf" "$cache/qwen05-q4_0.gguf" >&2
	rm -f "$cache/qwen05-f16.gguf"
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "llama.cpp ($(cat "$lib/_nlcBuildMetadata.json" 2>/dev/null | sed 's/.*"release":"\([^"]*\)".*/release \1/')), Q4_0, 1 sequence, $threads threads:"
LLAMA_LIB_DIR="$lib" "$cache/anchor" time "$cache/qwen05-q4_0.gguf" "$threads" "$steps" 2>/dev/null
echo "rlhfstation, NF4 (bf16 head) and f32, 1 sequence:"
cd "$repo" && RLHFSTATION_DECODE_BATCHES=1 RLHFSTATION_DECODE_REPS=${RLHFSTATION_DECODE_REPS:-3} go test ./engine/model -run '^$' -bench DecodeNF4 -benchtime 1x -v -timeout 60m -cpu "$threads" 2>&1 |
	grep -E '^\s*(copy bandwidth|\| (sequences|1) )'
LLAMA_LIB_DIR="$lib" "$cache/anchor" time "$cache/qwen05-q4_0.gguf" "$threads" "$steps" 2>/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
