#!/usr/bin/env bash
# Builds the CUDA targets here (bazel --config=cuda) and packs what the GPU
# machine lacks into one folder (default device_bundle/, gitignored, at most
# 60 MiB), so tools/device_check.sh runs there without Bazel, Abseil,
# GoogleTest or OpenMPI (docs/ARCHITECTURE.md, "Devices"):
#
#   bin/   libzero_c.so (+ .so.1), the GPU test binaries, the kernel
#          benchmark, the C example, mpi_engine_main
#   lib/   every shared library they load that is not the C/C++ runtime, the
#          CUDA runtime or NCCL (those come from the GPU machine: cudart from
#          its CUDA toolkit, libnccl.so.2 from the NCCL pip wheel): Abseil,
#          GoogleTest, Highway, liburing, xxhash, OpenMPI and what it loads,
#          and the test binaries' own Bazel-built libraries
#   ompi/  OpenMPI's runtime laid out under one prefix (orted, mpirun, its
#          components, help texts, PMIx's components), found there through
#          OPAL_PREFIX / PMIX_INSTALL_PREFIX (set by device_check.sh)
#   python/   pytest and what it imports (pure Python, Debian's), used by
#          device_check.sh only where that machine's Python has no pytest
#   wheels/  DeepSpeed for bench/gpt_device_bench.py's peer (the GPU machine
#          has no internet): its wheel built without ops (its CPU Adam
#          JIT-builds there; ZERO_BUNDLE_DS_WHEEL names one, else pip builds
#          it from ZERO_BUNDLE_DS_PYTHON's pip, or takes its cache) and its
#          dependencies but torch and numpy, downloaded by pip for the GPU
#          machine's Python (ZERO_BUNDLE_PY, 3.12); ~6 MiB.
#          ZERO_BUNDLE_DS=0 leaves it out; a failed download leaves it out
#          with a warning (the bench then says "not available")
#   MANIFEST  one line per file: bytes, path; the sum last
#
#   tools/device_bundle.sh [OUTDIR]
#   BAZEL=... tools/device_bundle.sh     # another bazel
#   ZERO_BUNDLE_SKIP_BUILD=1 ZERO_BUNDLE_BIN=DIR tools/device_bundle.sh
#                                        # pack binaries already built in DIR
#                                        # (laid out as bazel-bin; tests)
#
# Exit status: 0 packed within the size limit; 1 a build or copy failed, or
# the bundle is over ZERO_BUNDLE_MAX_MIB (60).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-device_bundle}"
BAZEL="${BAZEL:-bazel}"
MAX_MIB="${ZERO_BUNDLE_MAX_MIB:-60}"

# Relative to bazel-bin; what device_check.sh runs from the bundle.
BINS=(capi/libzero_c.so kernels/cuda/cuda_kernels_test core/cuda_device_test
      core/nccl_communicator_test tests/gpu_engine_test tests/mpi_engine_main
      bench/cuda/cuda_kernels_bench bench/device_step_bench examples/c/mlp_train)
if [ -z "${ZERO_BUNDLE_SKIP_BUILD:-}" ]; then
  targets=()
  for b in "${BINS[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
  "$BAZEL" build --config=cuda "${targets[@]}" //capi:libzero_c.so.1
  BIN="$("$BAZEL" info --config=cuda bazel-bin)"
else
  BIN="${ZERO_BUNDLE_BIN:?ZERO_BUNDLE_BIN: the folder of built binaries}"
fi

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/bin" "$OUTDIR/lib"
for b in "${BINS[@]}"; do
  [ -e "$BIN/$b" ] || { echo "device_bundle: FAILED: $BIN/$b was not built" >&2; exit 1; }
  cp -L "$BIN/$b" "$OUTDIR/bin/"
done
cp -L "$OUTDIR/bin/libzero_c.so" "$OUTDIR/bin/libzero_c.so.1"

# The GPU machine brings these: the C/C++ runtime, the CUDA driver and
# runtime, NCCL (its pip wheel), and the dynamic loader.
skip_lib() {
  case "$(basename "$1")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|\
    libstdc++.so*|libcuda.so*|libcudart.so*|libnccl.so*|libnvidia*|linux-vdso*) return 0;;
  esac
  return 1
}
# Every library a file loads (ldd resolves it here, from its build place).
add_libs() {
  local f="$1" lib
  while read -r lib; do
    [ -n "$lib" ] && [ -f "$lib" ] || continue
    skip_lib "$lib" && continue
    [ -e "$OUTDIR/lib/$(basename "$lib")" ] || cp -L "$lib" "$OUTDIR/lib/"
  done < <(ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}')
}
for b in "${BINS[@]}"; do add_libs "$BIN/$b"; done

# OpenMPI's runtime under one prefix (Debian's layout below it), for
# OPAL_PREFIX: what MPI_Init needs besides libmpi (orted for a singleton,
# mpirun for several ranks, the components it dlopens, its help texts), and
# PMIx's components (PMIX_INSTALL_PREFIX).
OMPI_LIB=/usr/lib/x86_64-linux-gnu/openmpi/lib
PMIX_LIB=/usr/lib/x86_64-linux-gnu/pmix2/lib
if [ -d "$OMPI_LIB/openmpi3" ]; then
  P="$OUTDIR/ompi"
  mkdir -p "$P/bin" "$P/lib/x86_64-linux-gnu/openmpi/lib" "$P/share" "$P/etc"
  cp -L /usr/bin/orted "$P/bin/"
  cp -L "$(readlink -f /usr/bin/mpirun)" "$P/bin/mpirun"
  cp -rL "$OMPI_LIB/openmpi3" "$P/lib/x86_64-linux-gnu/openmpi/lib/"
  [ -d /usr/share/openmpi ] && cp -rL /usr/share/openmpi "$P/share/"
  [ -d /usr/share/pmix ] && cp -rL /usr/share/pmix "$P/share/"
  if [ -d "$PMIX_LIB/pmix" ]; then
    mkdir -p "$P/lib/x86_64-linux-gnu/pmix2/lib"
    cp -rL "$PMIX_LIB/pmix" "$P/lib/x86_64-linux-gnu/pmix2/lib/"
  fi
  # Components that need what the GPU machine may lack (InfiniBand verbs,
  # UCX, libfabric, CUDA-aware pieces): dropped with their libraries; the
  # check runs on one node over shared memory and TCP.
  rm -f "$P"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*{ucx,ofi,verbs,openib,psm,cuda,java}*.so
  add_libs /usr/bin/orted
  add_libs "$P/bin/mpirun"
  for c in "$P"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so \
           "$P"/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
    [ -f "$c" ] && add_libs "$c"
  done
fi

# pytest for the Python device tests, should the GPU machine lack it.
PYSRC=/usr/lib/python3/dist-packages
if [ -d "$PYSRC/_pytest" ]; then
  mkdir -p "$OUTDIR/python"
  for m in pytest _pytest pluggy iniconfig packaging py py.py; do
    [ -e "$PYSRC/$m" ] && cp -rL "$PYSRC/$m" "$OUTDIR/python/"
  done
  find "$OUTDIR/python" -name __pycache__ -type d -prune -exec rm -rf {} +
fi

# DeepSpeed's wheel and its dependencies for the GPU machine's Python.
if [ "${ZERO_BUNDLE_DS:-1}" != 0 ]; then
  DSPY="${ZERO_BUNDLE_DS_PYTHON:-/opt/zero-venvs/torch-current/bin/python}"
  PYV="${ZERO_BUNDLE_PY:-3.12}"
  W="$OUTDIR/wheels"
  mkdir -p "$W"
  ok=true
  if [ -n "${ZERO_BUNDLE_DS_WHEEL:-}" ]; then
    cp "$ZERO_BUNDLE_DS_WHEEL" "$W/" || ok=false
  else
    # setup.py imports torch: no build isolation, the ops left to JIT.
    DS_BUILD_OPS=0 timeout 300 "$DSPY" -m pip wheel -q --disable-pip-version-check --no-deps \
      --no-build-isolation -w "$W" "deepspeed==${ZERO_BUNDLE_DS_VERSION:-0.19.8}" || ok=false
  fi
  # Its requirements (setup.py) less torch and numpy, which that machine has.
  $ok && timeout 300 "$DSPY" -m pip download -q --disable-pip-version-check --only-binary=:all: \
    --python-version "$PYV" --implementation cp --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$W" \
    einops hjson msgpack ninja packaging psutil py-cpuinfo pydantic tqdm nvidia-ml-py || ok=false
  if ! $ok || ! compgen -G "$W/deepspeed-*.whl" > /dev/null; then
    echo "device_bundle: warning: DeepSpeed not bundled (pip failed); the GPT bench's DeepSpeed modes will say not available" >&2
    rm -rf "$W"
  fi
fi

# The manifest and the limit.
(cd "$OUTDIR" && find . -type f -printf '%s %P\n' | sort -k2) > "$OUTDIR/MANIFEST.tmp"
total=$(awk '{s += $1} END {print s + 0}' "$OUTDIR/MANIFEST.tmp")
mv "$OUTDIR/MANIFEST.tmp" "$OUTDIR/MANIFEST"
echo "$total total" >> "$OUTDIR/MANIFEST"
mib=$(( (total + 1048575) / 1048576 ))
echo "{\"kind\":\"bundle\",\"dir\":\"$OUTDIR\",\"files\":$(( $(wc -l < "$OUTDIR/MANIFEST") - 1 )),\"bytes\":$total,\"mib\":$mib,\"max_mib\":$MAX_MIB}"
if [ "$mib" -gt "$MAX_MIB" ]; then
  echo "device_bundle: FAILED: ${mib} MiB is over the ${MAX_MIB} MiB limit" >&2
  exit 1
fi
