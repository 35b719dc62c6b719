#!/usr/bin/env bash
# Every CUDA check in one call, most important first, each bounded, all inside one deadline.
#
#   bash devscripts/cuda_all.sh OUTDIR              # on a CUDA machine (8-10 minutes on an H200; SKIP="a b" leaves steps out)
#   SMOKE=1 bash devscripts/cuda_all.sh /tmp/smoke   # the same steps on the CPU, small shapes
#
# Writes OUTDIR/log.txt (versions, each step's stderr, exit status and seconds) and one JSON file per step.
# A machine without the project's Python packages can bring them as one zip of site-packages, .whl/site.zip
# (extracted to /tmp/site and put first on PYTHONPATH).
set -u
out=${1:?usage: cuda_all.sh OUTDIR}
mkdir -p "$out"
log="$out/log.txt"
deadline=$(( $(date +%s) + ${DEADLINE_S:-540} ))
if [ -f .whl/site.zip ]; then
    mkdir -p /tmp/site && python3 -m zipfile -e .whl/site.zip /tmp/site && export PYTHONPATH=/tmp/site
    export USE_HUB_KERNELS=0  # transformers 5 wants the `kernels` package for hub kernels; the zip has none
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

step() {  # step NAME SECONDS COMMAND...: stdout -> NAME.json, stderr -> log; SKIP="name ..." leaves steps out
    local name=$1 limit=$2 left
    shift 2
    case " ${SKIP:-} " in *" $name "*) echo "=== $name skipped (SKIP)" >>"$log"; return;; esac
    left=$(( deadline - $(date +%s) - 5 ))
    if [ "$left" -lt 20 ]; then echo "=== $name skipped: no time left" >>"$log"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit}s, $(date +%T)): $*" >>"$log"
    local s=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.json" 2>>"$log"
    echo "=== $name rc=$? in $(( $(date +%s) - s ))s" >>"$log"
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    lscpu | grep -m1 "Model name"
    python3 -c "import sys, torch, transformers, bitsandbytes; print(sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'bitsandbytes', bitsandbytes.__version__)" 2>&1
} >>"$log"

if [ "${SMOKE:-0}" = 1 ]; then
    step engine-bf16 120 python3 devscripts/cuda_check_engine.py --device cpu --max-new-tokens 16 --repeats 1
    step plan 60 python3 devscripts/cuda_check_plan.py --device cpu --context 1024 --json
    step distill-8b 120 python3 devscripts/cuda_check_distill.py --device cpu --small --minutes 0.2 --prompts 16
    step bench-8b 60 python3 devscripts/cuda_bench.py --device cpu --tiny --max-new-tokens 16
    exit 0
fi
# On 2026-12-04 (H200) the engine checks at 64 tokens x 2 repeats ran past 90 s: the GPU path is host-bound
# (~1 ms per layer per step), so they run shorter here; their rows print as they complete (stderr -> log).
step engine-bf16 120 python3 devscripts/cuda_check_engine.py --max-new-tokens 32 --repeats 1
step plan 45 python3 devscripts/cuda_check_plan.py --context 2048 --json
step engine-fp32 90 python3 devscripts/cuda_check_engine.py --dtype float32 --max-new-tokens 32 --repeats 1
step engine-nf4 120 python3 devscripts/cuda_check_engine.py --target-quant nf4 --max-new-tokens 32 --repeats 1
step distill-8b 210 python3 devscripts/cuda_check_distill.py --minutes 1 --prompts 64
step bench-8b 120 python3 devscripts/cuda_bench.py
step plan-nf4 45 python3 devscripts/cuda_check_plan.py --context 2048 --target-quant nf4 --json
