#!/usr/bin/env bash
# ZeRO-Infinity at scale: tests/infinity_rss_main — stage 3, bf16,
# params and optimizer on NVMe, one rank, built from init specs (normal),
# synthetic gradients for the step (a fixed pattern; the math is Adam's all
# the same) — at 0.25B / 0.5B / 1B params (and 3B with --big, which needs
# ~50 GB of free disk under DIR). One JSON line per size: finalize time,
# step time, RSS after finalize and after the steps, peak RSS, disk bytes
# and bytes per parameter; then the slope of RSS per parameter, and raw
# sequential O_DIRECT write+read of the step's IO volume in the same run
# against the step's own IO rate (step_disk_bytes: what the process read and
# wrote to storage during the step, /proc/self/io: optimizer state, param
# files and gradient files) (the step includes the CPU Adam: on this
# shared 2-core machine it is compute-bound, so the ratio says little about
# the disk; figures are noisy).
#   bash bench/infinity_bench.sh [DIR=/tmp] [--big]     (SIZES="4 8" to choose layers;
#   STEPS=2 runs two steps: the mean and the last step's ratio both printed;
#   BREAKDOWN=1 adds the step's wall_clock_breakdown lines and grad_fill_s;
#   PIPELINE=0 runs the update's gradient reads and param writes blocking
#   on the caller's thread, as before core/engine/update_io_pipeline;
#   AB=REPS instead runs the last size REPS times with PIPELINE 0 and 1
#   interleaved, each followed by its own raw O_DIRECT measurement)
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:-/tmp}"; big="${2:-}"
bazel build //tests:infinity_rss_main >&2
dir=$(mktemp -d "$base/zero_infinity.XXXXXX")
trap 'rm -rf "$dir"' EXIT
sizes="${SIZES:-4 8 15}"   # layers x 8192^2 = 0.27B, 0.54B, 1.01B
[ "$big" = "--big" ] && sizes="$sizes 45"   # 3.02B (SIZES=" " --big: that one alone)
out=$(mktemp)
run() {  # layers pipeline
  bazel-bin/tests/infinity_rss_main --layers "$1" --hidden 8192 --nvme "$dir" \
    --dtype bf16 --steps "${STEPS:-1}" --breakdown "${BREAKDOWN:-0}" --pipeline "$2"
}
# Raw sequential O_DIRECT write then read of the step's volume (capped at
# 8 GiB) right after the run in $1 (its last infinity_rss line), against the step's
# own IO rate.
raw_vs_step() {
  python3 - "$1" "$dir" <<'PY'
import json, mmap, os, sys, time
b = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))
     if r.get("bench") == "infinity_rss"][-1]
vol = min(b["step_disk_bytes"], 8 << 30) // 2
path = os.path.join(sys.argv[2], "raw.bin")
blk = 8 << 20
buf = mmap.mmap(-1, blk)
fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
t = time.time()
for off in range(0, vol, blk):
    os.pwrite(fd, buf, off)
os.fsync(fd)
tw = time.time() - t
t = time.time()
for off in range(0, vol, blk):
    os.preadv(fd, [buf], off)
tr = time.time() - t
os.close(fd)
os.unlink(path)
raw = 2 * vol / (tw + tr)
step_rate = b["step_disk_bytes"] / max(b["step_s"], 1e-9)
# The last step (from the second on, gathers prefetch along the first
# step's trace: what training runs at) apart from the mean over the steps.
last_rate = b["last_step_disk_bytes"] / max(b["last_step_s"], 1e-9)
print(json.dumps({"bench": "infinity_io", "raw_odirect_bytes_per_s": int(raw),
                  "raw_write_bytes_per_s": int(vol / tw), "raw_read_bytes_per_s": int(vol / tr),
                  "step_io_bytes_per_s": int(step_rate), "ratio": round(step_rate / raw, 3),
                  "last_step_io_bytes_per_s": int(last_rate),
                  "last_step_ratio": round(last_rate / raw, 3),
                  "note": "step time includes the CPU optimizer and the gathers; noisy shared machine"}))
PY
}
if [ -n "${AB:-}" ]; then
  last=${sizes##* }
  for rep in $(seq "$AB"); do
    for p in 0 1; do
      echo "{\"bench\": \"infinity_ab\", \"rep\": $rep, \"pipeline\": $p, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
      run "$last" "$p" | grep '^{' > "$out"
      cat "$out"
      raw_vs_step "$out"
    done
  done
  exit 0
fi
for layers in $sizes; do
  run "$layers" "${PIPELINE:-1}" | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, sys
runs = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))
        if r.get("bench") == "infinity_rss"]
a, b = runs[0], runs[-1]
for key in ("rss_after_finalize_kib", "rss_after_step_kib", "peak_rss_kib") if len(runs) > 1 else ():
    slope = (b[key] - a[key]) * 1024.0 / (b["params"] - a["params"])
    print(json.dumps({"bench": "infinity_rss_slope", "what": key, "bytes_per_param": round(slope, 4),
                      "from_params": a["params"], "to_params": b["params"]}))
PY
raw_vs_step "$out"
