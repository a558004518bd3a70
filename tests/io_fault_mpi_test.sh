#!/usr/bin/env bash
# Injected IO faults under mpirun -np 3 (ZERO_IO_FAULT in every rank's
# environment, aimed at one rank's files by a path substring; kill_rank_main
# trains the MLP with no one killed):
#   save: rank 1's rank file of the checkpoint before step 6 fails to write
#         (EIO): the job ends non-zero within 2 x comm_timeout_seconds with
#         the file named, no process left, `latest` still step3, and a new
#         job resumes from it to the uninterrupted run's bits;
#   nvme: rank 2's optimizer-state reads fail (EIO) from its first step: the
#         job ends the same way naming the file; the processes the abort
#         killed leave their swap files, and the next job on the same
#         nvme_path removes them (saying so), trains to the reference bits
#         and leaves the directory empty.
#   accum: stage 3, offload_optimizer nvme, gradient accumulation 2: rank 1's
#         first gradient-accumulation read of step 4 fails (EIO; aimed by
#         count, tests/testing/aiming_device.h, from a first job that trains
#         through): the job ends non-zero the same way naming rank 1's
#         gradient file, before rank 1 adds anything, `latest` step3, and a
#         new job on the same nvme_path removes the leftovers (saying so)
#         and resumes to the first job's bits.
# One JSON line per scenario.
set -uo pipefail
bin="$1"; run_mpi="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
TIMEOUT=5; STEPS=8; EVERY=3
die() { echo "FAILED: $1"; exit 1; }
now() { date +%s.%N; }
alive() {
  local pid; pid=$(cat "$1")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep kill_rank_main > /dev/null \
    && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}
job() {  # job DIR LOG [args...]: one np-3 job
  local d="$1" log="$2"; shift 2
  mkdir -p "$d/run" "$d/ck"
  "$run_mpi" 3 "$bin" --scenario none --stage 2 --steps $STEPS --save-every $EVERY \
    --ckpt "$d/ck" --run "$d/run" --timeout $TIMEOUT "$@" > "$log" 2>&1
}
gone() {  # every process of the job in DIR gone within 10 s
  local i p any
  for i in $(seq 1 200); do
    any=0
    for p in "$1"/run/pid.*; do alive "$p" && any=1; done
    [ $any -eq 0 ] && return 0
    sleep 0.05
  done
  return 1
}
# fails_promptly NAME DIR LOG REGEX WHAT [args...]: the faulted job in DIR
# ends non-zero, every process gone, within 2 x comm_timeout_seconds + 5 s,
# its log naming WHAT (REGEX, grep -E); the seconds it took in $secs.
fails_promptly() {
  local name="$1" d="$2" log="$3" regex="$4" what="$5" start rc; shift 5
  start=$(now)
  job "$d" "$log" "$@"; rc=$?
  secs=$(echo "$(now) - $start" | bc)
  [ $rc -ne 0 ] || { cat "$log"; die "$name: the job exited 0"; }
  gone "$d" || die "$name: processes left behind"
  grep -E "$regex" "$log" > /dev/null || { cat "$log"; die "$name: no message naming $what"; }
  (( $(echo "$secs < 2 * $TIMEOUT + 5" | bc) )) || die "$name: the job took $secs s"
}

# References (no fault).
job "$tmp/ref" "$tmp/ref.log" --dump "$tmp/ref.bin" || { cat "$tmp/ref.log"; die "reference failed"; }
mkdir -p "$tmp/refnv/nv"
job "$tmp/refnv" "$tmp/refnv.log" --nvme "$tmp/refnv/nv" --dump "$tmp/refnv.bin" \
  || { cat "$tmp/refnv.log"; die "nvme reference failed"; }

# save: rank 1's rank file of step6.
d="$tmp/save"
ZERO_IO_FAULT="write:1:EIO:.step6.partial/rank_00001" fails_promptly save "$d" "$d.log" \
  'rank_00001.bin.*Input/output error|Input/output error.*rank_00001.bin' "the file and the error"
[ "$(cat "$d/ck/latest")" = "step3" ] || die "save: latest is $(cat "$d/ck/latest")"
[ -d "$d/ck/step6" ] && die "save: the failed tag was published"
rm -rf "$d/run"
job "$d" "$d.resume.log" --resume --dump "$d.bin" || { cat "$d.resume.log"; die "save: resume failed"; }
cmp "$d.bin" "$tmp/ref.bin" > /dev/null || die "save: resumed params differ from the uninterrupted run"
printf '{"bench": "io_fault_mpi", "scenario": "save_write_eio", "np": 3, "seconds": %.2f, "latest": "step3", "resumed_bitwise": true}\n' "$secs"
echo "ok: save_write_eio"

# nvme: rank 2's optimizer reads.
d="$tmp/nvme"; mkdir -p "$d/nv"
ZERO_IO_FAULT="read:1+:EIO:zero_r2_" fails_promptly nvme "$d" "$d.log" \
  "zero_r2_.*_optim_g.*Input/output error" "rank 2's state file" --nvme "$d/nv"
left=$(find "$d/nv" -type f | wc -l)
rm -rf "$d/run" "$d/ck"
job "$d" "$d.again.log" --nvme "$d/nv" --dump "$d.bin" || { cat "$d.again.log"; die "nvme: the next job failed"; }
if [ "$left" -gt 0 ]; then
  grep "removed .* leftover swap file" "$d.again.log" > /dev/null \
    || { cat "$d.again.log"; die "nvme: $left leftover files and no removal message"; }
fi
[ -z "$(find "$d/nv" -type f)" ] || die "nvme: files left: $(find "$d/nv" -type f)"
cmp "$d.bin" "$tmp/refnv.bin" > /dev/null || die "nvme: params differ from the reference"
printf '{"bench": "io_fault_mpi", "scenario": "nvme_read_eio", "np": 3, "seconds": %.2f, "leftover_files": %d, "cleaned_by_next_job": true, "bitwise": true}\n' "$secs" "$left"
echo "ok: nvme_read_eio"

# accum: rank 1's first gradient-accumulation read of step 4.
d="$tmp/accum"; mkdir -p "$d/nv" "$d/count"
acc=(--stage 3 --gas 2 --nvme "$d/nv" --kill-rank 1 --kill-step 4)
job "$d/count" "$d.count.log" "${acc[@]}" --accum-read count --dump "$d.ref.bin" \
  || { cat "$d.count.log"; die "accum: the counting job failed"; }
n=$(cat "$d/count/run/accum_reads")
[ "$n" -ge 1 ] || die "accum: no accumulation read counted ($n)"
fails_promptly accum "$d" "$d.log" "rank1/zero_r1_.*_grad_g.*Input/output error" \
  "rank 1's gradient file" "${acc[@]}" --accum-read "$n:EIO"
grep "the aimed read passed" "$d.log" && die "accum: the fault missed the accumulation read"
[ "$(cat "$d/ck/latest")" = "step3" ] || die "accum: latest is $(cat "$d/ck/latest")"
rm -rf "$d/run"
job "$d" "$d.resume.log" "${acc[@]}" --resume --dump "$d.bin" \
  || { cat "$d.resume.log"; die "accum: resume failed"; }
grep "removed .* leftover swap file" "$d.resume.log" > /dev/null \
  || { cat "$d.resume.log"; die "accum: no removal message"; }
[ -z "$(find "$d/nv" -type f)" ] || die "accum: files left: $(find "$d/nv" -type f)"
cmp "$d.bin" "$d.ref.bin" > /dev/null || die "accum: resumed params differ from the uninterrupted job"
printf '{"bench": "io_fault_mpi", "scenario": "grad_accum_read_eio", "np": 3, "read": %d, "seconds": %.2f, "latest": "step3", "resumed_bitwise": true}\n' "$n" "$secs"
echo "ok: grad_accum_read_eio"
