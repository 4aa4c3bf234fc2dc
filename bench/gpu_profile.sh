#!/usr/bin/env bash
# Where a GRPO step's GPU time goes, kernel by kernel: Nsight Compute (ncu, on the GPU machine)
# over the engine's own step of a Qwen2.5-0.5B-shaped model (engine's BenchmarkGRPOStep/qwen05B
# with RLHFSTATION_BENCH_DEVICE=cuda; binaries from `bench/gpu.sh build`), in two passes:
#   1. a few decode tokens, each node of the decode step's CUDA graph timed as its own kernel,
#      summed per token by bench/ncu_summary.py --per embedding_forward;
#   2. the whole warm-up and timed step, each graph replay timed as one unit.
# Caches are left as they are (--cache-control none) and clocks unlocked (--clock-control none),
# so that a kernel's time is close to its time in the running step; ncu still runs kernels one
# at a time, so the sums leave out the gaps between launches.
#     bash bench/gpu_profile.sh [OUTDIR]        (default bench/gpu-out; under 5 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=bench/gpu-bin
out=$(mkdir -p "${1:-bench/gpu-out}" && cd "${1:-bench/gpu-out}" && pwd)
[ -f "$bin/bin.tgz" ] && (cd "$bin" && tar xzf bin.tgz)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu (Nsight Compute) not found" >&2; exit 2; }
python=${PYTHON:-python3}
run=(../$bin/engine.test -test.run '^$' -test.bench 'GRPOStep/qwen05B' -test.benchtime 1x -test.short)
prof=("$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv)
cd engine
export RLHFSTATION_BENCH_DEVICE=cuda
timeout "${PROFILE_DECODE_S:-120}" "${prof[@]}" --graph-profiling node --launch-skip 1200 --launch-count 1400 "${run[@]}" > "$out/ncu-decode.csv" 2> "$out/ncu-decode.log"
echo "== decode, per token (ncu exit $?)"
"$python" ../bench/ncu_summary.py "$out/ncu-decode.csv" --per embedding_forward | head -25
[ "${PROFILE_STEP_S:-150}" -gt 0 ] || exit 0
timeout "${PROFILE_STEP_S:-150}" "${prof[@]}" --graph-profiling graph "${run[@]}" > "$out/ncu-step.csv" 2> "$out/ncu-step.log"
echo "== warm-up and timed step, graphs as one unit (ncu exit $?)"
"$python" ../bench/ncu_summary.py "$out/ncu-step.csv" | head -40
