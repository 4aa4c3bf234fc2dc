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
#    Each stage's log is in OUTDIR; OUTDIR/summary.txt gathers the figures. Stages run in order
#    of what they prove, each under its own timeout, inside $GPU_BUDGET_S seconds in all (default
#    540): a stage that would not fit is skipped and says so. With $OUT set (the device tool),
#    the logs are also packed into $OUT/gpu-out.tgz after every stage, so a cut-off run keeps them.
#    The binaries may come packed (bench/gpu-bin/bin.tgz, to fit a transfer limit): unpacked first.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=bench/gpu-bin

if [ "${1:-}" = "build" ]; then
  set -e
  mkdir -p "$bin"
  echo "building $bin/cuda.test, $bin/engine.test, $bin/cpu.test and $bin/rlhfstation (stripped, CGO_ENABLED=0)"
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$bin/cuda.test" ./engine/backend/cuda
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$bin/engine.test" ./engine
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$bin/cpu.test" ./engine/backend/cpu
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$bin/rlhfstation" .
  if [ "${2:-}" = "pack" ]; then
    (cd "$bin" && tar czf bin.tgz cuda.test engine.test cpu.test rlhfstation && rm -f cuda.test engine.test cpu.test rlhfstation)
    ls -la "$bin"
  fi
  exit 0
fi

[ -f "$bin/bin.tgz" ] && (cd "$bin" && tar xzf bin.tgz)
out=${1:-bench/gpu-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
python=${PYTHON:-python3}
start=$(date +%s)
budget=${GPU_BUDGET_S:-540}
# stage MAX: the seconds the next stage may take (its maximum, or what is left less 10 s); 0 when
# fewer than 20 are left.
stage() { local left=$(( budget - ($(date +%s) - start) - 10 )); [ "$left" -lt 20 ] && { echo 0; return; }; [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
skip() { say "   skipped: the budget of $budget s is spent"; }
pack() { [ -n "${OUT:-}" ] && [ "$out" != "$OUT" ] && tar czf "$OUT/gpu-out.tgz.tmp" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null && mv "$OUT/gpu-out.tgz.tmp" "$OUT/gpu-out.tgz" && cp "$summary" "$OUT/summary.txt"; true; }

for b in cuda.test engine.test cpu.test rlhfstation; do
  if [ ! -x "$bin/$b" ]; then
    echo "missing $bin/$b: run 'bench/gpu.sh build [pack]' where Go is, then copy bench/gpu-bin here" >&2
    exit 2
  fi
done
unset RLHFSTATION_CUDA_LIBS # the real device, not a stand-in

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
say "   git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $($python -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' 2>&1 | tail -1)"
say "   host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); AVX-512: $(grep -m1 -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)$(grep -q avx512f /proc/cpuinfo && echo yes || echo no)"
say "   libraries: $(ls /usr/local/cuda/lib64/ 2>/dev/null | grep -E '^lib(nvrtc|cublas)\.so\.[0-9]+$' | tr '\n' ' ')"
pack

# 1. The backend's tests on the device: kernels against the CPU, the conformance suite,
#    whole models, a GRPO step, generation, graph replay against eager decoding.
say "== tests on the GPU"
t=$(stage 140)
if [ "$t" -eq 0 ]; then skip
elif (cd engine/backend/cuda && timeout "$t" "../../../$bin/cuda.test" -test.v -test.timeout "$((t - 5))s") > "$out/tests.log" 2>&1; then
  say "   PASS ($(grep -c -- '--- PASS' "$out/tests.log") passed, $(grep -c -- '--- SKIP' "$out/tests.log") skipped)"
else
  say "   FAIL: see $out/tests.log ($(grep -c -- '--- PASS' "$out/tests.log") passed, $(grep -c -- '--- FAIL' "$out/tests.log") failed)"
  grep -E -- '--- FAIL|panic:|^\s+\S+_test.go:[0-9]+:' "$out/tests.log" | grep -v -- '--- PASS' | head -40 | tee -a "$summary"
fi
grep -E '^\s+\S+_test.go:[0-9]+: (device|conformance)' "$out/tests.log" | head -5 >> "$summary"
pack

# 2. One GRPO step of a Qwen2.5-0.5B-shaped random model (1 prompt × 8 completions × 64 new
#    tokens after a 32-token prompt; NF4 base, LoRA r 16 on every linear): the model itself on
#    the device (engine's BenchmarkGRPOStep/qwen05B with RLHFSTATION_BENCH_DEVICE=cuda: time,
#    phases, the allocator's peak as gpu-peak-bytes).
say "== GRPO step, Qwen2.5-0.5B-shaped: the model on the device (engine benchmark)"
t=$(stage 100)
if [ "$t" -eq 0 ]; then skip; else
(cd engine && RLHFSTATION_BENCH_DEVICE=cuda timeout "$t" "../$bin/engine.test" -test.run '^$' -test.bench 'GRPOStep/qwen05B' -test.benchtime 3x -test.short -test.v) > "$out/qwen-engine.log" 2>&1
grep -E '^Benchmark|FAIL|panic' "$out/qwen-engine.log" | tee -a "$summary" || say "   (no figure: see $out/qwen-engine.log)"
fi
pack

# 3. A user's run on the GPU: the built-in model, 20 steps; its checkpoint scored on the GPU and
#    the CPU, merged; peft loads the adapter and transformers the merged folder (bench/gpu_interop.py).
say "== a run on the GPU; its adapter in peft, its merged folder in transformers"
t=$(stage 80)
if [ "$t" -eq 0 ]; then skip; else
  rs=$bin/rlhfstation; m=engine/builtin/model; run=/tmp/gpu-run; rm -rf "$run" /tmp/gpu-merged
  s0=$(date +%s)
  timeout "$t" "$rs" --batch --model "$m" --device cuda --max-steps 20 --save-steps 20 --logging-steps 5 --learning-rate 1e-3 --output-dir "$run" > "$out/run.log" 2>&1
  say "   --batch --device cuda, 20 steps: exit $? in $(( $(date +%s) - s0 )) s; $(grep -E '^run |^  reward: first|^\s*step_time ' "$out/run.log" | tr -s ' ' | tr '\n' ';')"
  ck=$(ls -d "$run"/*/checkpoints/step-* 2>/dev/null | tail -1)
  if [ -n "$ck" ]; then
    texts=("The cat sat on the mat." "Once upon a time there was a little fox who lived in the woods near a river." "Tom had 3 apples and got 4 more, so he had 7 apples.")
    for dev in cuda cpu; do
      "$rs" score --model "$m" --device "$dev" --json "${texts[@]}" > "$out/score-base-$dev.json" 2>> "$out/run.log"
      "$rs" score --model "$m" --adapter "$ck" --device "$dev" --json "${texts[@]}" > "$out/score-adapter-$dev.json" 2>> "$out/run.log"
    done
    "$rs" merge --model "$m" --adapter "$ck" --out /tmp/gpu-merged --dtype f32 >> "$out/run.log" 2>&1
    for dev in cuda cpu; do
      timeout 60 "$python" bench/gpu_interop.py --model "$m" --adapter "$ck" --merged /tmp/gpu-merged \
        --ours-base "$out/score-base-$dev.json" --ours-adapter "$out/score-adapter-$dev.json" --label "ours on $dev" --tol "$([ "$dev" = cpu ] && echo 1e-3 || echo 5e-2)" \
        > "$out/interop-$dev.json" 2> "$out/interop-$dev.log"
      tee -a "$summary" < "$out/interop-$dev.json"
    done
  else
    say "   no checkpoint written: see $out/run.log"; tail -5 "$out/run.log" | tee -a "$summary"
  fi
fi
pack

# 4. The same step in PyTorch + transformers + peft (bf16) on the same GPU.
say "== GRPO step and decoding, same shape (PyTorch + transformers + peft, bf16)"
t=$(stage 70)
if [ "$t" -eq 0 ]; then skip; else
timeout "$t" "$python" bench/gpu_step.py --prompts 1 --generations 8 --prompt-len 32 --new 64 --steps 3 > "$out/qwen-torch.json" 2> "$out/qwen-torch.log"
tee -a "$summary" < "$out/qwen-torch.json"
fi
pack

# 5. The ledger of the model's own step on this GPU (calls per decode token, launches a layer
#    of a training pass; each phase's kernels, bytes and flops in ledger.log) and the cost
#    model's estimate of the three workloads from it, beside the times measured above.
say "== device-call ledger of the model's own GRPO step (Qwen2.5-0.5B structure) and the cost model"
t=$(stage 60)
if [ "$t" -eq 0 ]; then skip; else
(cd engine/backend/cuda && timeout "$t" "../../../$bin/cuda.test" -test.run 'TestLedger' -test.v) > "$out/ledger.log" 2>&1
grep -E 'per decode token|training pass|reference scoring:|NOT MET|FAIL' "$out/ledger.log" | sed 's/^ *//' | tee -a "$summary"
t=$(stage 90)
# the 0.5B decode token's launches at full width (a dry run): the latency term's chains
(cd engine/backend/cuda && RLHFSTATION_ESTIMATE_FULL=Qwen2.5-0.5B timeout "$t" "../../../$bin/cuda.test" -test.run '^$' -test.bench 'LedgerEstimate' -test.benchtime 1x) > "$out/estimate.log" 2>&1
say "   estimated (cost model with its latency term; see $out/estimate.log for every phase, kernel and constant):"
grep -E '^(==|--|[A-Z].*tokens, on|  rollout|  q4_linear|  attn_rows|  gemm_nt_few|  in all)' "$out/estimate.log" | tee -a "$summary"
say "   measured (above): the engine's GRPOStep/qwen05B s/step and rollout-s against the Qwen2.5-0.5B estimate's step and rollout"
fi
pack

# 6. Kernel bandwidth: NF4 → bf16 against a device-to-device copy (target ratio ≥ 0.8), and
#    the fused 4-bit GEMV of decoding; the decode attention (attn_rows*, 8 warps splitting the
#    keys) at the 8B's and the 0.5B's mean contexts beside the model's estimate of the launch
#    (BenchmarkDecodeAttention: µs against est-H100-µs/est-H200-µs); then the device ops composed
#    by hand, decode replayed as a CUDA graph (BenchmarkGRPOStepQwen05, BenchmarkDecodeQwen05).
say "== NF4 dequantization vs device-to-device copy, 4-bit GEMV; device ops by hand (GPU-event timing)"
t=$(stage 80)
if [ "$t" -eq 0 ]; then skip; else
(cd engine/backend/cuda && timeout "$t" "../../../$bin/cuda.test" -test.run '^$' -test.bench 'DequantVsCopy|GEMV4|DecodeAttention|Qwen05|FlashAttention' -test.benchtime 3x) > "$out/kernels.log" 2>&1
grep -E '^Benchmark|FAIL|panic' "$out/kernels.log" | tee -a "$summary"
fi
pack

# 7. The host's CPU: the AVX-512 one-row 4-bit kernels, exact and int16 (opt-in until they have
#    run; GPU hosts usually have AVX-512), against the dequantized reference and, for the int16
#    one, against the interpreter bit for bit; their speed beside AVX2's.
say "== CPU 4-bit one-row kernel, AVX-512 against AVX2 (the host's CPU)"
t=$(stage 60)
if [ "$t" -eq 0 ]; then skip; else
(cd engine/backend/cpu && timeout "$t" "../../../$bin/cpu.test" -test.run 'Q4Row512|Q4Row16On512|Q4Dot|TestConformance' -test.v -test.bench 'Q4Row512' -test.benchtime 20x) > "$out/cpu512.log" 2>&1
grep -E -- '^--- (FAIL|SKIP)|^--- PASS: TestQ4Row(512|16On512)|^Benchmark|^(ok|FAIL|PASS)$' "$out/cpu512.log" | head -12 | tee -a "$summary"
fi
pack

# 8. Where a decode token's GPU time goes now, kernel by kernel (bench/gpu_profile.sh's first
#    pass; the whole step is its second, left to a run of that script).
say "== decode token, kernel by kernel (Nsight Compute)"
t=$(stage 90)
if [ "$t" -eq 0 ]; then skip; else
PROFILE_DECODE_S=$t PROFILE_STEP_S=0 bash bench/gpu_profile.sh "$out" > "$out/profile.txt" 2>&1
sed -n '/== decode/,/== warm-up/p' "$out/profile.txt" | head -20 | tee -a "$summary"
fi
pack

# 9. The README's first command as a user with a GPU runs it: the built-in default, device auto.
say "== go run . --batch (the built-in default; device auto)"
t=$(stage 120)
if [ "$t" -eq 0 ]; then skip; else
  s0=$(date +%s)
  timeout "$t" "$bin/rlhfstation" --batch --output-dir /tmp/gpu-default > "$out/default.log" 2>&1
  say "   exit $? in $(( $(date +%s) - s0 )) s; $(grep -m1 -E '^device' "$out/default.log"); $(grep -E '^run |^  reward: first' "$out/default.log" | tr '\n' ';')"
fi

say "== done in $(( $(date +%s) - start )) s; logs in $out"
pack
