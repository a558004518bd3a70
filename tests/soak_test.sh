#!/usr/bin/env bash
# A long run leaks nothing (soak_main under mpirun -np 3): thousands of
# stage-3 steps with a live budget, NVMe optimizer state and a save / load /
# export every 50 steps keep RSS within 512 KiB and the open fds exactly flat
# after warm-up, on every rank; the loads change no bit (the final params
# equal a run without save/load/export); nothing temporary is left (no
# .partial tag, no temporary export, no NVMe swap file). A run that leaks
# 1 KiB a step and an fd a cycle must fail both checks (the checks can fail).
# Under --config=asan/tsan the RSS bound is reported, not asserted (see
# soak_main.cc); the fd checks hold there too.
# STEPS overrides the length (bench/soak.sh runs it long).
set -uo pipefail
bin="$1"; run_mpi="$2"
steps="${STEPS:-4000}"; every=50; warmup=$((steps / 8))
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
pass=0
die() { echo "FAILED: $1"; echo "$pass passed, 1 failed"; exit 1; }
ok() { pass=$((pass + 1)); echo "ok: $1"; }

soak() {  # soak NAME [flags...]: one job; its JSON lines in NAME/log
  local d="$tmp/$1"; shift
  rm -rf "$d"; mkdir -p "$d/ck" "$d/nv" "$d/ex"
  "$run_mpi" 3 "$bin" --ckpt "$d/ck" --nvme "$d/nv" --export "$d/ex/model.safetensors" \
    --every $every --sample $every --warmup $warmup --dump "$d/params.bin" "$@" > "$d/log" 2>&1
}

start=$(date +%s)
soak main --steps "$steps"; rc=$?
grep '"bench": "soak"' "$tmp/main/log"
[ $rc -eq 0 ] || { cat "$tmp/main/log"; die "the soak failed (exit $rc)"; }
[ "$(grep -c '"ok": true' "$tmp/main/log")" -eq 3 ] || die "not every rank reported flat RSS and fds"
if grep '"rss_asserted": false' "$tmp/main/log" > /dev/null; then
  ok "$steps steps at np 3: fds flat on every rank (sanitizer build: RSS reported, not asserted)"
else
  ok "$steps steps at np 3: RSS within the bound and fds flat on every rank"
fi

soak plain --steps "$steps" --plain || { cat "$tmp/plain/log"; die "the plain run failed"; }
cmp "$tmp/main/params.bin" "$tmp/plain/params.bin" > /dev/null \
  || die "saving and loading back every $every steps changed the params"
ok "loading back what was just saved changed no bit"

# Nothing temporary left: the two tags and latest, one export, no swap file.
left=$(cd "$tmp/main" && find ck ex nv -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')
[ "$left" = "ck/a ck/b ck/latest ex/model.safetensors " ] || die "left behind: $left"
ls -A "$tmp/main/nv" | grep . > /dev/null && die "NVMe swap files left: $(ls -A "$tmp/main/nv")"
ok "no temporary files left (checkpoint staging, export, NVMe)"

# The checks can fail: a deliberate leak is caught by both.
soak leak --steps 1200 --warmup 200 --leak; rc=$?
[ $rc -ne 0 ] || { cat "$tmp/leak/log"; die "a leaking run passed"; }
[ "$(grep -c '"rss_ok": false, "fds_ok": false' "$tmp/leak/log")" -eq 3 ] \
  || { cat "$tmp/leak/log"; die "the leak was not caught by both checks on every rank"; }
ok "a run leaking 1 KiB a step and an fd a cycle fails both checks"
echo "soak test took $(( $(date +%s) - start )) s"
echo "$pass passed, 0 failed"
