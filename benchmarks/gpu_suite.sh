#!/usr/bin/env bash
# The whole GPU side in one call on a CUDA machine: compile the catalogue,
# the GPU test suite (skips there are failures), then the benchmarks.
# PYTEST_ARGS adds pytest options to the tests stage (e.g. "-n 8" with pytest-xdist).
# Stages: warmup, tests, startup, throughput, torch, host (default: all); lifecycle
# (benchmarks/lifecycle.py: one-call scripts in fresh processes, run twice; LIFECYCLE_ARGS adds options); compile
# (every kernel's NVRTC time), einsum (benchmarks/einsum.py), counting (benchmarks/counting.py), boolean
# (benchmarks/boolean_ceilings.py, then benchmarks/boolean.py: and_or against the cuBLAS bf16 idiom and f32 max_plus, and on the CPU), cpu (benchmarks/cpu.py on
# this machine's cores, the Rust crate from a wheel in .whl/rust); compile_times.py
# checks every catalogue kernel against the 2.0 s budget of a tuned kernel; host runs
# benchmarks/host_overhead.py (per call, and a cold start) and benchmarks/graphed.py; and
# tune (tile-shape search), multigpu (the multi-GPU tests and benchmarks/dask_scaling.py on
# dask-cuda's LocalCUDACluster; needs 2 GPUs or more and the wheels in .whl, below) and large (operands and outputs over
# 2**31 elements, ~17 GiB of GPU memory), run by hand.  Results and logs go to $OUT
# (the device tool's output folder) or benchmarks/results/gpu-run.
#
#   bash benchmarks/gpu_suite.sh [stage ...]
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu-run}
mkdir -p "$OUT"
stages=${*:-warmup tests startup throughput torch host}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ]; then   # wheels the GPU machine lacks (platformdirs, dask, distributed, dask-cuda...), carried along
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
  # .whl/fallback: compiled packages dask-cuda needs that the image has in some version; the carried
  # ones go in only where the image's cannot serve (cuda-core >= 0.5 has cuda.core.Device). cuda-core,
  # cuda-bindings and cuda-pathfinder go in together, in one call: --target replaces the whole cuda/ folder.
  if [ -d .whl/fallback ]; then
    python3 -c "from cuda.core import Device" 2>/dev/null ||
      python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/fallback/cuda_*.whl
    python3 -c "import pandas" 2>/dev/null ||
      python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/fallback/{pandas,python_dateutil,six}-*.whl
  fi
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "note: editable install failed; running from PYTHONPATH"
export TROPICAL_GEMM_CACHE_DIR=${TROPICAL_GEMM_CACHE_DIR:-/tmp/tropical-gemm-cache}
# Tiered compilation off: a benchmark's first calls would otherwise run on baseline kernels until the
# background compile lands.  benchmarks/startup.py sets it per story, and the tiering tests turn it on.
export TROPICAL_GEMM_TIERED=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
status=0
for stage in $stages; do
  echo "=== $stage"
  case $stage in
    warmup) t0=$SECONDS; python3 -m tropical_gemm warmup --json > "$OUT/warmup.json" 2> "$OUT/warmup.log"; s=$?
            echo "warmup of the whole catalogue: $((SECONDS - t0)) s wall" | tee -a "$OUT/warmup.log" ;;
    tests) python3 -m pytest -m gpu --require-gpu -q -p no:cacheprovider ${PYTEST_ARGS:-} tests 2>&1 | tee "$OUT/pytest-gpu.log"; s=${PIPESTATUS[0]} ;;
    startup) { python3 benchmarks/startup.py --out "$OUT" && python3 benchmarks/startup_peers.py --out "$OUT"; } 2>&1 | tee "$OUT/startup.log"; s=${PIPESTATUS[0]} ;;
    throughput) python3 benchmarks/throughput.py --out "$OUT" ${QUICK:+--quick} 2>&1 | tee "$OUT/throughput.log"; s=${PIPESTATUS[0]} ;;
    host) { python3 benchmarks/host_overhead.py --out "$OUT" && python3 benchmarks/host_overhead.py --cold-start --out "$OUT" &&
            python3 benchmarks/graphed.py --out "$OUT"; } 2>&1 | tee "$OUT/host.log"; s=${PIPESTATUS[0]} ;;
    compile) CUDA_CACHE_DISABLE=1 python3 benchmarks/compile_times.py --out "$OUT" 2>&1 | tee "$OUT/compile-times.log"; s=${PIPESTATUS[0]} ;;
    einsum) python3 benchmarks/einsum.py --device cuda --out "$OUT" 2>&1 | tee "$OUT/einsum.log"; s=${PIPESTATUS[0]} ;;
    counting) python3 benchmarks/counting.py --device cuda --out "$OUT" 2>&1 | tee "$OUT/counting.log"; s=${PIPESTATUS[0]} ;;
    boolean) { python3 benchmarks/boolean_ceilings.py --out "$OUT" && python3 benchmarks/boolean.py --out "$OUT"; } 2>&1 | tee "$OUT/boolean.log"; s=${PIPESTATUS[0]} ;;
    cpu) python3 benchmarks/cpu.py --out "$OUT" ${RUST_WHEEL:+--rust-wheel "$RUST_WHEEL"} 2>&1 | tee "$OUT/cpu.log"; s=${PIPESTATUS[0]} ;;
    lifecycle) python3 benchmarks/lifecycle.py --out "$OUT" ${LIFECYCLE_ARGS:-} 2>&1 | tee "$OUT/lifecycle.log"; s=${PIPESTATUS[0]} ;;
    tune) python3 benchmarks/tune_tiles.py --out "$OUT" 2>&1 | tee "$OUT/tune.log"; s=${PIPESTATUS[0]} ;;
    torch) python3 benchmarks/torch_layer.py --out "$OUT" 2>&1 | tee "$OUT/torch.log"; s=${PIPESTATUS[0]} ;;
    multigpu) { python3 -c "import dask, distributed, dask_cuda, pandas, cuda.core as cc
print('dask', dask.__version__, 'distributed', distributed.__version__, 'dask-cuda', dask_cuda.__version__,
      'pandas', pandas.__version__, 'cuda-core', cc.__version__)"
                python3 -m pytest -m multi_gpu --require-gpu --require-multi-gpu -q -p no:cacheprovider tests; } 2>&1 |
                tee "$OUT/pytest-multigpu.log"; s=${PIPESTATUS[0]}
              python3 benchmarks/dask_scaling.py --out "$OUT" 2>&1 | tee "$OUT/dask-scaling.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || s=1 ;;
    large) python3 -m pytest -q -p no:cacheprovider --require-gpu tests/test_large_sizes.py 2>&1 | tee "$OUT/pytest-large.log"; s=${PIPESTATUS[0]} ;;
    *) echo "unknown stage $stage"; s=2 ;;
  esac
  echo "=== $stage exit $s"
  [ "$s" -eq 0 ] || status=1
done
echo "=== summary"
grep -hE "passed|failed" "$OUT"/pytest-*.log 2>/dev/null | tail -2
for f in "$OUT"/*.log; do echo "--- $(basename "$f")"; tail -n 25 "$f"; done | grep -v "^\s*$" | tail -n 120
exit $status
