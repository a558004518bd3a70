#!/usr/bin/env bash
# A rank SIGKILLed under mpirun -np 4 ends the whole job, promptly, and the
# last completed checkpoint resumes bit for bit. Scenarios (kill_rank_main):
# mid-backward at stages 2 and 3, inside a checkpoint save, inside an NVMe
# optimizer step; each under mpirun's default policy (it aborts the job when a
# rank dies) and, for three of them, with --enable-recovery, where mpirun lets
# the survivors run on and zero's own comm_timeout_seconds must end them.
# For each: every survivor ends without finishing (no done.R; zero's error or
# mpirun's abort message printed), no process of the job is left, all within
# 2 x comm_timeout_seconds of the kill (with --enable-recovery the first
# survivor whose collective times out aborts the job); then a fresh job loads DIR/latest (the
# last completed tag) and trains to exactly the bits of an uninterrupted run.
# Prints one JSON line per scenario (time to exit).
set -uo pipefail
bin="$1"; run_mpi="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
TIMEOUT=5      # comm_timeout_seconds of every job
STEPS=10; EVERY=3
pass=0
die() { echo "FAILED: $1"; echo "$pass passed, 1 failed"; exit 1; }
ok() { pass=$((pass + 1)); echo "ok: $1"; }
now() { date +%s.%N; }

# A process of the job is alive: its pid is taken by a kill_rank_main.
alive() {
  local pid; pid=$(cat "$1")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep kill_rank_main > /dev/null \
    && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

reference() {  # reference NAME STAGE [--nvme DIR]: the uninterrupted run's dump
  local name="$1" stage="$2"; shift 2
  local d="$tmp/ref_$name"
  mkdir -p "$d/run" "$d/ck" "$d/nv"
  "$run_mpi" 4 "$bin" --scenario none --stage "$stage" --steps $STEPS --save-every $EVERY \
    --ckpt "$d/ck" --run "$d/run" --timeout $TIMEOUT --dump "$d/params.bin" "$@" > "$d/log" 2>&1 \
    || { cat "$d/log"; die "reference $name did not train"; }
  [ -s "$d/params.bin" ] || die "reference $name wrote no params"
}

scenario() {  # scenario NAME MODE SCENARIO STAGE KILL_STEP EXPECT_LATEST REF [nvme] (KILL_RANK=1)
  local name="$1" mode="$2" sc="$3" stage="$4" kstep="$5" want_latest="$6" ref="$7" nvme="${8:-}"
  local victim="${KILL_RANK:-1}"
  local d="$tmp/$name"
  mkdir -p "$d/run" "$d/ck" "$d/nv"
  local extra=() nv=()
  [ "$mode" = recovery ] && extra=(--enable-recovery)
  [ -n "$nvme" ] && nv=(--nvme "$d/nv")
  local start; start=$(now)
  "$run_mpi" 4 "${extra[@]}" "$bin" --scenario "$sc" --stage "$stage" --steps $STEPS \
    --save-every $EVERY --kill-rank "$victim" --kill-step "$kstep" --ckpt "$d/ck" --run "$d/run" \
    --timeout $TIMEOUT "${nv[@]}" > "$d/log" 2>&1
  local rc=$?
  # Every process of the job gone: poll from mpirun's return.
  local gone_at="" i
  for i in $(seq 1 400); do
    local any=0 p
    for p in "$d"/run/pid.*; do alive "$p" && any=1; done
    if [ $any -eq 0 ]; then gone_at=$(now); break; fi
    sleep 0.05
  done
  [ -f "$d/run/killed" ] || { cat "$d/log"; die "$name: no rank was killed"; }
  read -r krank kpoint kwhen < "$d/run/killed"
  [ "$kpoint" = "$sc" ] || { cat "$d/log"; die "$name: killed at '$kpoint', expected inside '$sc'"; }
  [ "$(ls "$d"/run/pid.* | wc -l)" -eq 4 ] || die "$name: not every rank started"
  [ -n "$gone_at" ] || { ps -ef | grep kill_rank_main; die "$name: processes left behind 20 s after mpirun returned"; }
  local exit_s; exit_s=$(echo "$gone_at - $kwhen" | bc)
  # Survivors: none finished training (exit 0); each ended by zero's error
  # (then MPI_Abort) or by mpirun's abort of the job.
  local r zero_msgs=0 detect=""
  [ "$krank" = "$victim" ] || die "$name: rank $krank died, expected $victim"
  for r in 0 1 2 3; do
    [ "$r" = "$victim" ] && continue
    [ -f "$d/run/done.$r" ] && { cat "$d/log"; die "$name: rank $r finished as if nothing happened"; }
    if [ -f "$d/run/error.$r" ]; then
      zero_msgs=$((zero_msgs + 1))
      grep "\[rank $r\] zero: DEADLINE_EXCEEDED: .*timed out" "$d/log" > /dev/null \
        || { cat "$d/log"; die "$name: rank $r failed without zero's timeout message"; }
      detect="$detect $(echo "$(cat "$d/run/error.$r") - $kwhen" | bc)"
    fi
  done
  if [ "$mode" = recovery ]; then
    # The first survivor to time out aborts the job (MPI_Abort); one still
    # waiting on a later deadline is ended by that abort, not by its own.
    [ $zero_msgs -ge 1 ] || { cat "$d/log"; die "$name: no survivor reported zero's timeout"; }
    [ $zero_msgs -eq 3 ] || grep "MPI_ABORT was invoked" "$d/log" > /dev/null \
      || { cat "$d/log"; die "$name: $zero_msgs of 3 survivors reported, and no job abort"; }
  else
    [ $rc -ne 0 ] || { cat "$d/log"; die "$name: mpirun exited 0 after a rank was killed"; }
    grep "exited on signal 9" "$d/log" > /dev/null || { cat "$d/log"; die "$name: no abort message from mpirun"; }
  fi
  (( $(echo "$exit_s < 2 * $TIMEOUT" | bc) )) \
    || die "$name: the job took $exit_s s to end after the kill (limit $((2 * TIMEOUT)) s)"
  # The last completed checkpoint, and nothing of the killed one published.
  [ "$(cat "$d/ck/latest")" = "$want_latest" ] || die "$name: latest is $(cat "$d/ck/latest"), expected $want_latest"
  # A fresh job resumes from it and ends on the uninterrupted run's bits.
  rm -rf "$d/run2"; mkdir -p "$d/run2"
  "$run_mpi" 4 "$bin" --scenario none --stage "$stage" --steps $STEPS --save-every $EVERY \
    --ckpt "$d/ck" --run "$d/run2" --timeout $TIMEOUT --resume --dump "$d/params.bin" \
    "${nv[@]}" > "$d/log2" 2>&1 || { cat "$d/log2"; die "$name: the resumed job failed"; }
  cmp "$d/params.bin" "$tmp/ref_$ref/params.bin" > /dev/null \
    || die "$name: resumed from $want_latest, the params differ from the uninterrupted run"
  printf '{"bench": "kill_rank", "scenario": "%s", "mode": "%s", "killed_rank": %s, "stage": %s, "np": 4, "comm_timeout_s": %s, "killed_at": "%s", "time_to_exit_s": %.2f, "zero_detect_s": [%s], "resumed_from": "%s", "bitwise": true}\n' \
    "$name" "$mode" "$victim" "$stage" $TIMEOUT "$kpoint" "$exit_s" "$(echo $detect | tr ' ' ',')" "$want_latest"
  ok "$name: job ended ${exit_s}s after the kill; resumed from $want_latest bitwise"
}

reference s2 2
reference s3 3
reference nvme 2 --nvme "$tmp/ref_nvme/nv"
# Saves before steps 3, 6, 9: killed at step 5 the last complete one is step3;
# killed while saving step6, it is still step3.
scenario backward_stage2        mpirun   backward 2 5 step3 s2
scenario backward_stage3        mpirun   backward 3 5 step3 s3
scenario save                   mpirun   save     2 6 step3 s2
scenario nvme_step              mpirun   nvme     2 5 step3 nvme nvme
scenario backward_stage3_zero   recovery backward 3 5 step3 s3
scenario save_zero              recovery save     2 6 step3 s2
scenario nvme_step_zero         recovery nvme     2 5 step3 nvme nvme
# Rank 0 (the one that publishes the tag and `latest`) dying inside a save.
KILL_RANK=0 scenario save_rank0_zero recovery save 3 6 step3 s3
echo "$pass passed, 0 failed"
