#!/usr/bin/env bash
# zero under a real Slurm (Debian's slurm-wlm and munge, started here): a
# munged, a slurmctld and one slurmd on this machine (a node of 4 CPUs,
# oversubscribed), private to this test (its own key, socket, ports and
# directories), stopped and removed at exit. Jobs of 2 and 4 ranks of
# tests/kill_rank_main (stage 3, saving every 3rd step):
#   srun:   srun --mpi=pmix -n N (OpenMPI wired by Slurm's PMIx)
#   sbatch: an sbatch script running zero-launch --launcher slurm
# each ends on exactly the bits of the same job under mpirun, and saved
# the same checkpoint steps. Needs root (the daemons run as root).
set -uo pipefail
bin="$1"; run_mpi="$2"; launch="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
die() { echo "FAILED: $1"; exit 1; }
for t in munged slurmctld slurmd srun sbatch; do
  command -v $t > /dev/null || die "$t not found: tools/install_deps.sh installs slurm-wlm and munge"
done
[ "$(id -u)" = 0 ] || die "the Slurm daemons of this test run as root"

# Short paths: munge's socket path must fit a sockaddr_un.
D=$(mktemp -d /tmp/zero-slurm.XXXXXX)
chmod 755 "$D"
cleanup() {
  local f
  for f in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munge/pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2> /dev/null
  done
  sleep 1
  for f in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/munge/pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2> /dev/null
  done
  rm -rf "$D"
}
trap cleanup EXIT
mkdir -p "$D/munge" "$D/spool" "$D/state" "$D/log"
chmod 700 "$D/munge"
head -c 1024 /dev/urandom > "$D/munge/key"; chmod 400 "$D/munge/key"
munged --force --key-file="$D/munge/key" --socket="$D/munge/sock" --pid-file="$D/munge/pid" \
  --log-file="$D/munge/log" --seed-file="$D/munge/seed" || die "munged did not start"
# Ports of this test's own: a free pair above 20000.
port=$(python3 -c 'import socket
for p in range(20000 + __import__("os").getpid() % 20000, 60000, 2):
    try:
        s1 = socket.socket(); s1.bind(("127.0.0.1", p)); s2 = socket.socket(); s2.bind(("127.0.0.1", p + 1))
        s1.close(); s2.close(); print(p); break
    except OSError: pass')
node=$(hostname)
cat > "$D/slurm.conf" <<EOC
ClusterName=zerotest
SlurmctldHost=$node(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$D/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=/dev/null
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=zero Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOC
export SLURM_CONF="$D/slurm.conf"
slurmctld -f "$SLURM_CONF" || { cat "$D/log/slurmctld.log"; die "slurmctld did not start"; }
slurmd -f "$SLURM_CONF" || { cat "$D/log/slurmd.log"; die "slurmd did not start"; }
up=""
for i in $(seq 1 60); do
  sinfo -h -o %t 2> /dev/null | grep -q idle && { up=1; break; }
  sleep 0.5
done
[ -n "$up" ] || { sinfo; tail -n 20 "$D/log/slurmctld.log" "$D/log/slurmd.log"; die "the node never came up"; }

# OpenMPI over shared memory, as tests/run_mpi.sh, for the Slurm-started ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_tmpdir_base="$D" PMIX_MCA_gds=hash
args() { echo --stage 3 --steps 8 --save-every 3 --timeout 20 --ckpt "$1/ck" --run "$1/run" --dump "$1/params.bin"; }
prep() { rm -rf "$1"; mkdir -p "$1/run" "$1/ck"; }

for np in 2 4; do
  ref="$tmp/mpirun$np"; prep "$ref"
  "$run_mpi" $np "$bin" $(args "$ref") > "$ref/log" 2>&1 || { cat "$ref/log"; die "np $np: mpirun job failed"; }

  d="$tmp/srun$np"; prep "$d"
  timeout 300 srun --mpi=pmix -n $np --oversubscribe -t 5 "$bin" $(args "$d") > "$d/log" 2>&1 \
    || { cat "$d/log"; tail -n 20 "$D/log/slurmd.log"; die "np $np: srun job failed"; }
  cmp -s "$d/params.bin" "$ref/params.bin" || die "np $np: srun job's params differ from mpirun's"
  [ "$(cat "$d/ck/latest")" = "$(cat "$ref/ck/latest")" ] || die "np $np: srun latest differs"
  echo "{\"test\": \"slurm\", \"launch\": \"srun --mpi=pmix\", \"np\": $np, \"bitwise_vs_mpirun\": true}"

  d="$tmp/sbatch$np"; prep "$d"
  cat > "$d/job.sh" <<EOS
#!/bin/bash
#SBATCH --ntasks=$np
#SBATCH --oversubscribe
#SBATCH --time=5
#SBATCH --output=$d/slurm-%j.out
python3 "$launch" --launcher slurm --launcher_args=--oversubscribe "$bin" $(args "$d")
EOS
  timeout 300 sbatch --wait "$d/job.sh" > "$d/log" 2>&1 \
    || { cat "$d/log" "$d"/slurm-*.out; die "np $np: sbatch job failed"; }
  grep -q "srun --mpi=pmix" "$d"/slurm-*.out || { cat "$d"/slurm-*.out; die "np $np: zero-launch did not use srun"; }
  cmp -s "$d/params.bin" "$ref/params.bin" || { cat "$d"/slurm-*.out; die "np $np: sbatch job's params differ from mpirun's"; }
  [ "$(ls "$d/run" | grep -c '^pid\.')" = $np ] || die "np $np: sbatch job did not start $np ranks"
  echo "{\"test\": \"slurm\", \"launch\": \"sbatch + zero-launch --launcher slurm\", \"np\": $np, \"bitwise_vs_mpirun\": true}"
done
echo PASSED
