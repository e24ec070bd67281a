#!/usr/bin/env bash
# Every GPU check in one go, for a first session on a GPU (sized for 10 minutes on an H200):
# a preflight of packages, headers and driver; then the e2e models on --device cuda vs cpu vs
# onnxruntime (small, full-size, zoo), the serving runtime (CUDA graphs, contexts on threads),
# split-K on/off and the kernel benchmark. Each check runs under its own time limit, each model
# is guarded (one failure is a row, the rest still run), a NaN is a failure. Output in $OUT (or
# ./gpu_all): gpu_all.json (every row), gpu_all.txt (the table), one log per check.
#
#   bash bench/gpu_all.sh                 on a GPU machine
#   bash bench/gpu_all.sh --stand-in      here, on the stand-in CUDA driver (aotc.testing.fakecuda):
#                                         everything but the hardware; its timings mean nothing
#   --quick                               a reduced model set (the CI test of this script)
#   GPU_ALL_BUDGET_S=540                  the whole run's time budget in seconds
set -uo pipefail
cd "$(dirname "$0")/.."
stand_in=0 quick=0
for a in "$@"; do
  case "$a" in
    --stand-in) stand_in=1 ;;
    --quick) quick=1 ;;
    *) echo "usage: bash bench/gpu_all.sh [--stand-in] [--quick]" >&2; exit 2 ;;
  esac
done
dest="${OUT:-gpu_all}"
parts="$dest/parts"
mkdir -p "$parts"
rm -f "$parts"/*.json
budget="${GPU_ALL_BUDGET_S:-540}"
start=$(date +%s)

if [ "$stand_in" = 1 ]; then
  eval "$(python3 -m aotc.testing.fakecuda --env)" || { echo "cannot set up the stand-in driver" >&2; exit 1; }
  echo "stand-in CUDA driver: $AOTC_LIBCUDA (not a GPU: only the scripts are checked)"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "(no nvidia-smi)"
  bash bench/gpu_install.sh "$dest/install.log"
fi

pre_args=()
[ "$stand_in" = 1 ] && pre_args+=(--stand-in)
if ! python3 -m aotc.bench.gpu_preflight "${pre_args[@]}" --json "$parts/preflight.json"; then
  python3 -m aotc.bench.gpu_report "$dest/gpu_all.json" "$parts/preflight.json" "stand_in=$stand_in" \
    | tee "$dest/gpu_all.txt"
  echo "preflight failed: fix the MISSING lines above (nothing else was run)"
  exit 1
fi
host_builds=$(python3 -c "import json; print(int(json.load(open('$parts/preflight.json'))['host_builds']))")
no_cpu=()
[ "$host_builds" = 1 ] || no_cpu=(--no-cpu)

# step NAME LIMIT_S COMMAND...: runs COMMAND --json parts/NAME.json under min(LIMIT_S, what is left).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "== $name: skipped (the ${budget} s budget is spent)"
    printf '{"check": "%s", "rows": [{"check": "%s", "model": "(whole check)", "precision": null, "status": "skipped", "detail": "time budget spent"}]}\n' \
      "$name" "$name" > "$parts/$name.json"
    return
  fi
  echo "== $name (at most $limit s): $*"
  local t0=$(date +%s)
  timeout -k 10 "$limit" "$@" --json "$parts/$name.json" > "$dest/$name.log" 2>&1
  local rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ ! -s "$parts/$name.json" ]; then
    python3 -m aotc.bench.gpu_report --incomplete "$parts/$name.json" "$name" \
      "stopped (exit $rc) after $limit s: what it had not reached did not run; see $name.log"
  fi
  tail -n 25 "$dest/$name.log" | grep -v '^  File \|^Traceback\|^    ' || true
  echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s$([ $rc = 124 ] && echo ' (time limit: the rows written so far are kept)')"
}

if [ "$quick" = 1 ]; then
  step gpu_check_small 300 python3 -m bench.gpu_check fp32 --models small --only mlp,transformer_block "${no_cpu[@]}"
  step gpu_check_zoo 300 python3 -m bench.gpu_check fp32 --models zoo --only llama "${no_cpu[@]}"
  step gpu_runtime_check 200 python3 -m bench.gpu_runtime_check --models mlp --iters 5 --seconds 0.3
  step gpu_split_k 200 python3 -m bench.gpu_split_k --small --precisions fp32 --rounds 1 --iterations 3
  step gpu_kernels 200 python3 -m bench.gpu_kernels --small --cases gemm --precisions fp32 --against onnxruntime \
    --iterations 3
else
  step gpu_check_small 100 python3 -m bench.gpu_check fp32,tf32,fp16 --models small "${no_cpu[@]}"
  step gpu_check_real 150 python3 -m bench.gpu_check fp32,fp16 --models real --no-cpu
  step gpu_runtime_check 60 python3 -m bench.gpu_runtime_check --models transformer_block,bert_base \
    --iters 100 --seconds 1
  step gpu_split_k 100 python3 -m bench.gpu_split_k --models resnet50,bert_base --precisions fp32 --rounds 3 \
    --iterations 10
  step gpu_check_zoo 120 python3 -m bench.gpu_check fp32,fp16 --models zoo "${no_cpu[@]}"
  step gpu_kernels 60 python3 -m bench.gpu_kernels --precisions fp32,fp16 --iterations 20 --max-seconds 1
fi

python3 -m aotc.bench.gpu_report "$dest/gpu_all.json" "$parts"/preflight.json "$parts"/gpu_*.json \
  "stand_in=$stand_in" "seconds=$(( $(date +%s) - start ))" > "$dest/gpu_all.txt"
status=$?
cat "$dest/gpu_all.txt"
echo "results: $dest/gpu_all.json, $dest/gpu_all.txt ($(( $(date +%s) - start )) s)"
exit $status
