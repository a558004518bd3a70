#!/usr/bin/env bash
# An old client keeps working: the C example compiled against the 1.0 header
# (tests/abi_1_0/zero_c.h, its smaller structs) runs on the current library
# and ends bit for bit where the example built against the current header
# does, at stages 0-3, fp32 and bf16, one rank and 3 MPI ranks.
set -euo pipefail
old="$1"; new="$2"; run_mpi="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
n=0
# The old client finds the library by its soname, as an installed one would.
readelf -d "$old" | grep 'NEEDED.*\[libzero_c\.so\.1\]' > /dev/null \
  || { echo "the 1.0 client does not load libzero_c.so.1"; echo "0 passed, 1 failed"; exit 1; }
for stage in 0 1 2 3; do
  for prec in fp32 bf16; do
    p=''; [ "$prec" = bf16 ] && p='"bf16": {"enabled": true},'
    cfg="$tmp/c_${stage}_${prec}.json"
    echo "{$p \"train_micro_batch_size_per_gpu\": 1, \"steps_per_print\": 0,
      \"zero_optimization\": {\"stage\": $stage, \"reduce_bucket_size\": 300}}" > "$cfg"
    for world in 1 3; do
      for v in old new; do
        bin="$old"; [ "$v" = new ] && bin="$new"
        out="$tmp/${v}_${stage}_${prec}_${world}.bin"
        if [ "$world" = 1 ]; then
          "$bin" --config "$cfg" --steps 6 --quiet --dump "$out" > "$tmp/${v}.log"
        else
          "$run_mpi" "$world" "$bin" --config "$cfg" --steps 6 --quiet --dump "$out" > "$tmp/${v}.log"
        fi
      done
      cmp "$tmp/old_${stage}_${prec}_${world}.bin" "$tmp/new_${stage}_${prec}_${world}.bin" \
        || { echo "stage $stage $prec world $world: the 1.0 client differs"; echo "$n passed, 1 failed"; exit 1; }
      # Its stats line (zero_stats of the 1.0 size) is read as a prefix.
      grep -q '"model_state_bytes_per_rank": [1-9]' "$tmp/old.log" \
        || { echo "no stats from the 1.0 client"; cat "$tmp/old.log"; exit 1; }
      n=$((n + 1))
    done
  done
done
echo "$n passed, 0 failed"
