#!/usr/bin/env bash
# A job's life under mpirun (tests/kill_rank_main trains the MLP, saving
# stepN before every 3rd step), at 2 and 3 ranks:
#   async:    saves asynchronously with keep_last 2: the run's bits equal the
#             synchronous run's; only the two newest tags remain; resuming
#             from `latest` ends on the same bits.
#   bg_fail:  rank 1's file of the async save step3 fails to write (ENOSPC)
#             in the background: the next save (step6) returns that failure
#             on every rank, naming the tag and rank 1's file; step3 never
#             becomes latest; training goes on to the same bits.
#   sigterm:  rank 1 raises SIGTERM mid-backward of step 4 (preemption set):
#             every rank finishes that step, saves global_step5, prints why
#             and exits 143; a restart from latest ends on the same bits.
#   external: SIGTERM sent by this script to the last rank while steps run
#             (0.2 s each): every rank saves the same step and exits; a
#             restart ends on the same bits.
# One JSON line per scenario and world size.
set -uo pipefail
bin="$1"; run_mpi="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
STEPS=10; EVERY=3
die() { echo "FAILED: $1"; exit 1; }
job() {  # job NP DIR [args...]
  local np="$1" d="$2"; shift 2
  mkdir -p "$d/run" "$d/ck"
  "$run_mpi" "$np" "$bin" --stage 3 --steps $STEPS --save-every $EVERY --ckpt "$d/ck" \
    --run "$d/run" --timeout 20 "$@" >> "$d/log" 2>&1
}
same() { cmp -s "$1" "$2" || die "$3: params differ from the uninterrupted run"; }
latest() { cat "$1/ck/latest" 2>/dev/null; }

for np in 2 3; do
  ref="$tmp/ref$np"
  job "$np" "$ref" --dump "$ref/params.bin" || { cat "$ref/log"; die "np $np: reference did not train"; }

  # async + keep_last
  d="$tmp/async$np"
  job "$np" "$d" --async --keep-last 2 --dump "$d/params.bin" || { cat "$d/log"; die "async np $np"; }
  same "$d/params.bin" "$ref/params.bin" "async np $np"
  [ "$(latest "$d")" = step9 ] || die "async np $np: latest '$(latest "$d")'"
  [ "$(ls "$d/ck" | grep -v latest | tr '\n' ' ')" = "step6 step9 " ] \
    || die "async np $np: tags left: $(ls "$d/ck")"
  rm -rf "$d/run"; job "$np" "$d" --resume --dump "$d/resumed.bin" || { cat "$d/log"; die "async resume np $np"; }
  same "$d/resumed.bin" "$ref/params.bin" "async resume np $np"
  echo "{\"test\": \"job_life_mpi\", \"scenario\": \"async_keep_last\", \"np\": $np, \"bitwise\": true}"

  # background failure reported at the next call on every rank
  d="$tmp/bgfail$np"
  job "$np" "$d" --async --fail-save-step 3 --kill-rank 1 --dump "$d/params.bin" \
    || { cat "$d/log"; die "bg_fail np $np: the job failed"; }
  for r in $(seq 0 $((np - 1))); do
    [ -f "$d/run/reported.$r" ] || { cat "$d/log"; die "bg_fail np $np: rank $r was not told"; }
    grep -q "background save of '$d/ck/step3'" "$d/run/reported.$r" \
      || die "bg_fail np $np: rank $r: $(cat "$d/run/reported.$r")"
    grep -q "rank_00001.bin" "$d/run/reported.$r" || die "bg_fail np $np: rank $r: file not named"
    grep -q "RESOURCE_EXHAUSTED" "$d/run/reported.$r" || die "bg_fail np $np: rank $r: code"
  done
  [ -e "$d/ck/step3" ] && die "bg_fail np $np: the failed tag was published"
  [ "$(latest "$d")" = step9 ] || die "bg_fail np $np: latest '$(latest "$d")'"
  same "$d/params.bin" "$ref/params.bin" "bg_fail np $np"
  echo "{\"test\": \"job_life_mpi\", \"scenario\": \"background_failure\", \"np\": $np, \"reported_on\": $np}"

  # preemption: SIGTERM raised by rank 1 mid-step
  d="$tmp/sigterm$np"
  job "$np" "$d" --preempt --scenario sigterm --kill-rank 1 --kill-step 4
  rc=$?
  [ $rc -ne 0 ] || { cat "$d/log"; die "sigterm np $np: the job exited 0"; }
  for r in $(seq 0 $((np - 1))); do
    grep -q "zero: rank $r: preempted: .* reached rank 1; every rank finished global step 5 and saved '$d/ck/global_step5'; exiting with code 143" "$d/log" \
      || { cat "$d/log"; die "sigterm np $np: rank $r did not save step 5 and say so"; }
    [ -f "$d/run/done.$r" ] && die "sigterm np $np: rank $r trained on"
  done
  [ "$(latest "$d")" = global_step5 ] || die "sigterm np $np: latest '$(latest "$d")'"
  rm -rf "$d/run"; job "$np" "$d" --resume --dump "$d/resumed.bin" || { cat "$d/log"; die "sigterm resume np $np"; }
  same "$d/resumed.bin" "$ref/params.bin" "sigterm resume np $np"
  echo "{\"test\": \"job_life_mpi\", \"scenario\": \"preempt_sigterm_one_rank\", \"np\": $np, \"saved_step\": 5, \"exit\": $rc}"

  # preemption: SIGTERM from outside to the last rank
  d="$tmp/external$np"; last=$((np - 1))
  mkdir -p "$d/run"
  job "$np" "$d" --preempt --step-sleep 0.2 &
  jp=$!
  for i in $(seq 1 300); do
    [ "$(cat "$d/run/step.$last" 2>/dev/null)" = 3 ] && break
    sleep 0.05
  done
  t0=$(date +%s.%N)
  kill -TERM "$(cat "$d/run/pid.$last")" || die "external np $np: no rank $last to signal"
  wait $jp; rc=$?
  exit_s=$(echo "$(date +%s.%N) - $t0" | bc)
  # Within the step under way (0.2 s plus its work), the save and mpirun's
  # teardown, on a loaded machine: well under 15 s.
  [ "$(echo "$exit_s < 15" | bc)" = 1 ] || die "external np $np: the job took $exit_s s to end"
  [ $rc -ne 0 ] || { cat "$d/log"; die "external np $np: the job exited 0"; }
  steps=$(grep -o "zero: rank [0-9]*: preempted: .* finished global step [0-9]*" "$d/log" | awk '{print $NF}' | sort -u)
  [ "$(grep -c "zero: rank [0-9]*: preempted" "$d/log")" = "$np" ] || { cat "$d/log"; die "external np $np: not every rank said it"; }
  [ "$(echo "$steps" | wc -l)" = 1 ] || die "external np $np: ranks saved different steps: $steps"
  [ "$(latest "$d")" = "global_step$steps" ] || die "external np $np: latest '$(latest "$d")'"
  rm -rf "$d/run"; job "$np" "$d" --resume --dump "$d/resumed.bin" || { cat "$d/log"; die "external resume np $np"; }
  same "$d/resumed.bin" "$ref/params.bin" "external resume np $np"
  echo "{\"test\": \"job_life_mpi\", \"scenario\": \"preempt_external_sigterm\", \"np\": $np, \"saved_step\": $steps, \"signal_to_exit_s\": $exit_s}"
done
echo "PASSED"
