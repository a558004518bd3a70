#!/bin/sh
# zero_launch_agent.sh: a launch agent in place of ssh for "hosts" that are
# this machine under other names (aliases resolving to 127.0.0.x), so that
# the hostfile launcher drives OpenMPI across several nodes on one machine
# (//tests:multihost_launch_test). OpenMPI calls it as it calls ssh:
#
#   zero_launch_agent.sh [ssh options...] HOST COMMAND...
#
# (zero-launch --launch_agent tools/zero_launch_agent.sh, which passes
# `--mca plm_rsh_agent`). It refuses a HOST that does not resolve to a
# loopback address, then runs COMMAND (OpenMPI's orted) here with
#   ZERO_NODE_ID=HOST   the node zero's topology reads (core/comm/topology.h);
#                       ZERO_AGENT_NODE_ID=0 leaves it unset (OpenMPI's local
#                       ranks are used then);
#   OMPI_MCA_btl_vader_backing_directory=/dev/shm/zero-node-HOST
#                       each "node" its own shared-memory segments: OpenMPI
#                       names them by local rank, which two daemons on one
#                       machine would share;
#   OMPI_MCA_orte_tmpdir_base=/dev/shm/zero-node-HOST/session
#                       each "node" its own session directory: OpenMPI names
#                       it by host name (`hostname`, the same for every
#                       daemon here), so daemons started together raced to
#                       create one directory ("File exists") and wrote one
#                       hwloc.sm topology file at once (orted crashing in
#                       hwloc_shmem_topology_write). An orte_tmpdir_base
#                       given to mpirun reaches the daemons' command lines
#                       and wins over this: give mpirun TMPDIR instead.
# ZERO_AGENT_LOG=FILE appends each HOST started to FILE (tests).
set -eu
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;  # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "zero_launch_agent: usage: zero_launch_agent.sh [ssh options] HOST COMMAND..." >&2
  exit 255
fi
host="$1"
shift
addr=$(getent ahostsv4 "$host" 2>/dev/null | awk 'NR == 1 { print $1 }')
case "$addr" in
  127.*) ;;
  *)
    echo "zero_launch_agent: host '$host' resolves to '${addr:-nothing}', not to this machine (127.0.0.x); use ssh for real hosts" >&2
    exit 255
    ;;
esac
if [ -n "${ZERO_AGENT_LOG:-}" ]; then
  echo "$host" >> "$ZERO_AGENT_LOG"
fi
if [ "${ZERO_AGENT_NODE_ID:-1}" != 0 ]; then
  export ZERO_NODE_ID="$host"
fi
dir="/dev/shm/zero-node-$host"
mkdir -p "$dir/session"
export OMPI_MCA_btl_vader_backing_directory="$dir"
export OMPI_MCA_orte_tmpdir_base="$dir/session"
exec /bin/sh -c "$*"
