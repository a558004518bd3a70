#!/usr/bin/env bash
# Device check for one CUDA GPU (an H200 when lent), within 8 minutes: every
# step's timeout is capped by what is left of ZERO_DEVICE_CHECK_SECONDS (470
# by default), so the whole check ends in time however the steps go; a step
# with no time left, or a test that cannot be built or run, prints FAILED:
#   1. build the CUDA targets with Bazel (--config=cuda); without Bazel, use
#      the bundle tools/device_bundle.sh packed (ZERO_DEVICE_BUNDLE, default
#      device_bundle/ when it exists): binaries and every library the GPU
#      machine lacks, with that machine's CUDA runtime and the NCCL wheel's
#      library; else build the kernel test and benchmark with nvcc alone;
#   2. the figures first, so no slow test can leave them without time:
#      every kernel against a device-to-device cudaMemcpy in the same run
#      (bench/cuda/cuda_kernels_bench.cc; fused Adam and casts target >= 85%
#      of the copy's GB/s), the engine's step per stage and the offload
#      pipelines against host<->device copy bandwidth
#      (bench/device_step_bench.cc), and (bundle) the Python extension built
#      there from its one source file with that machine's pybind11 and
#      Python, running the device tests and zero.torch on a CUDA model (and
#      a GPT-shaped one, step times against plain torch on the same GPU);
#   2b. (bundle) a GPT at real sizes (~350M and ~1.3B params, bf16, seq
#      1024; bench/gpt_device_bench.py): zero.torch at stages 0-3 and with
#      offload_optimizer (exact; overlapped where the runtime takes
#      offload_optimizer.delayed_update, else "not available") against
#      plain torch AdamW and DeepSpeed (from the bundle's wheels, its CPU
#      Adam JIT-built in the background from the start), as ratios, in
#      what is left less ZERO_DEVICE_GPT_RESERVE (110 s) for the tests;
#   3. the GPU tests (kernels, CudaDevice, NCCL, the 2-rank dead-peer; from
#      the bundle under compute-sanitizer memcheck, racecheck on the
#      kernels, when the toolkit has it) and the engine over MPI at 2 and 4
#      ranks on the GPU; from the bundle each gets at most an equal share of
#      the time left, so one slow sanitizer run cannot starve the rest.
# Everything it learns is a JSON line on stdout and, when $OUT is set, in
# $OUT/device_check.jsonl (logs of each step go to $OUT/logs/).
#
#   tools/device_check.sh
#   ZERO_DEVICE_CHECK_NO_GPU_OK=1 tools/device_check.sh   # CPU dry run
#   ZERO_DEVICE_CHECK_NVCC=1 tools/device_check.sh        # skip Bazel
#   ZERO_DEVICE_BUNDLE=dir tools/device_check.sh          # run from a bundle
#   DEVICE_CHECK_DRY_RUN=1 tools/device_check.sh          # + the GPT bench on
#       the CPU, tiny (zero importable from PYTHONPATH; //bench:gpt_device_bench_dry_test)
#   (tests: NVCC=path, GTEST_HEADER=path, CXX=path, PYTHON=path,
#    COMPUTE_SANITIZER=path override the tools it looks for)
#
# Exit status: 0 all built, no test or check failed (bandwidth targets are
# reported, not enforced); 1 a build, test or check failed; 2 no GPU visible
# (0 with ZERO_DEVICE_CHECK_NO_GPU_OK=1).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
JOBS=$(nproc 2>/dev/null || echo 4)
LOGDIR="${OUT:-${TMPDIR:-/tmp}/zero_device_check}/logs"
mkdir -p "$LOGDIR"
JSONL=""
if [ -n "${OUT:-}" ]; then
  JSONL="$OUT/device_check.jsonl"
  : > "$JSONL"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zero_dc.XXXXXX")"

emit() {
  echo "$1"
  if [ -n "$JSONL" ]; then echo "$1" >> "$JSONL"; fi
}
elapsed() { echo $(( $(date +%s) - START )); }
DEADLINE="${ZERO_DEVICE_CHECK_SECONDS:-470}"
# budget WANT: WANT seconds, or what is left before the deadline (>= 1: a
# timeout of 0 would mean none); no_time STEP: that step is FAILED unrun.
budget() {
  local left=$(( DEADLINE - $(elapsed) ))
  local b=$1
  [ "$left" -lt "$b" ] && b=$left
  [ "$b" -lt 1 ] && b=1
  echo "$b"
}
# share WANT N: budget WANT, but at most an equal share of what is left
# among the N steps still to run (this one included), so one slow step (a
# compute-sanitizer run) cannot leave the steps after it no time.
share() {
  local left=$(( DEADLINE - $(elapsed) )) b
  b=$(budget "$1")
  [ "$2" -gt 1 ] && [ $(( left / $2 )) -lt "$b" ] && b=$(( left / $2 ))
  [ "$b" -lt 1 ] && b=1
  echo "$b"
}
time_left() { [ $(( DEADLINE - $(elapsed) )) -ge 5 ]; }
no_time() {
  emit "{\"kind\":\"step\",\"name\":\"$1\",\"status\":\"FAILED\",\"why\":\"no time left of ${DEADLINE} s\"}"
  failed=1
}
json_str() { printf '%s' "$1" | tr -d '\n' | sed 's/\\/\\\\/g; s/"/\\"/g'; }

failed=0
gpu=false

# --- GPU ------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1 &&
   info=$(nvidia-smi --query-gpu=name,memory.total,driver_version \
            --format=csv,noheader 2>/dev/null) && [ -n "$info" ]; then
  gpu=true
  emit "{\"kind\":\"gpu\",\"present\":true,\"info\":\"$(json_str "$info")\"}"
else
  emit "{\"kind\":\"gpu\",\"present\":false}"
fi

# --- Build ----------------------------------------------------------------
CUDA_TESTS=(//kernels/cuda:cuda_kernels_test //core:cuda_device_test
            //core:nccl_communicator_test //core:nccl_dead_peer_test
            //tests:gpu_engine_test)
HOST_TESTS=(//kernels/cuda:element_math_test //kernels/cuda:multi_tensor_test
            //core:caching_allocator_test)
BENCH=""
built_with=""
BUNDLE="${ZERO_DEVICE_BUNDLE:-}"
if [ -z "$BUNDLE" ] && [ -z "${ZERO_DEVICE_CHECK_NVCC:-}" ] && ! command -v bazel >/dev/null 2>&1 &&
   [ -d device_bundle ]; then
  BUNDLE=device_bundle
fi
if [ -n "$BUNDLE" ]; then
  if [ -f "$BUNDLE/bin/libzero_c.so" ]; then
    built_with=bundle
    BUNDLE="$(cd "$BUNDLE" && pwd)"
    BENCH="$BUNDLE/bin/cuda_kernels_bench"
    DSTEP="$BUNDLE/bin/device_step_bench"
  fi
  emit "{\"kind\":\"build\",\"tool\":\"bundle\",\"dir\":\"$(json_str "$BUNDLE")\",\"ok\":$([ "$built_with" = bundle ] && echo true || echo false)}"
  [ "$built_with" = bundle ] || failed=1
elif [ -z "${ZERO_DEVICE_CHECK_NVCC:-}" ] && command -v bazel >/dev/null 2>&1; then
  t0=$(date +%s)
  if timeout "$(budget 240)" bazel build --config=cuda --jobs="$JOBS" "${CUDA_TESTS[@]}" \
       "${HOST_TESTS[@]}" //bench/cuda:cuda_kernels_bench //bench:device_step_bench \
       > "$LOGDIR/bazel_build.log" 2>&1; then
    built_with=bazel
    BENCH="$(bazel info --config=cuda bazel-bin 2>/dev/null)/bench/cuda/cuda_kernels_bench"
    DSTEP="$(bazel info --config=cuda bazel-bin 2>/dev/null)/bench/device_step_bench"
  fi
  emit "{\"kind\":\"build\",\"tool\":\"bazel\",\"ok\":$([ "$built_with" = bazel ] && echo true || echo false),\"seconds\":$(( $(date +%s) - t0 ))}"
  if [ "$built_with" != bazel ]; then
    emit "{\"kind\":\"build_log_tail\",\"text\":\"$(json_str "$(tail -c 1500 "$LOGDIR/bazel_build.log")")\"}"
  fi
fi

NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
GTEST_HEADER="${GTEST_HEADER:-/usr/include/gtest/gtest.h}"
NVFLAGS=(-std=c++17 -O3 --fmad=false -Xcompiler -ffp-contract=off -ccbin /usr/bin/g++
         -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
         -I. -I/usr/local/cuda/include)
if [ -n "$BUNDLE" ]; then
  :  # the bundle or nothing: a broken bundle is FAILED above
elif [ -z "$built_with" ] && ! time_left; then
  no_time "nvcc build"
elif [ -z "$built_with" ]; then
  t0=$(date +%s)
  ok=false
  if timeout "$(budget 200)" "$NVCC" "${NVFLAGS[@]}" kernels/cuda/*.cu \
       bench/cuda/cuda_kernels_bench.cc -o "$WORK/cuda_kernels_bench" \
       > "$LOGDIR/nvcc_bench.log" 2>&1; then
    ok=true
    built_with=nvcc
    BENCH="$WORK/cuda_kernels_bench"
  fi
  emit "{\"kind\":\"build\",\"tool\":\"nvcc\",\"target\":\"cuda_kernels_bench\",\"ok\":$ok,\"seconds\":$(( $(date +%s) - t0 ))}"
  [ "$ok" = true ] || failed=1
fi

# --- Bundle environment ---------------------------------------------------
if [ "$built_with" = bundle ]; then
  # The GPU machine's CUDA runtime and the NCCL wheel's libnccl.so.2; the
  # bundle's libraries and OpenMPI prefix (tools/device_bundle.sh).
  PYTHON="${PYTHON:-python3}"
  NCCL_LIB="$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)"
  emit "{\"kind\":\"nccl\",\"lib\":\"$(json_str "${NCCL_LIB:-not found}")\"}"
  export LD_LIBRARY_PATH="$BUNDLE/bin:$BUNDLE/lib${NCCL_LIB:+:$NCCL_LIB}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$BUNDLE/ompi" PMIX_INSTALL_PREFIX="$BUNDLE/ompi"
  export PATH="$BUNDLE/ompi/bin:$PATH"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=""
fi

# --- DeepSpeed from the bundle (the GPT bench's peer) ------------------------
# Its wheel and pure-Python dependencies (tools/device_bundle.sh, wheels/)
# unpacked into one folder the bench appends to sys.path (the machine's own
# packages win); ninja's binary on PATH for torch's JIT builds. On a GPU its
# CPU Adam starts JIT-building now, in the background, so the offload mode
# finds it built (TORCH_EXTENSIONS_DIR is shared).
DS_SITE=""
if [ "$built_with" = bundle ] && compgen -G "$BUNDLE/wheels/deepspeed-*.whl" > /dev/null; then
  DS_SITE="$WORK/ds_site"
  mkdir -p "$DS_SITE"
  for w in "$BUNDLE"/wheels/*.whl; do
    "$PYTHON" -m zipfile -e "$w" "$DS_SITE" >> "$LOGDIR/ds_unpack.log" 2>&1
  done
  for n in "$DS_SITE"/ninja*.data/*/ninja "$DS_SITE"/ninja/data/bin/ninja; do
    if [ -f "$n" ]; then chmod +x "$n"; PATH="$(dirname "$n"):$PATH"; fi
  done
  export PATH TORCH_EXTENSIONS_DIR="$WORK/torch_extensions"
  emit "{\"kind\":\"deepspeed\",\"wheels\":$(ls "$BUNDLE"/wheels/*.whl | wc -l),\"site\":\"$(json_str "$DS_SITE")\"}"
  if [ "$gpu" = true ]; then
    "$PYTHON" -c 'import sys; sys.path.append(sys.argv[1])
from deepspeed.ops.op_builder import CPUAdamBuilder
CPUAdamBuilder().load()' "$DS_SITE" > "$LOGDIR/ds_cpu_adam_build.log" 2>&1 &
  fi
fi

# gpt_bench PYTHONPATH [--dry-run]: bench/gpt_device_bench.py in what is
# left of the deadline less the reserve for the steps after it; its lines
# passed on; no summary line (it died) or a failed mode is FAILED.
gpt_bench() {
  local pypath=$1 left rc
  shift
  left=$(( DEADLINE - $(elapsed) - ${ZERO_DEVICE_GPT_RESERVE:-110} ))
  [ "$left" -gt "${ZERO_DEVICE_GPT_SECONDS:-330}" ] && left=${ZERO_DEVICE_GPT_SECONDS:-330}
  if [ "$left" -lt 20 ]; then no_time "gpt_device_bench"; return; fi
  PYTHONPATH="$pypath" timeout $(( left + 20 )) "${PYTHON:-python3}" bench/gpt_device_bench.py \
    --seconds "$left" --ds-site "$DS_SITE" "$@" > "$WORK/gpt.jsonl" 2> "$LOGDIR/gpt_device_bench.log"
  rc=$?
  while IFS= read -r line; do
    case "$line" in "{"*) emit "$line";; esac
  done < "$WORK/gpt.jsonl"
  if [ $rc -ne 0 ] || ! grep -q '"kind":"gpt_device_summary"' "$WORK/gpt.jsonl"; then
    emit "{\"kind\":\"step\",\"name\":\"gpt_device_bench\",\"status\":\"FAILED\",\"rc\":$rc,\"why\":\"$(json_str "$(tail -c 400 "$LOGDIR/gpt_device_bench.log")")\"}"
    failed=1
  fi
}

# --- Benchmark ------------------------------------------------------------
bench_rc=-1
missed=""
if [ -n "$BENCH" ] && [ -x "$BENCH" ] && ! time_left; then
  no_time "cuda_kernels_bench"
elif [ -n "$BENCH" ] && [ -x "$BENCH" ]; then
  timeout "$(budget 75)" "$BENCH" > "$WORK/bench.jsonl" 2> "$LOGDIR/bench.stderr"
  bench_rc=$?
  while IFS= read -r line; do
    emit "$line"
    case "$line" in
      *'"pass":false'*) missed="$missed $(echo "$line" | grep -oE '"(kernel|what)":"[^"]*"' | cut -d'"' -f4)";;
    esac
  done < "$WORK/bench.jsonl"
  # 2 = no device (already reported as skip); 1 = a bit-exact check failed.
  if [ $bench_rc -ne 0 ] && [ $bench_rc -ne 2 ]; then failed=1; fi
fi

# The engine's step per stage and the offload pipelines vs copy bandwidth.
if [ -n "${DSTEP:-}" ] && [ -x "$DSTEP" ] && [ "$gpu" = true ]; then
  if ! time_left; then
    no_time "device_step_bench"
  else
    timeout "$(budget 75)" "$DSTEP" cuda "${ZERO_DEVICE_STEP_PARAMS:-32e6}" 5 bf16 \
      > "$WORK/dstep.jsonl" 2> "$LOGDIR/device_step_bench.stderr"
    rc=$?
    while IFS= read -r line; do emit "$line"; done < "$WORK/dstep.jsonl"
    if [ $rc -ne 0 ]; then
      emit "{\"kind\":\"step\",\"name\":\"device_step_bench\",\"status\":\"FAILED\",\"rc\":$rc}"
      failed=1
    fi
  fi
fi

# --- Tests ----------------------------------------------------------------
count_cases() {  # log -> "passed skipped failed"
  local r s f clean
  # GoogleTest colours its lines under mpirun; mpi_engine_main keeps its own
  # tally ("N passed, M failed" per rank).
  clean=$(sed 's/\x1b\[[0-9;]*m//g' "$1")
  r=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' <<< "$clean" || true)
  s=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' <<< "$clean" || true)
  f=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' <<< "$clean" || true)
  if [ "$r$s$f" = 000 ]; then
    read -r r f < <(grep -oE '[0-9]+ passed, [0-9]+ failed' <<< "$clean" |
                    awk '{p += $1; q += $3} END {print p + 0, q + 0}')
  fi
  echo "$r $s $f"
}

# run_case NAME TIMEOUT CMD...: one test binary, its cases counted; its
# timeout is its share (share) of what is left among the REMAINING cases.
REMAINING=1
run_case() {
  local name=$1 want=$2 t0 rc r s f st n=$REMAINING
  shift 2
  [ "$REMAINING" -gt 1 ] && REMAINING=$(( REMAINING - 1 ))
  if ! time_left; then no_time "$name"; return; fi
  t0=$(date +%s)
  timeout "$(share "$want" "$n")" "$@" > "$LOGDIR/$name.log" 2>&1
  rc=$?
  read -r r s f < <(count_cases "$LOGDIR/$name.log")
  st=$([ $rc -eq 0 ] && echo PASSED || echo FAILED)
  [ $rc -eq 124 ] && st=TIMEOUT
  emit "{\"kind\":\"test\",\"target\":\"$name\",\"status\":\"$st\",\"passed\":$r,\"skipped\":$s,\"failed\":$f,\"seconds\":$(( $(date +%s) - t0 ))}"
  [ $rc -eq 0 ] || failed=1
}

if [ "$built_with" = bundle ]; then
  # The Python extension from its one source file, with this machine's
  # pybind11 and Python, then the device tests and zero.torch on CUDA.
  CXX="${CXX:-c++}"
  PYDIR="$WORK/py"
  mkdir -p "$PYDIR/zero/torch"
  cp bindings/python/zero/*.py bindings/python/zero/py.typed "$PYDIR/zero/" 2>/dev/null
  cp bindings/python/zero/torch/*.py "$PYDIR/zero/torch/" 2>/dev/null
  ext="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")' 2>/dev/null || echo .so)"
  # pybind11's own flags (pip), else its headers in /usr/include beside
  # Python's (Debian's pybind11-dev has no module).
  incs="$("$PYTHON" -m pybind11 --includes 2>/dev/null ||
          "$PYTHON" -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])' 2>/dev/null ||
          true)"
  if ! time_left; then
    no_time "python extension"
  else
    t0=$(date +%s)
    # shellcheck disable=SC2086  # $incs is several -I flags
    if timeout "$(budget 90)" "$CXX" -O2 -std=c++17 -shared -fPIC $incs -Icapi/include \
         bindings/python/src/*.cc -L"$BUNDLE/bin" -lzero_c \
         -Wl,-rpath,"$BUNDLE/bin" -o "$PYDIR/zero/_zero_c$ext" > "$LOGDIR/python_ext.log" 2>&1 &&
       [ -n "$incs" ]; then
      emit "{\"kind\":\"build\",\"tool\":\"c++\",\"target\":\"python extension\",\"ok\":true,\"seconds\":$(( $(date +%s) - t0 ))}"
      if ! time_left; then
        no_time "python device tests"
      else
        t0=$(date +%s)
        pypath="$PYDIR:bindings/python/tests"
        # The bundle's pytest only where this Python has none.
        if ! "$PYTHON" -c 'import pytest' > /dev/null 2>&1 && [ -d "$BUNDLE/python" ]; then
          pypath="$pypath:$BUNDLE/python"
        fi
        # zero.torch on a CUDA GPT-shaped model against plain torch on the
        # same GPU writes its step times there (torch_device_test.py).
        : > "$WORK/torch_timing.jsonl"
        PYTHONPATH="$pypath" ZERO_TORCH_CUDA=1 ZERO_TORCH_TIMING_OUT="$WORK/torch_timing.jsonl" \
          timeout "$(budget 150)" "$PYTHON" -m pytest -q -rs \
          bindings/python/tests/device_test.py bindings/python/tests/torch_device_test.py \
          > "$LOGDIR/python_device_tests.log" 2>&1
        rc=$?
        line=$(grep -E '(passed|failed)' "$LOGDIR/python_device_tests.log" | tail -1)
        emit "{\"kind\":\"test\",\"target\":\"python device_test + torch_device_test\",\"status\":\"$([ $rc -eq 0 ] && echo PASSED || echo FAILED)\",\"result\":\"$(json_str "$line")\",\"seconds\":$(( $(date +%s) - t0 ))}"
        while IFS= read -r tl; do emit "$tl"; done < "$WORK/torch_timing.jsonl"
        [ $rc -eq 0 ] || failed=1
      fi
      # The GPT at real sizes, before the GPU tests (they keep the reserve).
      if [ "$gpu" = true ]; then
        gpt_bench "$PYDIR"
      elif [ "${DEVICE_CHECK_DRY_RUN:-}" = 1 ]; then
        gpt_bench "$PYDIR" --dry-run
      fi
    else
      emit "{\"kind\":\"build\",\"tool\":\"c++\",\"target\":\"python extension\",\"ok\":false,\"why\":\"$(json_str "${incs:-no pybind11 for $PYTHON}; $(tail -c 600 "$LOGDIR/python_ext.log")")\"}"
      failed=1
    fi
  fi
  SAN="${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
  san=()
  if [ -x "$SAN" ]; then san=("$SAN" --tool memcheck --error-exitcode 1); fi
  # Cases still to run: 4 tests, racecheck, and on a GPU 3 MPI runs.
  REMAINING=$(( 4 + $([ ${#san[@]} -gt 0 ] && echo 1 || echo 0) + $([ "$gpu" = true ] && echo 3 || echo 0) ))
  emit "{\"kind\":\"sanitizer\",\"memcheck\":$([ ${#san[@]} -gt 0 ] && echo true || echo false)}"
  # NCCL (the pip wheel's 2.28) probes its kernels with cudaFuncGetAttributes
  # at init and gets cudaErrorNoKernelImageForDevice for some: 48 reported
  # "errors" on the H200 that NCCL handles, so memcheck would fail every
  # binary that creates a communicator. For those, API errors are not
  # reported; memory errors still are.
  for t in cuda_kernels_test cuda_device_test nccl_communicator_test gpu_engine_test; do
    api=()
    case "$t" in
      nccl_*|gpu_engine_*) [ ${#san[@]} -gt 0 ] && api=(--report-api-errors no) ;;
    esac
    run_case "$t" 90 "${san[@]}" "${api[@]}" "$BUNDLE/bin/$t"
  done
  if [ ${#san[@]} -gt 0 ]; then
    run_case cuda_kernels_test_racecheck 90 "$SAN" --tool racecheck --error-exitcode 1 \
      "$BUNDLE/bin/cuda_kernels_test"
  fi
  if [ "$gpu" = true ]; then
    for np in 2 4; do
      run_case "mpi_engine_main_cuda_np$np" 60 "$BUNDLE/ompi/bin/mpirun" --oversubscribe \
        -np "$np" -x LD_LIBRARY_PATH -x OPAL_PREFIX -x PMIX_INSTALL_PREFIX \
        --mca btl self,vader "$BUNDLE/bin/mpi_engine_main" --device cuda
    done
    # The NCCL dead peer (core/comm/nccl_dead_peer_test.sh):
    # two ranks, rank 1 never joins NCCL, rank 0 must time out. Without it
    # the bundle only ever ran that case at world 1, where it skips.
    run_case nccl_dead_peer_test 60 "$BUNDLE/ompi/bin/mpirun" --oversubscribe \
      -np 2 -x LD_LIBRARY_PATH -x OPAL_PREFIX -x PMIX_INSTALL_PREFIX \
      --mca btl self,vader "$BUNDLE/bin/nccl_communicator_test" --gtest_filter='NcclDeadPeer.*'
  fi
elif [ "$built_with" = bazel ] && ! time_left; then
  no_time "gpu tests"
elif [ "$built_with" = bazel ]; then
  timeout "$(budget 150)" bazel test --config=cuda --jobs="$JOBS" --local_test_jobs=1 \
    --test_output=errors "${CUDA_TESTS[@]}" "${HOST_TESTS[@]}" \
    > "$LOGDIR/bazel_test.log" 2>&1
  testlogs="$(bazel info --config=cuda bazel-testlogs 2>/dev/null)"
  for t in "${CUDA_TESTS[@]}" "${HOST_TESTS[@]}"; do
    path="${t#//}"
    log="$testlogs/${path/://}/test.log"
    status=$(grep -E "^$t +" "$LOGDIR/bazel_test.log" | grep -oE 'PASSED|FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD' | head -1)
    [ -n "$status" ] || status=UNKNOWN
    read -r r s f < <( [ -f "$log" ] && count_cases "$log" || echo "0 0 0")
    emit "{\"kind\":\"test\",\"target\":\"$t\",\"status\":\"$status\",\"passed\":$r,\"skipped\":$s,\"failed\":$f}"
    [ "$status" = PASSED ] || failed=1
    if [ -f "$log" ] && [ -n "${OUT:-}" ]; then
      cp "$log" "$LOGDIR/$(echo "$path" | tr '/:' '__').log" 2>/dev/null || true
    fi
  done
elif [ "$built_with" = nvcc ] && [ ! -f "$GTEST_HEADER" ]; then
  # Not a silent skip: the GPU tests did not run, so the check failed.
  emit "{\"kind\":\"test\",\"target\":\"cuda_kernels_test (nvcc)\",\"status\":\"FAILED\",\"why\":\"no GoogleTest ($GTEST_HEADER): GPU tests not run\"}"
  failed=1
elif [ "$built_with" = nvcc ] && ! time_left; then
  no_time "cuda_kernels_test (nvcc)"
elif [ "$built_with" = nvcc ]; then
  # Without Bazel: the kernel GPU test alone (the others need absl/MPI).
  t0=$(date +%s)
  if timeout "$(budget 150)" "$NVCC" "${NVFLAGS[@]}" kernels/cuda/*.cu \
       kernels/cuda/cuda_kernels_test.cc -lgtest_main -lgtest -lpthread \
       -o "$WORK/cuda_kernels_test" > "$LOGDIR/nvcc_test.log" 2>&1; then
    timeout "$(budget 60)" "$WORK/cuda_kernels_test" > "$LOGDIR/cuda_kernels_test.log" 2>&1
    rc=$?
    read -r r s f < <(count_cases "$LOGDIR/cuda_kernels_test.log")
    st=$([ $rc -eq 0 ] && echo PASSED || echo FAILED)
    emit "{\"kind\":\"test\",\"target\":\"cuda_kernels_test (nvcc)\",\"status\":\"$st\",\"passed\":$r,\"skipped\":$s,\"failed\":$f,\"seconds\":$(( $(date +%s) - t0 ))}"
    [ $rc -eq 0 ] || failed=1
  else
    emit "{\"kind\":\"test\",\"target\":\"cuda_kernels_test (nvcc)\",\"status\":\"FAILED TO BUILD\"}"
    failed=1
  fi
fi

# --- Engine on the GPU across MPI ranks ------------------------------------
# Stages 0-3 x fp32/fp16/bf16 (+ accumulation, clipping, overflow) on 2 and 4
# ranks sharing the GPU, collectives staged through host memory; each rank
# compares with a CPU single-rank run in the same process.
if [ "$built_with" = bazel ] && [ "$gpu" = true ]; then
  timeout "$(budget 40)" bazel build --config=cuda --jobs="$JOBS" //tests:mpi_engine_main >> "$LOGDIR/bazel_build.log" 2>&1
  MPI_BIN="$(bazel info --config=cuda bazel-bin 2>/dev/null)/tests/mpi_engine_main"
  for np in 2 4; do
    if ! time_left; then no_time "mpi_engine_main --device cuda np $np"; continue; fi
    t0=$(date +%s)
    timeout "$(budget 60)" bash tests/run_mpi.sh "$np" "$MPI_BIN" --device cuda > "$LOGDIR/mpi_engine_cuda_np$np.log" 2>&1
    rc=$?
    line=$(grep -E 'passed, [0-9]+ failed' "$LOGDIR/mpi_engine_cuda_np$np.log" | tail -1)
    emit "{\"kind\":\"test\",\"target\":\"mpi_engine_main --device cuda\",\"np\":$np,\"status\":\"$([ $rc -eq 0 ] && echo PASSED || echo FAILED)\",\"result\":\"$(json_str "$line")\",\"seconds\":$(( $(date +%s) - t0 ))}"
    [ $rc -eq 0 ] || failed=1
  done
fi

# A dry run without a bundle: the GPT bench on the CPU with the zero this
# PYTHONPATH gives (the bundle's path above runs it after its extension).
if [ "${DEVICE_CHECK_DRY_RUN:-}" = 1 ] && [ "$built_with" != bundle ]; then
  gpt_bench "${PYTHONPATH:-}" --dry-run
fi

emit "{\"kind\":\"summary\",\"gpu\":$gpu,\"built_with\":\"${built_with:-none}\",\"failed\":$([ $failed -eq 0 ] && echo false || echo true),\"bench_rc\":$bench_rc,\"below_target_or_failed\":\"$(json_str "${missed# }")\",\"seconds\":$(elapsed)}"
rm -rf "$WORK"
if [ $failed -ne 0 ]; then exit 1; fi
if [ "$gpu" != true ] && [ -z "${ZERO_DEVICE_CHECK_NO_GPU_OK:-}" ]; then exit 2; fi
exit 0
