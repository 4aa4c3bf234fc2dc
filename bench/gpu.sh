#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one command (under 10 minutes): the backend's tests and
# conformance suite on the device, NF4 dequantization bandwidth against a device-to-device
# copy, one GRPO step of a Qwen2.5-0.5B-shaped model and decoding, each against PyTorch +
# transformers + peft on the same GPU.
#
# Beside the measured times it prints the device-call ledger of the model's own GRPO step on
# this GPU and the cost model's estimate from it (engine/backend/cuda costmodel.go), so that a
# run says how far the model is off its estimate.
#
# 1. Where Go is (this repository), build the test binaries (CGO_ENABLED=0: no C toolchain
#    needed on either side):
#        bench/gpu.sh build                 # writes bench/gpu-bin/*.test
# 2. Copy the repository (with bench/gpu-bin) to the GPU machine: an NVIDIA driver, CUDA's
#    NVRTC and cuBLAS (a toolkit, or pip's nvidia-cuda-nvrtc and nvidia-cublas wheels, which
#    PyTorch brings), python3 with torch, transformers and peft. No Go. Then:
#        bash bench/gpu.sh [OUTDIR]         # default OUTDIR: bench/gpu-out
#    Each stage's log is in OUTDIR; OUTDIR/summary.txt gathers the figures.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=bench/gpu-bin

if [ "${1:-}" = "build" ]; then
  set -e
  mkdir -p "$bin"
  echo "building $bin/cuda.test and $bin/engine.test"
  CGO_ENABLED=0 go test -c -o "$bin/cuda.test" ./engine/backend/cuda
  CGO_ENABLED=0 go test -c -o "$bin/engine.test" ./engine
  exit 0
fi

out=${1:-bench/gpu-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
python=${PYTHON:-python3}
start=$(date +%s)

if [ ! -x "$bin/cuda.test" ] || [ ! -x "$bin/engine.test" ]; then
  echo "missing $bin/cuda.test or $bin/engine.test: run 'bench/gpu.sh build' where Go is, then copy bench/gpu-bin here" >&2
  exit 2
fi
unset RLHFSTATION_CUDA_LIBS # the real device, not a stand-in

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
say "   git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $($python -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' 2>&1)"

# 1. The backend's tests on the device: kernels against the CPU, the conformance suite,
#    whole models, a GRPO step, generation. (The NVRTC 11.8 compile check skips here.)
say "== tests on the GPU"
if (cd engine/backend/cuda && timeout 200 "../../../$bin/cuda.test" -test.v -test.timeout 190s) > "$out/tests.log" 2>&1; then
  say "   PASS ($(grep -c '^--- PASS' "$out/tests.log") passed, $(grep -c '^--- SKIP' "$out/tests.log") skipped)"
else
  say "   FAIL: see $out/tests.log"; grep -E '^(--- FAIL|    .*_test.go)' "$out/tests.log" | head -20 | tee -a "$summary"
fi
grep -E '^\s+\S+_test.go:[0-9]+: (device|conformance)' "$out/tests.log" | head -5 >> "$summary"

# 2. Kernel bandwidth: NF4 → bf16 against a device-to-device copy (target ratio ≥ 0.8), and
#    the fused 4-bit GEMV of decoding.
say "== NF4 dequantization vs device-to-device copy (GPU-event timing)"
(cd engine/backend/cuda && timeout 60 "../../../$bin/cuda.test" -test.run '^$' -test.bench 'DequantVsCopy|GEMV4' -test.benchtime 3x) > "$out/kernels.log" 2>&1
grep -E '^Benchmark' "$out/kernels.log" | tee -a "$summary"

# 3. One GRPO step of a Qwen2.5-0.5B-shaped random model (1 prompt × 8 completions × 64 new
#    tokens after a 32-token prompt; NF4 base, LoRA r 16 on every linear): the model itself on
#    the device (engine's BenchmarkGRPOStep/qwen05B with RLHFSTATION_BENCH_DEVICE=cuda: time,
#    phases, the allocator's peak as gpu-peak-bytes), then the device ops composed by hand with
#    the decode step replayed as a CUDA graph (engine/backend/cuda's BenchmarkGRPOStepQwen05 and
#    BenchmarkDecodeQwen05, 8 sequences and 1), then PyTorch + peft bf16 LoRA and
#    transformers' generate on the same GPU.
say "== GRPO step, Qwen2.5-0.5B-shaped: the model on the device (engine benchmark)"
(cd engine && RLHFSTATION_BENCH_DEVICE=cuda timeout 120 "../$bin/engine.test" -test.run '^$' -test.bench 'GRPOStep/qwen05B' -test.benchtime 3x -test.short) > "$out/qwen-engine.log" 2>&1
grep -E '^Benchmark' "$out/qwen-engine.log" | tee -a "$summary" || say "   (no figure: see $out/qwen-engine.log)"
say "== GRPO step and decoding, Qwen2.5-0.5B-shaped: device ops by hand, decode as a CUDA graph"
(cd engine/backend/cuda && timeout 90 "../../../$bin/cuda.test" -test.run '^$' -test.bench 'Qwen05' -test.benchtime 3x) > "$out/qwen-go.log" 2>&1
grep -E '^Benchmark' "$out/qwen-go.log" | tee -a "$summary" || say "   (no figure: see $out/qwen-go.log)"
say "== GRPO step and decoding, same shape (PyTorch + transformers + peft, bf16)"
timeout 120 "$python" bench/gpu_step.py --prompts 1 --generations 8 --prompt-len 32 --new 64 --steps 3 > "$out/qwen-torch.json" 2> "$out/qwen-torch.log"
tee -a "$summary" < "$out/qwen-torch.json"

# 4. The ledger of the model's own step on this GPU (calls per decode token, launches a layer
#    of a training pass; each phase's kernels, bytes and flops in ledger.log) and the cost
#    model's estimate of the three workloads from it, beside the times measured above.
say "== device-call ledger of the model's own GRPO step (Qwen2.5-0.5B structure) and the cost model"
(cd engine/backend/cuda && timeout 120 "../../../$bin/cuda.test" -test.run 'TestLedger' -test.v) > "$out/ledger.log" 2>&1
grep -E 'per decode token|training pass|reference scoring:|NOT MET|FAIL' "$out/ledger.log" | sed 's/^ *//' | tee -a "$summary"
(cd engine/backend/cuda && timeout 150 "../../../$bin/cuda.test" -test.run '^$' -test.bench 'LedgerEstimate' -test.benchtime 1x) > "$out/estimate.log" 2>&1
say "   estimated (cost model; see $out/estimate.log for every phase and constant):"
grep -E '^(==|--|[A-Z].*tokens, on|  rollout)' "$out/estimate.log" | tee -a "$summary"
say "   measured (above): the engine's GRPOStep/qwen05B s/step and rollout-s against the Qwen2.5-0.5B estimate's step and rollout"

say "== done in $(( $(date +%s) - start )) s; logs in $out"
