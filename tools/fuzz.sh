#!/usr/bin/env bash
# libFuzzer for zero's parsers of untrusted input (tests/fuzz/*_fuzz.cc),
# built with clang (Debian's clang, libFuzzer + ASan + UBSan, stop at the
# first report) outside Bazel, against the same sources and the Debian
# libraries the Bazel build uses.
#
#   tools/fuzz.sh build                 build fuzz-out/<target> for every target
#   tools/fuzz.sh run SECONDS [TARGET..] fuzz each target for SECONDS (default
#                                       all); a crash, leak, timeout or out-of-
#                                       memory fails, leaving fuzz-out/<target>/crash-*
#   tools/fuzz.sh runs N [TARGET..]     the same, N executions each (bench/fuzz_bench.sh)
#   tools/fuzz.sh seeds                 regenerate tests/fuzz/corpus/{manifest,shard_file,
#                                       safetensors} with the writers (make_seeds.cc)
#
# Each run starts from the seed corpus in the repo (tests/fuzz/corpus/TARGET,
# plus the target's regression inputs, tests/fuzz/regressions/TARGET) and
# grows a working corpus under fuzz-out/TARGET/corpus. Prints one JSON line
# per target: {"target", "execs", "seconds", "execs_per_s", "corpus", "ok"}.
# A crash found becomes a regression input (tests/fuzz/regressions/TARGET/),
# replayed by //tests/fuzz:TARGET_replay_test in every test run.
# The hostfile parser is Python: its target runs under atheris when that is
# installed (tests/fuzz/hostfile_fuzz.py), else it is reported as skipped.
# Ranks that diverge (tests/fuzz/divergence_fuzz.cc) run on random draws
# through Bazel (run_divergence below).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${ZERO_FUZZ_OUT:-$ROOT/fuzz-out}
CXX=${CXX_FUZZ:-clang++}
TARGETS=(config manifest shard_file safetensors)
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CXXFLAGS="-std=c++17 -O1 -g $SAN -DOMPI_SKIP_MPICXX -I$ROOT"
ABSL="-labsl_statusor -labsl_status -labsl_cord -labsl_cordz_info -labsl_cord_internal
  -labsl_cordz_functions -labsl_exponential_biased -labsl_cordz_handle
  -labsl_synchronization -labsl_graphcycles_internal -labsl_time -labsl_civil_time
  -labsl_time_zone -labsl_bad_optional_access -labsl_stacktrace
  -labsl_str_format_internal -labsl_strerror -labsl_symbolize -labsl_debugging_internal
  -labsl_demangle_internal -labsl_malloc_internal -labsl_bad_variant_access
  -labsl_strings -labsl_strings_internal -labsl_base -labsl_spinlock_wait -labsl_int128
  -labsl_throw_delegate -labsl_raw_logging_internal -labsl_log_severity -lrt -latomic"

# The core sources each target needs (one concept per file keeps this short).
# A manifest names the optimizer its states belong to (core/optim).
OPTIM="core/optim/optimizer.cc core/optim/adam_optimizer.cc core/optim/sgd_optimizer.cc
  core/optim/lion_optimizer.cc core/optim/adagrad_optimizer.cc core/optim/muon_optimizer.cc
  core/optim/muon_owners.cc core/optim/newton_schulz.cc"
sources() {
  case "$1" in
    config) echo core/config/config.cc core/config/ds_config.cc core/config/json_reader.cc ;;
    manifest) echo core/ckpt/manifest.cc core/ckpt/file_util.cc core/common/errno_status.cc core/common/io_fault.cc $OPTIM ;;
    shard_file) echo core/ckpt/shard_file.cc core/ckpt/manifest.cc core/ckpt/file_util.cc \
                     core/common/errno_status.cc core/common/io_fault.cc $OPTIM ;;
    safetensors) echo core/ckpt/safetensors_reader.cc core/ckpt/file_util.cc \
                      core/common/errno_status.cc core/common/io_fault.cc ;;
    make_seeds) echo core/ckpt/shard_file.cc core/ckpt/manifest.cc core/ckpt/file_util.cc \
                     core/common/errno_status.cc core/common/io_fault.cc $OPTIM ;;
  esac
}

# Compiles `src` once into $OUT/obj (fuzzer instrumentation, no main).
object() {
  local src=$1 obj="$OUT/obj/${1//\//_}.o"
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find core tests/fuzz -name '*.h' -newer "$obj" | head -1)" ]; then
    $CXX $CXXFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  echo "$obj"
}

build_one() {
  local t=$1 objs=() s
  for s in $(sources "$t"); do objs+=("$(object "$s")"); done
  mkdir -p "$OUT/$t"
  if [ "$t" = make_seeds ]; then
    $CXX $CXXFLAGS tests/fuzz/make_seeds.cc "${objs[@]}" -o "$OUT/make_seeds/make_seeds" $ABSL -lxxhash
  else
    $CXX $CXXFLAGS -fsanitize=fuzzer "tests/fuzz/${t}_fuzz.cc" "${objs[@]}" \
      -o "$OUT/$t/${t}_fuzz" $ABSL -lxxhash
  fi
}

build() {
  command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (apt-get install clang)" >&2; exit 1; }
  mkdir -p "$OUT/obj"
  for t in "${TARGETS[@]}"; do build_one "$t"; done
}

# run_one TARGET -max_total_time=S | -runs=N
run_one() {
  local t=$1 limit=$2 dir="$OUT/$1" log rc dict=()
  mkdir -p "$dir/corpus"
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=tests/fuzz/$t.dict")
  local seeds=("tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regressions/$t" ] && seeds+=("tests/fuzz/regressions/$t")
  log="$dir/fuzz.log"
  local start end
  start=$(date +%s.%N)
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$dir/${t}_fuzz" "$dir/corpus" "${seeds[@]}" "${dict[@]}" "$limit" \
    -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/" >"$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  local execs corpus
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  corpus=$(ls "$dir/corpus" | wc -l)
  python3 -c 'import json,sys; e=int(sys.argv[2] or 0); s=float(sys.argv[3]);
print(json.dumps({"target": sys.argv[1], "execs": e, "seconds": round(s, 1),
  "execs_per_s": round(e / s) if s > 0 else 0, "corpus": int(sys.argv[4]),
  "ok": sys.argv[5] == "0"}))' "$t" "${execs:-0}" "$(echo "$end - $start" | bc)" "$corpus" "$rc"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: $t failed (rc $rc); see $log and $dir/crash-* / leak-* / timeout-*" >&2
    tail -30 "$log" >&2
    return 1
  fi
}

run_hostfile() {
  local limit=$1 py=""
  # tools/install_deps.sh installs atheris for /usr/bin/python3, which need
  # not be the python3 first on PATH (pyenv).
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import atheris' 2>/dev/null; then py=$p; break; fi
  done
  if [ -z "$py" ]; then
    echo '{"target": "hostfile", "skipped": "atheris not installed"}'
    return 0
  fi
  local dir="$OUT/hostfile" log rc start end execs
  mkdir -p "$dir/corpus"
  log="$dir/fuzz.log"
  start=$(date +%s.%N)
  set +e
  "$py" tests/fuzz/hostfile_fuzz.py "$dir/corpus" tests/fuzz/corpus/hostfile "$limit" \
    -max_len=1024 -timeout=10 -print_final_stats=1 -artifact_prefix="$dir/" >"$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  python3 -c 'import json,sys; e=int(sys.argv[1] or 0); s=float(sys.argv[2]);
print(json.dumps({"target": "hostfile", "execs": e, "seconds": round(s, 1),
  "execs_per_s": round(e / s) if s > 0 else 0, "ok": sys.argv[3] == "0"}))' \
    "${execs:-0}" "$(echo "$end - $start" | bc)" "$rc"
  [ "$rc" -eq 0 ] || { tail -30 "$log" >&2; return 1; }
}

# The divergence target (tests/fuzz/divergence_fuzz.cc): the whole engine
# over thread ranks, built by Bazel under --config=asan and run on random
# draws (tests/fuzz/random_main.cc) for the time given; `runs N` runs it
# for N seconds too. A failure leaves its input in $OUT/divergence/current.
run_divergence() {
  local seconds=$1 dir="$OUT/divergence" log rc
  mkdir -p "$dir"
  log="$dir/fuzz.log"
  if ! bazel build --config=asan //tests/fuzz:divergence_random >"$dir/build.log" 2>&1; then
    tail -30 "$dir/build.log" >&2
    echo '{"target": "divergence", "ok": false}'
    return 1
  fi
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$(bazel info --config=asan bazel-bin 2>/dev/null)/tests/fuzz/divergence_random" \
    "$seconds" "$dir" >"$log" 2>&1
  rc=$?
  set -e
  python3 -c 'import json,sys
line = [l for l in open(sys.argv[1]) if l.startswith("{\"execs\"")]
d = json.loads(line[-1]) if line else {"execs": 0, "seconds": 0.0}
d["execs_per_s"] = round(d["execs"] / d["seconds"], 2) if d.get("seconds") else 0
print(json.dumps({"target": "divergence", **d, "ok": sys.argv[2] == "0"}))' "$log" "$rc"
  [ "$rc" -eq 0 ] || { tail -30 "$log" >&2; echo "fuzz.sh: divergence failed; input in $dir/current" >&2; return 1; }
}

cmd=${1:-}
shift || true
case "$cmd" in
  build) build ;;
  run|runs)
    n=${1:?"fuzz.sh $cmd needs a number"}
    shift
    limit="-max_total_time=$n"
    [ "$cmd" = runs ] && limit="-runs=$n"
    sel=("$@")
    [ ${#sel[@]} -eq 0 ] && sel=("${TARGETS[@]}" hostfile divergence)
    build
    fail=0
    for t in "${sel[@]}"; do
      case "$t" in
        hostfile) run_hostfile "$limit" || fail=1 ;;
        divergence) run_divergence "$n" || fail=1 ;;
        *) run_one "$t" "$limit" || fail=1 ;;
      esac
    done
    exit $fail
    ;;
  seeds)
    mkdir -p "$OUT/obj"
    build_one make_seeds
    "$OUT/make_seeds/make_seeds" tests/fuzz/corpus
    ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
