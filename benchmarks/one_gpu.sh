#!/bin/bash
# The GPU checks of this phase on one GPU, in two steps (the GPU box has no MLIR bindings):
#
#   bash benchmarks/one_gpu.sh build build/one_gpu          # CPU box: every artifact the steps below load
#   bash benchmarks/one_gpu.sh run build/one_gpu OUTDIR     # one-GPU box: the GPU tests of ditron.language,
#                                                            # ditron.device, the torch operators, ditron.nn's Llama
#                                                            # and the executor, then bench_host and
#                                                            # bench_user_kernels (virtual worlds W = 1, 2)
#   bash benchmarks/one_gpu.sh flash build/one_gpu OUTDIR   # one-GPU box: the flash-decode part of run alone
#                                                            # (its GPU tests, bench_flash_decode W = 1, 2 --quick)
#
# The run step without its flash part stays under ten minutes (the device tool's limit per call; the flash part
# adds up to seven: run it as its own call, `flash`, where one call must do); logs and CSV files go to OUTDIR.
set -u
mode=${1:?usage: one_gpu.sh build DIR | run DIR OUTDIR | flash DIR OUTDIR}
dir=${2:?the artifact directory}
cd "$(dirname "$0")/.."
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
case "$mode" in
  build)
    "$py" tools/build_gpu_test_artifacts.py "$dir/tests" && "$py" test/py/test_device_builder_gpu.py build "$dir/device" &&
      "$py" test/py/test_eager_gpu.py build "$dir/eager" &&
      "$py" benchmarks/bench_host.py --build "$dir/host" &&
      "$py" benchmarks/bench_user_kernels.py --build "$dir/user" --world 1 2 --mode virtual --quick &&
      "$py" test/py/test_flash_decode_gpu.py build "$dir/flash_tests" &&
      "$py" benchmarks/bench_flash_decode.py --build "$dir/flash" --world 1 2 --mode virtual --quick ;;
  run)
    out=${3:?the output directory}; mkdir -p "$out"
    export CUDA_DEVICE_MAX_CONNECTIONS=32
    t() { local limit=$1 log=$2; shift 2; timeout "$limit" "$@" > "$out/$log" 2>&1; echo "$log: exit $? $(tail -n 1 "$out/$log")"; }
    t 240 tests.log env DITRON_TEST_ARTIFACTS="$dir/tests" "$py" -m pytest -q -m gpu -p no:cacheprovider \
      test/py/test_language_gpu.py test/py/test_language_specialize.py test/py/test_torch_ops_gpu.py test/py/test_llama_gpu.py test/py/test_executor_gpu.py \
      test/py/test_loader_gpu.py
    t 100 device.log env DITRON_DEVICE_ARTS="$dir/device" "$py" -m pytest -q -m gpu -p no:cacheprovider \
      test/py/test_device_builder_gpu.py
    t 100 eager.log env DITRON_OPS_DIR="$dir/eager" "$py" -m pytest -q -m gpu -p no:cacheprovider test/py/test_eager_gpu.py
    t 90 host.log "$py" benchmarks/bench_host.py --run "$dir/host" --out "$out"
    t 70 user_w1.log "$py" benchmarks/bench_user_kernels.py --run "$dir/user" --virtual 1 --quick
    t 70 user_w2.log "$py" benchmarks/bench_user_kernels.py --run "$dir/user" --virtual 2 --quick
    cp benchmarks/results/user_kernels_virtual_w*.csv "$out/" 2>/dev/null
    bash benchmarks/one_gpu.sh flash "$dir" "$out" ;;
  flash)
    out=${3:?the output directory}; mkdir -p "$out"
    export CUDA_DEVICE_MAX_CONNECTIONS=32
    t() { local limit=$1 log=$2; shift 2; timeout "$limit" "$@" > "$out/$log" 2>&1; echo "$log: exit $? $(tail -n 1 "$out/$log")"; }
    t 180 flash_tests.log env DITRON_FLASH_DECODE_ARTS="$dir/flash_tests" "$py" -m pytest -q -m gpu -p no:cacheprovider \
      test/py/test_flash_decode_gpu.py
    t 120 flash_w1.log "$py" benchmarks/bench_flash_decode.py --run "$dir/flash" --virtual 1 --quick
    t 120 flash_w2.log "$py" benchmarks/bench_flash_decode.py --run "$dir/flash" --virtual 2 --quick
    cp benchmarks/results/flash_decode_virtual_w*_quick.* "$out/" 2>/dev/null ;;
  *)
    echo "usage: one_gpu.sh build DIR | run DIR OUTDIR | flash DIR OUTDIR" >&2; exit 2 ;;
esac
