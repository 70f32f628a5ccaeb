#!/usr/bin/env bash
# One device call, most important first: each step's output is appended to $OUT/gpu-run.txt as it runs, and its
# results JSON kept as steps/<step>.json in $OUT/results.tgz (made again after each step), so a call cut short by its
# time limit still returns what finished. $OUT/clocks.csv samples the GPU's clocks, utilization and power every
# 250 ms throughout (the SM clock follows the load: 2026-11-28). Three files in all: the device tool brings back 8.
# Usage (carry .devbundle and .gl, from scripts/gpu/bundle.sh): bash scripts/gpu/session.sh
set -uo pipefail
out=${OUT:-.devbundle/out}
mkdir -p "$out" .devbundle/steps
smi=
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw --format=csv -lms 250 \
    >"$out/clocks.csv" 2>/dev/null &
  smi=$!
fi
keep() { # keep(name, suite): the suite's results JSON as steps/<name>.json, then the archive again
  cp ".devbundle/results/$2.json" ".devbundle/steps/$1.json" 2>/dev/null
  tar czf "$out/results.tgz" -C .devbundle steps
}
step() {
  local name=$1
  shift
  echo "=== $name: $* ($(date +%T))" | tee -a "$out/gpu-run.txt"
  rm -f .devbundle/results/gpu.json # (a step that fails keeps no other step's results)
  # (OUT unset: run.sh would copy every results JSON there)
  env -u OUT "$@" bash scripts/gpu/run.sh gpu 2>&1 | tee -a "$out/gpu-run.txt"
  keep "$name" gpu
  if grep -q "no adapter found" "$out/gpu-run.txt"; then
    echo "=== no adapter: the Vulkan loader's account" | tee -a "$out/gpu-run.txt"
    env -u OUT VK_LOADER_DEBUG=error,warn,info "$@" bash scripts/gpu/run.sh gpu 2>&1 | head -150 | tee -a "$out/gpu-run.txt"
    exit 1
  fi
}
step matmul WEBART_BENCH_PARTS=matmul
step matvec-0.5b WEBART_BENCH_PARTS=overhead,matvec,models WEBART_BENCH_MODELS=qwen2.5-0.5b
step profile-0.5b WEBART_BENCH_PARTS=profile WEBART_BENCH_MODELS=qwen2.5-0.5b
step models-rest WEBART_BENCH_PARTS=models WEBART_BENCH_MODELS=qwen3-0.6b,qwen2.5-1.5b WEBART_BENCH_Q4=off
# q4 weights (0.5B's were timed in its step above): the largest shape, where decode is most bound by bytes.
step q4-1.5b WEBART_BENCH_PARTS=models WEBART_BENCH_MODELS=qwen2.5-1.5b WEBART_BENCH_Q4=only
# Then the kernels suite: its attention part times prefill attention per family (tiled, rows, lanes) in GFLOP/s.
echo "=== kernels ($(date +%T))" | tee -a "$out/gpu-run.txt"
env -u OUT bash scripts/gpu/run.sh kernels 2>&1 | tee -a "$out/gpu-run.txt"
keep kernels kernels
# The user's speed check (`webart info --speed`) on the embedded model: the path a person with this GPU runs.
echo "=== webart info --speed ($(date +%T))" | tee -a "$out/gpu-run.txt"
bash scripts/gpu/run.sh --cli info --speed 2>&1 | grep -v '^Warning\|^    at' | tee -a "$out/gpu-run.txt"
# Last (measured before: 53 s on 2026-11-28, start-up tuning included), the embedded model's `webart train` (its
# defaults). info --speed above saved the embedded model's start-up tuning (~/.cache/webart/tuning.json), so this
# load reads it back: its "start-up tuning, N s:" line says so.
echo "=== webart train ($(date +%T))" | tee -a "$out/gpu-run.txt"
s0=$(date +%s%N)
bash scripts/gpu/run.sh --cli train 2>&1 | grep -v '^Warning\|^    at' >.devbundle/train.txt
{ grep '^start-up tuning' .devbundle/train.txt; tail -3 .devbundle/train.txt; } | tee -a "$out/gpu-run.txt"
echo "webart train: $((($(date +%s%N) - s0) / 1000000)) ms for the whole command" | tee -a "$out/gpu-run.txt"
echo "=== done ($(date +%T))" | tee -a "$out/gpu-run.txt"
[ -n "$smi" ] && kill "$smi" 2>/dev/null
