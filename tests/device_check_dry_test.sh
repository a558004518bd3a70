#!/usr/bin/env bash
# CPU dry run of tools/device_check.sh: with a fake nvcc and no
# GPU, the check's control flow holds: every step is capped by the deadline
# (ZERO_DEVICE_CHECK_SECONDS) so the whole check ends in time, a step with no
# time left prints FAILED, GPU tests that cannot be built for want of
# GoogleTest print FAILED instead of being skipped silently, and the figures
# run first while one slow test gets only its share of the time left (S).
set -uo pipefail
CHECK="$1"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAKE="$T/fake_nvcc"
cat > "$FAKE" <<'SH'
#!/usr/bin/env bash
# Sleeps FAKE_NVCC_SLEEP seconds, then "builds" the -o target: a program
# that exits 2 (no device), like the real binaries without a GPU.
sleep "${FAKE_NVCC_SLEEP:-0}"
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
[ -n "$out" ] && printf '#!/bin/sh\nexit 2\n' > "$out" && chmod +x "$out"
exit 0
SH
chmod +x "$FAKE"
fail=0
check() {  # name, condition result
  if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}
run() {  # env... -> output in $T/out, rc in $rc, seconds in $secs
  local t0
  t0=$(date +%s)
  env -u OUT ZERO_DEVICE_CHECK_NVCC=1 NVCC="$FAKE" "$@" bash "$CHECK" > "$T/out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  cat "$T/out"
}

# A: the build outlives the deadline: cut at it, FAILED, exit 1, in time.
run ZERO_DEVICE_CHECK_SECONDS=8 FAKE_NVCC_SLEEP=30
check "A: exit 1" $([ $rc -eq 1 ]; echo $?)
check "A: ended within the deadline (+3 s): ${secs}s" $([ "$secs" -ge 6 ] && [ "$secs" -le 11 ]; echo $?)
check "A: nvcc build reported failed" $(grep -q '"kind":"build","tool":"nvcc".*"ok":false' "$T/out"; echo $?)
check "A: summary failed" $(grep -q '"kind":"summary".*"failed":true' "$T/out"; echo $?)

# B: built, but no GoogleTest: the GPU tests are FAILED, not skipped.
run ZERO_DEVICE_CHECK_SECONDS=60 GTEST_HEADER=/nonexistent/gtest.h
check "B: exit 1" $([ $rc -eq 1 ]; echo $?)
check "B: missing gtest is FAILED" $(grep -q '"status":"FAILED","why":"no GoogleTest' "$T/out"; echo $?)

# C: the build leaves under 5 s: the next step is FAILED unrun.
run ZERO_DEVICE_CHECK_SECONDS=6 FAKE_NVCC_SLEEP=3 GTEST_HEADER="$FAKE"
check "C: exit 1" $([ $rc -eq 1 ]; echo $?)
check "C: no time left is FAILED" $(grep -q '"kind":"step","name":"cuda_kernels_test (nvcc)","status":"FAILED","why":"no time left' "$T/out"; echo $?)

# D: a bundle (tools/device_bundle.sh's layout) whose test binaries pass,
# run under the (fake) compute-sanitizer, with the bundle's libraries on the
# loader path; the Python extension cannot be built here: FAILED, named.
B="$T/bundle"
mkdir -p "$B/bin" "$B/lib" "$B/ompi/bin"
touch "$B/bin/libzero_c.so"
for t in cuda_kernels_test cuda_device_test nccl_communicator_test gpu_engine_test \
         cuda_kernels_bench device_step_bench mpi_engine_main; do
  cat > "$B/bin/$t" <<'SH'
#!/usr/bin/env bash
# A test binary of the bundle: its libraries must be on the loader path.
case ":$LD_LIBRARY_PATH:" in *"/bundle/lib:"*) ;; *) echo "no bundle lib"; exit 3;; esac
[ -n "${OPAL_PREFIX:-}" ] || { echo "no OPAL_PREFIX"; exit 3; }
echo "[       OK ] Fake.One (1 ms)"
echo "[       OK ] Fake.Two (2 ms)"
echo "[  SKIPPED ] Fake.Three (0 ms)"
SH
  chmod +x "$B/bin/$t"
done
SAN="$T/compute-sanitizer"
printf '#!/usr/bin/env bash
echo "sanitizer $2" >&2
exec "${@: -1}"
' > "$SAN"
chmod +x "$SAN"
FAILCXX="$T/failing_cxx"
printf '#!/bin/sh
echo "no compiler here" >&2
exit 1
' > "$FAILCXX"
chmod +x "$FAILCXX"
run ZERO_DEVICE_CHECK_SECONDS=60 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SAN" CXX="$FAILCXX"
check "D: exit 1" $([ $rc -eq 1 ]; echo $?)
check "D: bundle used" $(grep -q '"kind":"build","tool":"bundle".*"ok":true' "$T/out"; echo $?)
check "D: memcheck on" $(grep -q '"kind":"sanitizer","memcheck":true' "$T/out"; echo $?)
n=$(grep -cE '"kind":"test","target":"(cuda_kernels_test|cuda_device_test|nccl_communicator_test|gpu_engine_test|cuda_kernels_test_racecheck)","status":"PASSED","passed":2,"skipped":1' "$T/out")
check "D: 4 GPU tests + racecheck PASSED with counted cases ($n)" $([ "$n" -eq 5 ]; echo $?)
check "D: python extension FAILED, not skipped" $(grep -q '"target":"python extension","ok":false' "$T/out"; echo $?)

# E: the same bundle where everything builds and passes: exit 0.
GOODCXX="$T/good_cxx"
cat > "$GOODCXX" <<'SH'
#!/usr/bin/env bash
out=""
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
touch "$out"
SH
chmod +x "$GOODCXX"
PY="$T/python"
cat > "$PY" <<'SH'
#!/usr/bin/env bash
case "$*" in
  "-m pybind11 --includes") echo "-I/fake/include";;
  -m\ pytest*) [ -n "${ZERO_TORCH_TIMING_OUT:-}" ] &&
               echo '{"kind":"torch_gpt_vs_torch","stage":3,"ratio":1.5}' >> "$ZERO_TORCH_TIMING_OUT"
               echo "7 passed, 2 skipped in 0.1s";;
  bench/gpt_device_bench.py*)
    echo "$*" >> "${GPT_LOG:-/dev/null}"
    echo '{"kind":"gpt_device","size":"350m","mode":"zero1","status":"ok","step_ms":9.5}'
    echo '{"kind":"gpt_device_ratio","size":"350m","mode":"zero1","vs":"torch","step_time":1.05}'
    echo '{"kind":"gpt_device_summary","ok":1,"failed":[]}';;
  -c*) echo ".so";;
esac
SH
chmod +x "$PY"
run ZERO_DEVICE_CHECK_SECONDS=60 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SAN" \
    CXX="$GOODCXX" PYTHON="$PY" ZERO_DEVICE_CHECK_NO_GPU_OK=1
check "E: exit 0" $([ $rc -eq 0 ]; echo $?)
check "E: python tests PASSED" $(grep -q '"target":"python device_test + torch_device_test","status":"PASSED","result":"7 passed' "$T/out"; echo $?)
check "E: zero.torch GPT step times passed on" $(grep -q '^{"kind":"torch_gpt_vs_torch","stage":3' "$T/out"; echo $?)
check "E: summary not failed" $(grep -q '"kind":"summary".*"built_with":"bundle","failed":false' "$T/out"; echo $?)

# E2: a Python without pytest gets the bundle's (and only then).
mkdir -p "$B/python"
PY2="$T/python_nopytest"
cat > "$PY2" <<'SH'
#!/usr/bin/env bash
case "$*" in
  "-m pybind11 --includes") echo "-I/fake/include";;
  "-c import pytest") exit 1;;
  -m\ pytest*) case ":$PYTHONPATH:" in *"/bundle/python:"*) echo "7 passed";; *) echo "1 failed"; exit 1;; esac;;
  -c*) echo ".so";;
esac
SH
chmod +x "$PY2"
run ZERO_DEVICE_CHECK_SECONDS=60 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SAN" \
    CXX="$GOODCXX" PYTHON="$PY2" ZERO_DEVICE_CHECK_NO_GPU_OK=1
check "E2: the bundle's pytest used" $(grep -q '"target":"python device_test + torch_device_test","status":"PASSED","result":"7 passed' "$T/out"; echo $?)

# H: the bundle on a machine with a GPU (a fake nvidia-smi, a fake mpirun
# that runs the rank's command once): the engine over MPI at 2 and 4 ranks
# and the 2-rank NCCL dead-peer case (from the bundle it
# otherwise only ran at world 1, where it skips) run through the bundle's
# mpirun and pass; exit 0 without the no-GPU switch.
FAKEBIN="$T/fakebin"
mkdir -p "$FAKEBIN"
printf '#!/bin/sh\necho "NVIDIA H200, 143771 MiB, 570.00"\n' > "$FAKEBIN/nvidia-smi"
chmod +x "$FAKEBIN/nvidia-smi"
cat > "$B/ompi/bin/mpirun" <<'SH'
#!/usr/bin/env bash
echo "$*" >> "$MPIRUN_LOG"
while [ $# -gt 0 ]; do case "$1" in */bundle/bin/*) break;; esac; shift; done
exec "$@"
SH
chmod +x "$B/ompi/bin/mpirun"
: > "$T/mpirun.log"
run ZERO_DEVICE_CHECK_SECONDS=60 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SAN" \
    CXX="$GOODCXX" PYTHON="$PY" MPIRUN_LOG="$T/mpirun.log" PATH="$FAKEBIN:$PATH" \
    ZERO_DEVICE_GPT_RESERVE=0 GPT_LOG="$T/gpt.log"
check "H: exit 0" $([ $rc -eq 0 ]; echo $?)
check "H: the real-size GPT bench ran, its lines passed on" $(grep -q '^{"kind":"gpt_device_ratio","size":"350m","mode":"zero1"' "$T/out" && grep -q '"kind":"gpt_device_summary"' "$T/out"; echo $?)
check "H: the GPT bench got the deadline's rest (--seconds)" $(grep -qE -- '--seconds [0-9]+ ' "$T/gpt.log"; echo $?)
first_gpt=$(grep -n '"kind":"gpt_device"' "$T/out" | head -1 | cut -d: -f1)
first_gtest=$(grep -n '"kind":"test","target":"cuda_kernels_test"' "$T/out" | head -1 | cut -d: -f1)
check "H: the GPT bench before the GPU tests" $([ -n "$first_gpt" ] && [ -n "$first_gtest" ] && [ "$first_gpt" -lt "$first_gtest" ]; echo $?)
check "H: GPU seen" $(grep -q '"kind":"gpu","present":true' "$T/out"; echo $?)
check "H: engine np 2 and 4 PASSED" $([ "$(grep -cE '"target":"mpi_engine_main_cuda_np[24]","status":"PASSED"' "$T/out")" -eq 2 ]; echo $?)
check "H: NCCL dead peer PASSED" $(grep -q '"target":"nccl_dead_peer_test","status":"PASSED"' "$T/out"; echo $?)
check "H: dead peer at 2 ranks, its cases only" $(grep -qE -- "-np 2 .*/bin/nccl_communicator_test --gtest_filter=NcclDeadPeer\.\*" "$T/mpirun.log"; echo $?)
# H2: the same with the deadline's rest under the reserve: the GPT bench is
# FAILED "no time left", the tests after it still run.
run ZERO_DEVICE_CHECK_SECONDS=60 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SAN" \
    CXX="$GOODCXX" PYTHON="$PY" MPIRUN_LOG="$T/mpirun.log" PATH="$FAKEBIN:$PATH"
check "H2: exit 1" $([ $rc -eq 1 ]; echo $?)
check "H2: GPT bench FAILED for want of time" $(grep -q '"name":"gpt_device_bench","status":"FAILED","why":"no time left' "$T/out"; echo $?)
check "H2: the tests after it ran" $(grep -q '"target":"nccl_dead_peer_test","status":"PASSED"' "$T/out"; echo $?)

# S: one slow step (gpu_engine_test hangs under memcheck) in a 40 s check
# on a GPU: the figures (kernel GB/s, the engine's step and offload
# pipelines, zero.torch against torch) ran first, the slow step got only
# its share of what was left and timed out, and every step after it (the
# racecheck, the MPI runs) still ran and passed, all within the deadline.
for f in cuda_kernels_bench device_step_bench; do
  cat > "$B/bin/$f" <<SH
#!/bin/sh
echo '{"kind":"bench_fake","what":"$f"}'
SH
  chmod +x "$B/bin/$f"
done
SLOWSAN="$T/slow-sanitizer"
cat > "$SLOWSAN" <<'SH'
#!/usr/bin/env bash
case "$2 ${*: -1}" in "memcheck "*/gpu_engine_test) exec sleep 1000;; esac
exec "${@: -1}"
SH
chmod +x "$SLOWSAN"
run ZERO_DEVICE_CHECK_SECONDS=40 ZERO_DEVICE_BUNDLE="$B" COMPUTE_SANITIZER="$SLOWSAN" \
    CXX="$GOODCXX" PYTHON="$PY" MPIRUN_LOG="$T/mpirun.log" PATH="$FAKEBIN:$PATH" \
    ZERO_DEVICE_GPT_RESERVE=0
check "S: exit 1 (the timed-out test)" $([ $rc -eq 1 ]; echo $?)
check "S: ended within the deadline: ${secs}s" $([ "$secs" -le 43 ]; echo $?)
check "S: kernel and step figures reported" $([ "$(grep -c '"kind":"bench_fake"' "$T/out")" -eq 2 ]; echo $?)
check "S: zero.torch figures reported" $(grep -q '^{"kind":"torch_gpt_vs_torch"' "$T/out"; echo $?)
first_fig=$(grep -n '"kind":"bench_fake"' "$T/out" | head -1 | cut -d: -f1)
first_test=$(grep -n '"kind":"test","target":"cuda_kernels_test"' "$T/out" | head -1 | cut -d: -f1)
check "S: figures before the GPU tests" $([ -n "$first_fig" ] && [ -n "$first_test" ] && [ "$first_fig" -lt "$first_test" ]; echo $?)
st=$(grep -oE '"target":"gpu_engine_test","status":"TIMEOUT",[^}]*"seconds":[0-9]+' "$T/out" | grep -oE '[0-9]+$')
check "S: the slow step timed out within its share: ${st:-none}s" $([ -n "$st" ] && [ "$st" -le 12 ]; echo $?)
n=$(grep -cE '"target":"(cuda_kernels_test_racecheck|mpi_engine_main_cuda_np2|mpi_engine_main_cuda_np4|nccl_dead_peer_test)","status":"PASSED"' "$T/out")
check "S: the 4 steps after it ran and passed ($n)" $([ "$n" -eq 4 ]; echo $?)
check "S: no step starved" $(! grep -q 'no time left' "$T/out"; echo $?)

# F: a bundle without libzero_c.so is a FAILED build, not a fallback.
rm "$B/bin/libzero_c.so"
run ZERO_DEVICE_CHECK_SECONDS=30 ZERO_DEVICE_BUNDLE="$B"
check "F: exit 1" $([ $rc -eq 1 ]; echo $?)
check "F: bundle build FAILED" $(grep -q '"kind":"build","tool":"bundle".*"ok":false' "$T/out"; echo $?)

# G: tools/device_bundle.sh packing (binaries given, no build): libraries
# resolved by ldd, the runtime the GPU machine brings left out, OpenMPI's
# prefix laid out, the manifest's sum, and the size limit enforced.
if [ -n "${BUNDLE_SCRIPT:-}" ] && [ -x /usr/bin/orted ]; then
  FB="$T/built"
  for b in capi/libzero_c.so kernels/cuda/cuda_kernels_test core/cuda_device_test \
           core/nccl_communicator_test tests/gpu_engine_test tests/mpi_engine_main \
           bench/cuda/cuda_kernels_bench bench/device_step_bench examples/c/mlp_train; do
    mkdir -p "$FB/$(dirname "$b")"
    cp /usr/bin/orted "$FB/$b"   # a real dynamic executable that loads libmpi's kin
  done
  out="$T/packed"
  ZERO_BUNDLE_DS=0 ZERO_BUNDLE_SKIP_BUILD=1 ZERO_BUNDLE_BIN="$FB" bash "$BUNDLE_SCRIPT" "$out" > "$T/bout" 2>&1
  rc=$?
  cat "$T/bout"
  check "G: packed, exit 0" $([ $rc -eq 0 ]; echo $?)
  check "G: libopen-rte bundled" $(ls "$out/lib" | grep -q '^libopen-rte'; echo $?)
  check "G: no C runtime, CUDA or NCCL" $(! ls "$out/lib" | grep -qE '^(libc\.so|libstdc\+\+|libcudart|libnccl|ld-linux)'; echo $?)
  check "G: OpenMPI prefix with orted and components" $([ -x "$out/ompi/bin/orted" ] && ls "$out"/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/ | grep -q 'mca_'; echo $?)
  sum=$(find "$out" -type f ! -name MANIFEST -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  check "G: manifest sum = bytes on disk" $(grep -q "^$sum total\$" "$out/MANIFEST"; echo $?)
  ZERO_BUNDLE_DS=0 ZERO_BUNDLE_MAX_MIB=1 ZERO_BUNDLE_SKIP_BUILD=1 ZERO_BUNDLE_BIN="$FB" bash "$BUNDLE_SCRIPT" "$out" > "$T/bout" 2>&1
  rc=$?
  check "G: over the limit is exit 1, named" $([ $rc -eq 1 ] && grep -q 'over the 1 MiB limit' "$T/bout"; echo $?)
  # G2: DeepSpeed's wheels (a fake pip): the given wheel and what pip
  # downloads for the GPU machine's Python land in wheels/ and the manifest;
  # a pip that fails leaves DeepSpeed out with a warning, still exit 0.
  FPIP="$T/fake_pip_python"
  cat > "$FPIP" <<'SH'
#!/usr/bin/env bash
echo "$*" >> "$PIP_LOG"
[ -n "${PIP_FAIL:-}" ] && exit 1
d=""; while [ $# -gt 0 ]; do [ "$1" = "-d" ] && d="$2"; shift; done
[ -n "$d" ] && touch "$d/pydantic_core-2.0-cp312-cp312-manylinux2014_x86_64.whl"
exit 0
SH
  chmod +x "$FPIP"
  echo fake > "$T/deepspeed-0.19.8-py3-none-any.whl"
  ZERO_BUNDLE_DS_PYTHON="$FPIP" ZERO_BUNDLE_DS_WHEEL="$T/deepspeed-0.19.8-py3-none-any.whl" \
    PIP_LOG="$T/pip.log" ZERO_BUNDLE_SKIP_BUILD=1 ZERO_BUNDLE_BIN="$FB" \
    bash "$BUNDLE_SCRIPT" "$out" > "$T/bout" 2>&1
  rc=$?
  check "G2: exit 0, DeepSpeed's wheel and deps in wheels/" $([ $rc -eq 0 ] && [ -f "$out/wheels/deepspeed-0.19.8-py3-none-any.whl" ] && [ -f "$out/wheels/pydantic_core-2.0-cp312-cp312-manylinux2014_x86_64.whl" ]; echo $?)
  check "G2: downloaded for Python 3.12, binaries only" $(grep -q -- '--only-binary=:all: --python-version 3.12' "$T/pip.log"; echo $?)
  check "G2: wheels in the manifest" $(grep -q ' wheels/deepspeed-0.19.8-py3-none-any.whl$' "$out/MANIFEST"; echo $?)
  PIP_FAIL=1 ZERO_BUNDLE_DS_PYTHON="$FPIP" PIP_LOG="$T/pip.log" ZERO_BUNDLE_SKIP_BUILD=1 \
    ZERO_BUNDLE_BIN="$FB" bash "$BUNDLE_SCRIPT" "$out" > "$T/bout" 2>&1
  rc=$?
  check "G2: pip failing: exit 0, warned, no wheels/" $([ $rc -eq 0 ] && grep -q 'DeepSpeed not bundled' "$T/bout" && [ ! -d "$out/wheels" ]; echo $?)
else
  echo "FAILED: G: no BUNDLE_SCRIPT or /usr/bin/orted"
  fail=1
fi

# The default deadline leaves room for the command limit (10 min) and the
# machine's start: 8 minutes at most.
d=$(grep -oE 'ZERO_DEVICE_CHECK_SECONDS:-[0-9]+' "$CHECK" | grep -oE '[0-9]+$')
check "default deadline ${d}s <= 480" $([ "${d:-999}" -le 480 ]; echo $?)
# No step keeps a fixed timeout of its own outside the budget.
check "every timeout is budgeted" $(! grep -qE 'timeout [0-9]' "$CHECK"; echo $?)
exit $fail
