#!/usr/bin/env bash
# The real-GPU half of issue #17 as ONE command, sized for a lent H100/H200 machine: a bare
# machine (its own Python with torch CUDA, numba-cuda, CuPy, Cython and pytest; nothing can
# be fetched there), 15 minutes of device time for everything, one command at most 10 min.
#
#   bash tools/device_check.sh [phase ...]        default phases: info bench tests
#
#   info    nvidia-smi, CPU, Python and package versions, numba's view of the device
#   bench   benchmarks/gpu.py: every op and module case on the GPU against the NumPy
#           reference, the float64-in-float32-PTX check, op timings against torch CUDA,
#           the GPT training step (demo config and 12 layers d=768)     -> gpu.json, gpu.log
#   tests   FASTNN_REAL_GPU=1 pytest over the cuda-facing test files (the gpu-marked
#           tests included; they need no compiled cpu kernels)         -> tests.log, tests.xml
#   build   the compiled cpu kernels, this CPU's best variant only, all cores  -> build.log
#   suite   FASTNN_REAL_GPU=1 pytest over the whole suite (needs build; pytest-xdist
#           when there)                                                 -> suite.log, suite.xml
#
# Each phase has its own time limit, taken from what is left of DEVICE_CHECK_SECONDS
# (default 540: a 590-second call), and the next phase runs even when one fails or runs out
# of time.  Everything lands in $OUT (the device tool's return folder; ./device-check
# elsewhere) with summary.txt, one line per phase (exit status, seconds), so a single call
# brings back whatever finished.  A second call can run what is left ("build suite").
#
# DEVICE_CHECK_SMOKE=1 runs the same phases under numba's CUDA simulator on tiny sizes
# (no GPU): it checks this script, not the device.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BUDGET=${DEVICE_CHECK_SECONDS:-540}
SMOKE=${DEVICE_CHECK_SMOKE:-0}
T0=$SECONDS
export PYTHONUNBUFFERED=1
if [ "$SMOKE" = 1 ]; then
    export NUMBA_ENABLE_CUDASIM=1
    unset FASTNN_REAL_GPU
else
    unset NUMBA_ENABLE_CUDASIM
    export FASTNN_REAL_GPU=1
fi
PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(info bench tests)

left() { echo $((BUDGET - (SECONDS - T0))); }

# run NAME CAP CMD...: CMD under min(CAP, what is left - 5 s) seconds, output to NAME.log
run() {
    local name=$1 cap=$2
    shift 2
    local lim
    lim=$(left)
    lim=$((lim - 5))
    [ "$lim" -gt "$cap" ] && lim=$cap
    if [ "$lim" -lt 10 ]; then
        echo "$name: skipped, no time left" | tee -a "$OUT/summary.txt"
        return
    fi
    local t=$SECONDS
    echo "=== [$((SECONDS - T0)) s] $name (limit $lim s)"
    timeout --kill-after=5 "$lim" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    local note=""
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (stopped at its time limit)"
    echo "$name: exit $rc in $((SECONDS - t)) s$note" | tee -a "$OUT/summary.txt"
    tail -n 25 "$OUT/$name.log"
}

# the test files that reach the cuda backend: run_case over every available backend, the
# launch tests, the gpu-marked ones (the bench phase already did gpu.py --quick's work)
mapfile -t CUDA_TESTS < <(grep -l cuda tests/test_*.py)

: > "$OUT/summary.txt"
for phase in "${PHASES[@]}"; do
    case $phase in
    info)
        run info 60 bash -c '
            date -u; nproc; (lscpu | grep -E "Model name|^CPU\(s\)") || true
            nvidia-smi || echo "no nvidia-smi"
            '"$PY"' -c "import sys; print(sys.version)"
            '"$PY"' -m pip list 2>/dev/null | grep -i -E "^(numba|numba-cuda|llvmlite|cupy|torch|numpy|cython|pytest|pytest-xdist|cuda-)" || true
            '"$PY"' -c "from numba import cuda; cuda.detect()"
            '"$PY"' -c "import fastnn; print(\"fastnn\", fastnn.__version__, fastnn.available_backends())"'
        ;;
    bench)
        if [ "$SMOKE" = 1 ]; then
            run bench 900 "$PY" benchmarks/gpu.py --smoke --skip-suite --json "$OUT/gpu.json"
        else
            run bench 330 "$PY" benchmarks/gpu.py --json "$OUT/gpu.json"
        fi
        ;;
    tests)
        # -k cuda: their cuda cases (and every test of the cuda files); the cpu kernels may not be
        # built yet on a fresh machine
        run tests 400 "$PY" -m pytest -q -p no:cacheprovider -rfE --junitxml="$OUT/tests.xml" \
            -k cuda --deselect tests/test_cuda_gpu.py::test_benchmark_script_quick_run "${CUDA_TESTS[@]}"
        ;;
    build)
        V=$("$PY" -c "from fastnn.cpu import cpu_variants; print(cpu_variants()[0])" 2>/dev/null || echo base)
        run build 300 env FASTNN_VARIANTS="$V" FASTNN_BUILD_JOBS="$(nproc)" \
            "$PY" setup.py build_ext --inplace
        ;;
    suite)
        XDIST=()
        if "$PY" -c "import xdist" 2>/dev/null; then
            n=$(( $(nproc) / 2 )); [ "$n" -gt 8 ] && n=8; [ "$n" -ge 2 ] && XDIST=(-n "$n")
        fi
        run suite 560 "$PY" -m pytest tests -q -p no:cacheprovider -rfE "${XDIST[@]}" \
            --junitxml="$OUT/suite.xml" \
            --deselect tests/test_cuda_gpu.py::test_benchmark_script_quick_run
        ;;
    *)
        echo "unknown phase $phase (info, bench, tests, build, suite)" | tee -a "$OUT/summary.txt"
        ;;
    esac
done
echo "=== [$((SECONDS - T0)) s] done; $OUT:"
cat "$OUT/summary.txt"
