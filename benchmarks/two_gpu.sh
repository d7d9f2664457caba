#!/bin/bash
# Issue 6's measurements on a two-GPU node, in two steps (the GPU box has no MLIR bindings):
#
#   bash benchmarks/two_gpu.sh build build/two_gpu        # CPU box: every bench_dist case for W = 2, real world
#   bash benchmarks/two_gpu.sh run build/two_gpu OUTDIR    # two-GPU box: the link's ceilings and overlap rows,
#                                                           # then a full bench_dist run of those artifacts
#   bash benchmarks/two_gpu.sh host build/two_gpu OUTDIR   # two-GPU box: bench_host --real2 --gpus 2 (the W = 2
#                                                           # torch operators' host us, one process per GPU)
#   bash benchmarks/two_gpu.sh e2e build/two_gpu OUTDIR    # two-GPU box: bench_e2e (a TP = 2 Llama: ditron.nn
#                                                           # against torch + NCCL), its own device call
#   bash benchmarks/two_gpu.sh flash build/two_gpu OUTDIR  # two-GPU box: bench_flash_decode at W = 2, one process
#                                                           # per GPU (against all_gather over NCCL + SDPA)
#   bash benchmarks/two_gpu.sh moe build/two_gpu OUTDIR    # two-GPU box: bench_moe at W = 2, one process per GPU
#                                                           # (ExpertParallelMoE on Mixtral's block against NCCL
#                                                           # all_to_all_single + torch._grouped_mm; needs transformers)
#
# Each run step stays under ten minutes (the device tool's limit per call); its tables go to OUTDIR/*.log and the
# CSV / PNG files to OUTDIR.
set -u
mode=${1:?usage: two_gpu.sh build DIR | run DIR OUTDIR | host DIR OUTDIR | e2e DIR OUTDIR | flash DIR OUTDIR | moe DIR OUTDIR}
dir=${2:?the artifact directory}
cd "$(dirname "$0")/.."
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
case "$mode" in
  build)
    "$py" benchmarks/bench_dist.py --build "$dir" --world 2 --mode real && "$py" benchmarks/bench_e2e.py --build "$dir" &&
      "$py" benchmarks/bench_host.py --build "$dir/host" &&
      "$py" benchmarks/bench_flash_decode.py --build "$dir/flash" --world 2 --mode real &&
      "$py" benchmarks/bench_moe.py --build "$dir/moe" --world 2 --mode real ;;
  run)
    out=${3:?the output directory}
    mkdir -p "$out"
    export CUDA_DEVICE_MAX_CONNECTIONS=32
    nvidia-smi topo -m > "$out/topo.txt" 2>&1
    timeout 240 torchrun --nproc-per-node=2 -- benchmarks/bench_link.py --quick --out "$out" > "$out/link.log" 2>&1
    timeout 330 torchrun --nproc-per-node=2 -- benchmarks/bench_dist.py --run "$dir" --out "$out" > "$out/dist.log" 2>&1
    tail -n 40 "$out/link.log" "$out/dist.log" ;;
  host)
    out=${3:?the output directory}; mkdir -p "$out"; timeout 300 "$py" benchmarks/bench_host.py --real2 "$dir/host" --gpus 2 --out "$out" > "$out/host.log" 2>&1; tail -n 8 "$out/host.log" ;;
  e2e)
    out=${3:?the output directory}; mkdir -p "$out"; CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 570 torchrun --nproc-per-node=2 -- benchmarks/bench_e2e.py --run "$dir" --out "$out" > "$out/e2e.log" 2>&1; tail -n 30 "$out/e2e.log" ;;
  flash)
    out=${3:?the output directory}; mkdir -p "$out"; CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 570 torchrun --nproc-per-node=2 -- benchmarks/bench_flash_decode.py --run "$dir/flash" > "$out/flash.log" 2>&1; tail -n 20 "$out/flash.log"; cp benchmarks/results/flash_decode_real_w2.* "$out/" 2>/dev/null ;;
  moe)
    out=${3:?the output directory}; mkdir -p "$out"; CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 570 torchrun --nproc-per-node=2 -- benchmarks/bench_moe.py --run "$dir/moe" --out "$out" > "$out/moe.log" 2>&1; rc=$?; tail -n 20 "$out/moe.log"; exit $rc ;;
  *)
    echo "usage: two_gpu.sh build DIR | run DIR OUTDIR | host DIR OUTDIR | e2e DIR OUTDIR | flash DIR OUTDIR | moe DIR OUTDIR" >&2; exit 2 ;;
esac
