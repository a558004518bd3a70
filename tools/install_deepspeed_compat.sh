#!/usr/bin/env bash
# Installs zero's DeepSpeed compatibility layer (bindings/python/zero_deepspeed:
# the `deepspeed` import name backed by zero.torch) into a Python as an opt-in:
# a `zero_deepspeed.pth` file in its site-packages that puts the layer first
# on sys.path only when ZERO_DEEPSPEED=1 is set. Without it the Python imports
# whatever deepspeed it has (the real one, or none). Idempotent; `--uninstall`
# removes the file. zero itself must be importable by that Python.
#
# Usage: tools/install_deepspeed_compat.sh [--uninstall] [PYTHON | --site-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
uninstall=0
if [ "${1:-}" = "--uninstall" ]; then uninstall=1; shift; fi
if [ "${1:-}" = "--site-dir" ]; then
  site=$2
else
  py=${1:-python3}
  site=$("$py" -c 'import site, sys; print((site.getsitepackages() or [site.getusersitepackages()])[0])')
fi
pth="$site/zero_deepspeed.pth"
if [ "$uninstall" = 1 ]; then
  rm -f "$pth"
  echo "install_deepspeed_compat: removed $pth" >&2
  exit 0
fi
layer=$(cd bindings/python/zero_deepspeed && pwd)
mkdir -p "$site"
# A .pth line starting with `import` runs at startup (site.py).
printf '%s\n' "import os, sys; os.environ.get('ZERO_DEEPSPEED') == '1' and sys.path.insert(0, '$layer')" > "$pth"
echo "install_deepspeed_compat: $pth (ZERO_DEEPSPEED=1 makes \`import deepspeed\` zero's layer)" >&2
